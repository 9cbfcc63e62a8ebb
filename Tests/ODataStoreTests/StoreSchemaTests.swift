import Foundation
import Testing
import ODataCore
@testable import ODataStore

enum StoreFixtures {
    static let conformance: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("shared/odata-conformance")

    static var directory: URL {
        if let override = ProcessInfo.processInfo.environment["ODATA_CONFORMANCE_DIR"] { return URL(fileURLWithPath: override) }
        return conformance
    }

    static func model(_ relative: String) throws -> Model {
        try MetadataParser().parse(try Data(contentsOf: directory.appendingPathComponent(relative)))
    }
}

@Suite struct StoreSchemaTests {
    @Test func tripPinLayout() throws {
        let model = try StoreFixtures.model("payloads/v4-json/olingo4-trippin-data/trippin.xml")
        let schema = try StoreSchema(model: model)
        let people = try #require(schema.table(forEntitySet: "People"))
        #expect(people.name == "es_People")
        #expect(people.keyColumns == ["UserName"])
        #expect(people.column(["UserName"])?.nullable == false)
        #expect(people.collections.map(\.property).sorted() == ["AddressInfo", "Emails"])
        let emails = try #require(people.collections.first { $0.property == "Emails" })
        #expect(emails.columns.map(\.name) == ["value"])
        let address = try #require(people.collections.first { $0.property == "AddressInfo" })
        #expect(address.columns.map(\.name).contains("City/Name"))
        #expect(people.column(["Gender"])?.kind == .enumeration("Microsoft.OData.SampleService.Models.TripPin.PersonGender"))
        #expect(people.isOpen)
        let friends = try #require(people.navigation("Friends"))
        #expect(friends.relation == .linkTable(StoreSchema.LinkTable(name: "lk_People/Friends", reversed: false)))
        #expect(friends.isCollection)
        #expect(friends.targetEntitySet == "People")
        // The schema creates on SQLCipher.
        let dir = TemporaryDirectory()
        let db = try Connection(path: dir.path("trippin.sqlite"), options: .init(key: "k"))
        for statement in schema.createStatements() { try db.execute(statement) }
        let tables = try db.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").compactMap { row -> String? in
            if case .text(let name) = row[0] { return name }
            return nil
        }
        #expect(tables.contains("es_People/Emails"))
        #expect(tables.contains("lk_People/Friends"))
        #expect(tables.contains("es_People/$dynamic"))
    }

    @Test func foreignKeysWhereConstraintsExist() throws {
        let model = try StoreFixtures.model("metadata/v2/northwind-v2-pyodata.xml")
        let schema = try StoreSchema(model: model, indexes: ["Products": [["ProductName"]]])
        let products = try #require(schema.table(forEntitySet: "Products"))
        #expect(products.navigation("Category")?.relation == .foreignKey(sourceColumns: ["CategoryID"], targetColumns: ["CategoryID"]))
        let categories = try #require(schema.table(forEntitySet: "Categories"))
        // The other direction uses the partner's constraint.
        #expect(categories.navigation("Products")?.relation == .foreignKey(sourceColumns: ["CategoryID"], targetColumns: ["CategoryID"]))
        let statements = schema.createStatements()
        #expect(statements.contains { $0.contains("CREATE INDEX IF NOT EXISTS \"es_Products/$fk/CategoryID\"") })
        #expect(statements.contains { $0.contains("\"es_Products/$index/ProductName\"") && $0.contains("\"ProductName\"") })
        let dir = TemporaryDirectory()
        let db = try Connection(path: dir.path("nw.sqlite"))
        for statement in statements { try db.execute(statement) }
        #expect(throws: StoreError.self) { try StoreSchema(model: model, indexes: ["Products": [["Nope"]]]) }
        #expect(throws: StoreError.self) { try StoreSchema(model: model, indexes: ["Nope": [["ProductName"]]]) }
    }

    /// A Northwind product with the properties it needs.
    static func product(_ id: Int, category: Int? = nil) -> Entity {
        var product = Entity()
        product["ProductID"] = .primitive(.int32(Int32(id)))
        product["ProductName"] = .primitive(.string("P\(id)"))
        if let category { product["CategoryID"] = .primitive(.int32(Int32(category))) }
        product["Discontinued"] = .primitive(.boolean(false))
        return product
    }

    /// The names of a store's indexes.
    static func indexNames(_ store: Store) async throws -> Set<String> {
        try await store.read { reader in
            Set(try reader.connection.query("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL").compactMap { row -> String? in
                if case .text(let name) = row[0] { return name }
                return nil
            })
        }
    }

    @Test func lookupIndexesCanBeDeferredAndAreMadeAtTheLatestOnOpen() async throws {
        let model = try StoreFixtures.model("metadata/v2/northwind-v2-pyodata.xml")
        let dir = TemporaryDirectory()
        let lookup: Set<String> = ["es_Products/$fk/CategoryID", "es_Products/$fk/SupplierID", "es_Products/$index/ProductName"]
        // Made at once by default.
        let eager = try await Store.create(path: dir.path("eager.sqlite"), model: model, key: "k", indexes: ["Products": [["ProductName"]]])
        #expect(try await Self.indexNames(eager).isSuperset(of: lookup.union(["es_Products/$key"])))
        eager.close()
        // Deferred: only the unique indexes, which inserts need; reads work without the others.
        let path = dir.path("deferred.sqlite")
        let store = try await Store.create(path: path, model: model, key: "k", indexes: ["Products": [["ProductName"]]], deferringLookupIndexes: true)
        var names = try await Self.indexNames(store)
        #expect(names.contains("es_Products/$key"))
        #expect(names.isDisjoint(with: lookup), "\(names)")
        try await store.write { writer in
            try writer.bulkInsert((1...30).map { Self.product($0, category: $0 % 3) }, into: "Products")
        }
        #expect(try await store.query("Products/$count?$filter=CategoryID eq 1") == .count(10))
        // Made at the end of the fill, or at the next open when the fill never got there.
        store.close()
        let reopened = try await Store.open(path: path, key: "k")
        names = try await Self.indexNames(reopened)
        #expect(names.isSuperset(of: lookup), "\(names)")
        let plan = try await reopened.read { reader in
            // (A statement first, so that this connection reloads the changed schema.)
            _ = try reader.connection.query("SELECT count(*) FROM \"es_Products\"")
            return try reader.connection.query("EXPLAIN QUERY PLAN SELECT _rowid FROM \"es_Products\" WHERE \"CategoryID\" = 1")
        }.description
        #expect(plan.contains("es_Products/$fk/CategoryID"), "\(plan)")
        try await reopened.createLookupIndexes()
        #expect(try await Self.indexNames(reopened) == names)
        // The writer's page cache is small only while an index is built.
        let cache = try await reopened.write { writer in try writer.connection.query("PRAGMA cache_size").first?.first }
        #expect(cache == .integer(-Int64(Connection.keyedCacheKiB)))
        #expect(try await reopened.query("Products/$count?$filter=CategoryID eq 1") == .count(10))
        reopened.close()
    }

    @Test func aBulkFillWritesWithoutTheLogAndEndsInWALMode() async throws {
        let model = try StoreFixtures.model("metadata/v2/northwind-v2-pyodata.xml")
        let dir = TemporaryDirectory()
        let store = try await Store.create(path: dir.path("fill.sqlite"), model: model, key: "k")
        func pragma(_ name: String) async throws -> DatabaseValue? {
            try await store.write { writer in try writer.connection.query("PRAGMA \(name)").first?.first }
        }
        #expect(try await store.setBulkFill(true))
        #expect(try await pragma("journal_mode") == .text("memory"))
        #expect(try await pragma("synchronous") == .integer(0))
        try await store.write { writer in try writer.bulkInsert([Self.product(1)], into: "Products") }
        let log = dir.path("fill.sqlite") + "-wal"
        let logSize = { ((try? FileManager.default.attributesOfItem(atPath: log))?[.size] as? NSNumber)?.intValue ?? 0 }
        #expect(logSize() == 0, "no write-ahead log while filling, and no frames kept from before it")
        #expect(try await store.setBulkFill(false))
        #expect(try await pragma("journal_mode") == .text("wal"))
        #expect(try await pragma("synchronous") == .integer(2))
        // The log is made as long as it gets before its first checkpoint, so that commits do
        // not grow the file; the rows written while filling are read from the file.
        #expect(logSize() >= 32 + 1_000 * (4_096 + 24))
        #expect(try await store.query("Products/$count") == .count(1))
        #expect(try await pragma("integrity_check") == .text("ok"))
        // While a reader has the file open, the journal stays a log.
        #expect(try await store.query("Products/$count") == .count(1))
        #expect(try await store.setBulkFill(true) == false)
        #expect(try await pragma("journal_mode") == .text("wal"))
        #expect(try await pragma("synchronous") == .integer(1))
        #expect(try await store.setBulkFill(false))
        try await store.write { writer in try writer.bulkInsert([Self.product(2)], into: "Products") }
        store.close()
        // The log stays at its length when the store closes, and the store opens with both rows.
        #expect(logSize() >= 32 + 1_000 * (4_096 + 24))
        let reopened = try await Store.open(path: dir.path("fill.sqlite"), key: "k")
        #expect(try await reopened.query("Products/$count") == .count(2))
        reopened.close()
    }

    @Test func decimalsDatesAndComplexColumnsGetTheirStorage() throws {
        let model = try StoreFixtures.model("metadata/v4/northwind-v4.xml")
        let schema = try StoreSchema(model: model)
        let orders = try #require(schema.table(forEntitySet: "Orders"))
        #expect(orders.column(["Freight"])?.kind == .primitive(.decimal))
        #expect(orders.column(["Freight"])?.sqlType == "BLOB")
        #expect(orders.column(["OrderDate"])?.sqlType == "TEXT")
        #expect(orders.keyColumns == ["OrderID"])
    }
}
