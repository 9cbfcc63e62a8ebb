import ArgumentParser
import Foundation
import ODataCore

struct PayloadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "payload",
        abstract: "Read a JSON payload (V4, or V2 verbose with --v2) and print its entities as normalized JSON."
    )

    @Option(help: "The service's $metadata document, to type the values.")
    var metadata: String?

    @Option(help: "The entity set the payload belongs to.")
    var entitySet: String?

    @Flag(help: "The payload is V2 verbose JSON.")
    var v2 = false

    @Argument(help: "The payload file.")
    var payload: String

    func run() throws {
        let model = try metadata.map { try loadModel($0) }
        var entityType: String?
        if let entitySet {
            guard let model else { throw CLIFailure("--entity-set needs --metadata") }
            guard let type = model.entityType(ofEntitySet: entitySet) else { throw CLIFailure("\(entitySet) is not an entity set of the model") }
            entityType = type.qualifiedName
        }
        let bytes: [UInt8]
        do {
            bytes = Array(try Data(contentsOf: URL(fileURLWithPath: payload)))
        } catch {
            throw CLIFailure("cannot read \(payload): \(error.localizedDescription)")
        }
        do {
            let root = try JSONValue.parse(bytes)
            let content = v2 ? (root["d"] ?? root) : root
            let isCollection: Bool
            if case .array = content { isCollection = true } else { isCollection = v2 ? content["results"] != nil : content["value"]?.arrayValue != nil }
            let tree: TreeJSON
            if v2 {
                let reader = V2JSONReader(model: model)
                tree = isCollection ? try reader.readCollection(bytes, entityType: entityType).normalizedJSON
                    : try reader.readEntity(bytes, entityType: entityType).normalizedJSON
            } else {
                let reader = V4JSONReader(model: model)
                tree = isCollection ? try reader.readCollection(bytes, entityType: entityType).normalizedJSON
                    : try reader.readEntity(bytes, entityType: entityType).normalizedJSON
            }
            print(tree.serialized(pretty: true))
        } catch {
            throw CLIFailure("\(payload): \(error)")
        }
    }
}

struct BatchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "batch",
        abstract: "Read a multipart $batch body and print a JSON summary of its parts."
    )

    @Option(help: "The multipart boundary (found from the first delimiter line when omitted).")
    var boundary: String?

    @Argument(help: "The batch file.")
    var file: String

    func run() throws {
        let bytes: [UInt8]
        do {
            bytes = Array(try Data(contentsOf: URL(fileURLWithPath: file)))
        } catch {
            throw CLIFailure("cannot read \(file): \(error.localizedDescription)")
        }
        do {
            print(try MultipartBatch.read(bytes, boundary: boundary).summaryJSON.serialized(pretty: true))
        } catch {
            throw CLIFailure("\(file): \(error)")
        }
    }
}
