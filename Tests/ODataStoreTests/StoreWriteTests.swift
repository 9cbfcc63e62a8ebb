import Foundation
import Testing
import ODataCore
@testable import ODataStore

@Suite struct StoreWriteTests {
    static let ns = "Microsoft.OData.SampleService.Models.TripPin."

    static func tripPin(_ dir: TemporaryDirectory, key: String? = nil) async throws -> (Store, [Entity]) {
        let model = try StoreFixtures.model("payloads/v4-json/olingo4-trippin-data/trippin.xml")
        let store = try await Store.create(path: dir.path("trippin.sqlite"), model: model, key: key)
        let bytes = Array(try Data(contentsOf: StoreFixtures.directory.appendingPathComponent("payloads/v4-json/olingo4-trippin-data/people.json")))
        let people = try V4JSONReader(model: model).readCollection(bytes, entityType: ns + "Person").entities
        try await store.write { writer in try writer.bulkInsert(people, into: "People") }
        return (store, people)
    }

    static func byName(_ entity: Entity) -> [String: Value] {
        Dictionary(entity.properties.map { ($0.name, $0.value) }, uniquingKeysWith: { a, _ in a })
    }

    /// Complex values read back carry their declared type; compare ignoring type names.
    static func normalized(_ value: Value) -> Value {
        switch value {
        case .complex(let s): return .complex(StructuredValue(typeName: nil, properties: s.properties.map { NamedValue(name: $0.name, value: normalized($0.value)) }))
        case .collection(let items): return .collection(items.map(normalized))
        default: return value
        }
    }

    static func syncLevel(_ writer: StoreWriter) throws -> DatabaseValue? {
        try writer.connection.query("PRAGMA synchronous").first?.first
    }

    /// A redoable write commits with `synchronous = NORMAL` and sets the writer back to FULL
    /// afterwards, also when its body throws; a durable one commits with FULL. The writer's
    /// cache limit is given back as it was.
    @Test func aRedoableWriteLowersTheSyncForItselfOnly() async throws {
        let dir = TemporaryDirectory()
        let (store, _) = try await Self.tripPin(dir, key: "k")
        #expect(try await store.write(.redoable) { try Self.syncLevel($0) } == .integer(1))
        #expect(try await store.write { try Self.syncLevel($0) } == .integer(2))
        struct Refused: Error {}
        await #expect(throws: Refused.self) {
            try await store.write(.redoable) { _ in throw Refused() }
        }
        #expect(try await store.write { try Self.syncLevel($0) } == .integer(2))
        #expect(try await store.write(.durable) { try Self.syncLevel($0) } == .integer(2))
        let setting = try await store.limitWriterCache(kibibytes: 1_024)
        #expect(setting == -32_768)
        #expect(try await store.write { try $0.connection.query("PRAGMA cache_size").first?.first } == .integer(-1_024))
        try await store.restoreWriterCache(setting)
        #expect(try await store.write { try $0.connection.query("PRAGMA cache_size").first?.first } == .integer(-32_768))
        store.close()
    }

    @Test func importedEntitiesReadBackEqual() async throws {
        let dir = TemporaryDirectory()
        let (store, people) = try await Self.tripPin(dir)
        defer { store.close() }
        let stored = try await store.read { reader in try reader.all(in: "People") }
        #expect(stored.count == people.count)
        for original in people {
            guard case .primitive(let key)? = original["UserName"] else { continue }
            let back = try await store.read { reader in try reader.entity(in: "People", key: ["UserName": key]) }
            let expected = Self.byName(original).mapValues(Self.normalized)
            let actual = Self.byName(try #require(back)).mapValues(Self.normalized)
            for (name, value) in expected where value != .null {
                #expect(actual[name] == value, "\(name): \(String(describing: actual[name])) vs \(value)")
            }
        }
    }

    @Test func updatesMergeOrReplaceAndFailuresLeaveNothing() async throws {
        let dir = TemporaryDirectory()
        let (store, _) = try await Self.tripPin(dir)
        defer { store.close() }
        let key: [String: PrimitiveValue] = ["UserName": .string("russellwhyte")]
        var patch = Entity()
        patch["UserName"] = .primitive(.string("russellwhyte"))
        patch["LastName"] = .primitive(.string("White"))
        let change = patch
        try await store.write { writer in try writer.update(change, in: "People", replace: false) }
        let merged = try #require(try await store.read { try $0.entity(in: "People", key: key) })
        #expect(merged["LastName"] == .primitive(.string("White")))
        #expect(merged["FirstName"] == .primitive(.string("Russell")), "merge keeps what was not sent")
        // A replace that leaves out a required property is refused with a clear error.
        await #expect(throws: StoreError.self) { try await store.write { writer in try writer.update(change, in: "People", replace: true) } }
        var full = change
        full["Concurrency"] = .primitive(.int64(1))
        let complete = full
        try await store.write { writer in try writer.update(complete, in: "People", replace: true) }
        let replaced = try #require(try await store.read { try $0.entity(in: "People", key: key) })
        #expect(replaced["FirstName"] == .null, "replace clears what was not sent")
        // A failing write rolls back every change made in the same transaction.
        struct Stop: Error {}
        await #expect(throws: Stop.self) {
            try await store.write { writer in
                try writer.delete(from: "People", key: key)
                throw Stop()
            }
        }
        #expect(try await store.read { try $0.entity(in: "People", key: key) } != nil)
        // Inserting a duplicate key is a conflict.
        await #expect(throws: StoreError.self) { try await store.write { writer in try writer.insert(change, into: "People") } }
    }

    @Test func linksInLinkTables() async throws {
        let dir = TemporaryDirectory()
        let (store, _) = try await Self.tripPin(dir)
        defer { store.close() }
        let russell: [String: PrimitiveValue] = ["UserName": .string("russellwhyte")]
        let scott: [String: PrimitiveValue] = ["UserName": .string("scottketchum")]
        try await store.write { writer in try writer.link("People", key: russell, navigation: "Friends", to: scott) }
        let count = try await store.read { reader in try reader.db.query("SELECT count(*) FROM \"lk_People/Friends\"") }
        #expect(count == [[.integer(1)]])
        try await store.write { writer in try writer.unlink("People", key: russell, navigation: "Friends", from: scott) }
        #expect(try await store.read { try $0.db.query("SELECT count(*) FROM \"lk_People/Friends\"") } == [[.integer(0)]])
        // Deleting an entity removes its links.
        try await store.write { writer in try writer.link("People", key: russell, navigation: "Friends", to: scott) }
        try await store.write { writer in _ = try writer.delete(from: "People", key: scott) }
        #expect(try await store.read { try $0.db.query("SELECT count(*) FROM \"lk_People/Friends\"") } == [[.integer(0)]])
    }

    @Test func cascadingDeleteFollowsOnDelete() async throws {
        let metadata = """
        <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
        <Schema Namespace="S" xmlns="http://docs.oasis-open.org/odata/ns/edm">
          <EntityType Name="Order"><Key><PropertyRef Name="ID"/></Key><Property Name="ID" Type="Edm.Int32" Nullable="false"/>
            <NavigationProperty Name="Items" Type="Collection(S.Item)" Partner="Order"><OnDelete Action="Cascade"/></NavigationProperty></EntityType>
          <EntityType Name="Item"><Key><PropertyRef Name="ID"/></Key><Property Name="ID" Type="Edm.Int32" Nullable="false"/>
            <Property Name="OrderID" Type="Edm.Int32"/><Property Name="Amount" Type="Edm.Decimal"/>
            <NavigationProperty Name="Order" Type="S.Order" Partner="Items"><ReferentialConstraint Property="OrderID" ReferencedProperty="ID"/></NavigationProperty></EntityType>
          <EntityContainer Name="C">
            <EntitySet Name="Orders" EntityType="S.Order"><NavigationPropertyBinding Path="Items" Target="Items"/></EntitySet>
            <EntitySet Name="Items" EntityType="S.Item"><NavigationPropertyBinding Path="Order" Target="Orders"/></EntitySet>
          </EntityContainer>
        </Schema></edmx:DataServices></edmx:Edmx>
        """
        let dir = TemporaryDirectory()
        let store = try await Store.create(path: dir.path("o.sqlite"), model: try MetadataParser().parse(metadata), key: "k")
        defer { store.close() }
        var order = Entity()
        order["ID"] = .primitive(.int32(1))
        var items = EntityCollection()
        for i in 1...3 {
            var item = Entity()
            item["ID"] = .primitive(.int32(Int32(i)))
            item["Amount"] = .primitive(.decimal(DecimalValue("\(i).50")!))
            items.entities.append(item)
        }
        var nav = NavigationValue(name: "Items")
        nav.inline = .collection(items)
        order.navigation = [nav]
        let deep = order
        _ = try await store.write { writer in try writer.insert(deep, into: "Orders") }   // deep insert
        let linked = try await store.read { try $0.db.query("SELECT count(*) FROM \"es_Items\" WHERE \"OrderID\" = 1") }
        #expect(linked == [[.integer(3)]], "deep insert sets the foreign keys")
        try await store.write { writer in _ = try writer.delete(from: "Orders", key: ["ID": .int32(1)]) }
        #expect(try await store.read { try $0.all(in: "Items") }.isEmpty, "OnDelete=Cascade removes the items")
    }

    @Test func keyedStoreHoldsNoPlaintextAndReopens() async throws {
        let dir = TemporaryDirectory()
        let (store, people) = try await Self.tripPin(dir, key: "s3cret")
        store.close()
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir.path("trippin.sqlite"))))
            + ((try? [UInt8](Data(contentsOf: URL(fileURLWithPath: dir.path("trippin.sqlite-wal"))))) ?? [])
        for needle in ["russellwhyte", "Russell@example.com", "Microsoft.OData"] {
            let pattern = Array(needle.utf8)
            let found = bytes.indices.dropLast(pattern.count).contains { start in bytes[start] == pattern[0] && Array(bytes[start..<(start + pattern.count)]) == pattern }
            #expect(!found, "\(needle) must not appear in the keyed file")
        }
        await #expect(throws: DatabaseError.self) { try await Store.open(path: dir.path("trippin.sqlite"), key: "wrong") }
        let reopened = try await Store.open(path: dir.path("trippin.sqlite"), key: "s3cret")
        defer { reopened.close() }
        #expect(try await reopened.read { try $0.all(in: "People") }.count == people.count)
        #expect(reopened.schema.table(forEntitySet: "People") != nil)
    }
}
