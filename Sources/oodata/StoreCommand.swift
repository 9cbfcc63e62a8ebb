import ArgumentParser
import Foundation
import ODataCore
import ODataStore

struct StoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store",
        abstract: "Create, fill, query and re-key local OData stores.",
        subcommands: [Init.self, Import.self, Query.self, Rekey.self, Encrypt.self]
    )

    struct Init: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a store for a $metadata document.")
        @Option(help: "The $metadata document.") var metadata: String
        @Option(help: "The store file to create.") var store: String
        @Option(help: "Encryption key (SQLCipher); omit for an unencrypted store.") var key: String?

        func run() async throws {
            let model = try loadModel(metadata)
            let created = try await storeFailure { try await Store.create(path: store, model: model, key: key) }
            let sets = created.schema.tables.count
            created.close()
            print("created \(store) with \(sets) entity sets\(key == nil ? "" : " (encrypted)")")
        }
    }

    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Load a V4 or V2 JSON collection into an entity set (existing keys are replaced).")
        @Option(help: "The store file.") var store: String
        @Option(help: "Encryption key of the store.") var key: String?
        @Option(help: "The entity set to load into.") var entitySet: String
        @Flag(help: "The payload is V2 verbose JSON.") var v2 = false
        @Argument(help: "The payload file.") var payload: String

        func run() async throws {
            let opened = try await storeFailure { try await Store.open(path: store, key: key) }
            defer { opened.close() }
            guard let type = opened.model.entityType(ofEntitySet: entitySet) else { throw CLIFailure("\(entitySet) is not an entity set of the store") }
            let bytes: [UInt8]
            do {
                bytes = Array(try Data(contentsOf: URL(fileURLWithPath: payload)))
            } catch {
                throw CLIFailure("cannot read \(payload): \(error.localizedDescription)")
            }
            let entities: [Entity]
            do {
                entities = v2 ? try V2JSONReader(model: opened.model).readCollection(bytes, entityType: type.qualifiedName).entities
                    : try V4JSONReader(model: opened.model).readCollection(bytes, entityType: type.qualifiedName).entities
            } catch {
                throw CLIFailure("\(payload): \(error)")
            }
            let set = entitySet
            try await storeFailure { try await opened.write { writer in for entity in entities { try writer.upsert(entity, into: set) } } }
            print("imported \(entities.count) entities into \(entitySet)")
        }
    }

    struct Query: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Answer a read request from the store and print OData V4 JSON.")
        @Option(help: "The store file.") var store: String
        @Option(help: "Encryption key of the store.") var key: String?
        @Option(help: "Largest number of entities per page (a next link follows).") var pageSize: Int?
        @Argument(help: "The request, relative to the service root, e.g. \"Products?$filter=Price gt 5\".") var url: String

        func run() async throws {
            let opened = try await storeFailure { try await Store.open(path: store, key: key) }
            defer { opened.close() }
            let result = try await storeFailure { try await opened.query(url, pageSize: pageSize) }
            let writer = V4JSONWriter(format: JSONFormat(metadata: .minimal))
            let bytes: [UInt8]
            switch result {
            case .collection(var collection):
                if let first = url.split(separator: "?").first, !first.contains("/") && !first.contains("(") {
                    collection.context = "$metadata#" + first
                }
                bytes = writer.write(collection)
            case .entity(let entity?): bytes = writer.write(entity)
            case .entity(nil): throw CLIFailure("not found: \(url)")
            case .value(let value): bytes = writer.writeValue(value)
            case .count(let count): bytes = Array(String(count).utf8)
            case .references(let ids):
                var collection = EntityCollection()
                collection.references = ids
                bytes = writer.write(collection)
            }
            FileHandle.standardOutput.write(Data(bytes + [0x0A]))
        }
    }

    struct Rekey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Change the encryption key of a store.")
        @Option(help: "The store file.") var store: String
        @Option(help: "The current key.") var key: String?
        @Option(help: "The new key.") var newKey: String

        func run() async throws {
            let opened = try await storeFailure { try await Store.open(path: store, key: key) }
            defer { opened.close() }
            try await storeFailure { try await opened.rekey(to: newKey) }
            print("re-keyed \(store): it opens with the new key only")
        }
    }

    struct Encrypt: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Encrypt an unencrypted store with a key.")
        @Option(help: "The store file.") var store: String
        @Option(help: "The key to encrypt it with.") var newKey: String

        func run() async throws {
            // Opening it without a key proves it is an unencrypted store (an encrypted one fails).
            let opened = try await storeFailure { try await Store.open(path: store, key: nil) }
            opened.close()
            try await storeFailure { try Store.encrypt(path: store, key: newKey) }
            print("encrypted \(store): it opens with the new key only")
        }
    }
}

/// Runs store work, turning its errors into messages for the user.
@discardableResult
func storeFailure<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as CLIFailure {
        throw error
    } catch {
        throw CLIFailure("\(error)")
    }
}
