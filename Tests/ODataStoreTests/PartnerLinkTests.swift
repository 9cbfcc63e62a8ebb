import Foundation
import Testing
import ODataCore
@testable import ODataStore

/// Both ends of a relationship without a referential constraint (common in V2 models) share
/// one link table: a link stored through one end reads through the other.
@Suite struct PartnerLinkTests {
    static let metadata = """
    <edmx:Edmx Version="1.0" xmlns:edmx="http://schemas.microsoft.com/ado/2007/06/edmx"
      xmlns:m="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata">
     <edmx:DataServices m:DataServiceVersion="2.0">
      <Schema Namespace="Shop" xmlns="http://schemas.microsoft.com/ado/2008/09/edm">
       <EntityType Name="Customer"><Key><PropertyRef Name="ID"/></Key>
        <Property Name="ID" Type="Edm.String" Nullable="false"/><Property Name="Name" Type="Edm.String"/>
        <NavigationProperty Name="Orders" Relationship="Shop.CustomerOrders" FromRole="Customer" ToRole="Order"/></EntityType>
       <EntityType Name="Order"><Key><PropertyRef Name="ID"/></Key>
        <Property Name="ID" Type="Edm.Int32" Nullable="false"/><Property Name="Amount" Type="Edm.Decimal"/>
        <NavigationProperty Name="Customer" Relationship="Shop.CustomerOrders" FromRole="Order" ToRole="Customer"/></EntityType>
       <Association Name="CustomerOrders">
        <End Type="Shop.Customer" Role="Customer" Multiplicity="0..1"/><End Type="Shop.Order" Role="Order" Multiplicity="*"/></Association>
       <EntityContainer Name="C" m:IsDefaultEntityContainer="true">
        <EntitySet Name="Customers" EntityType="Shop.Customer"/><EntitySet Name="Orders" EntityType="Shop.Order"/>
        <AssociationSet Name="CustomerOrdersSet" Association="Shop.CustomerOrders">
         <End EntitySet="Customers" Role="Customer"/><End EntitySet="Orders" Role="Order"/></AssociationSet>
       </EntityContainer>
      </Schema>
     </edmx:DataServices>
    </edmx:Edmx>
    """

    static func entity(_ type: String, _ values: [String: PrimitiveValue]) -> Entity {
        var entity = Entity(typeName: "Shop." + type)
        for (name, value) in values.sorted(by: { $0.key < $1.key }) { entity[name] = .primitive(value) }
        return entity
    }

    static func ids(_ result: QueryResult) -> [String] {
        guard case .collection(let collection) = result else {
            if case .entity(let entity?) = result, case .primitive(let id)? = entity["ID"] { return [Literal.payloadText(id)] }
            return []
        }
        return collection.entities.compactMap { if case .primitive(let id)? = $0["ID"] { return Literal.payloadText(id) }; return nil }
    }

    @Test func aLinkReadsThroughBothEnds() async throws {
        let model = try MetadataParser().parse(Data(Self.metadata.utf8))
        let schema = try StoreSchema(model: model)
        let orders = try #require(schema.table(forEntitySet: "Customers")?.navigation("Orders"))
        let customer = try #require(schema.table(forEntitySet: "Orders")?.navigation("Customer"))
        // One table: "lk_Customers/Orders" sorts first and keeps it; the Order end reads it reversed.
        var owner = StoreSchema.LinkTable(name: "lk_Customers/Orders", reversed: false)
        owner.singleSourcePerTarget = true
        #expect(orders.relation == .linkTable(owner))
        #expect(customer.relation == .linkTable(StoreSchema.LinkTable(name: "lk_Customers/Orders", reversed: true)))
        #expect(!schema.tableStatements().contains { $0.contains("lk_Orders/Customer") })
        let dir = TemporaryDirectory()
        let store = try await Store.create(path: dir.path("shop.sqlite"), model: model)
        defer { store.close() }
        try await store.write { writer in
            _ = try writer.insert(Self.entity("Customer", ["ID": .string("C1"), "Name": .string("One")]), into: "Customers")
            _ = try writer.insert(Self.entity("Customer", ["ID": .string("C2"), "Name": .string("Two")]), into: "Customers")
            for id in 1...3 { _ = try writer.insert(Self.entity("Order", ["ID": .int32(Int32(id))]), into: "Orders") }
            // As a download of `Customers?$expand=Orders` links them: from the customer's end.
            try writer.link("Customers", key: ["ID": .string("C1")], navigation: "Orders", to: ["ID": .int32(1)])
            try writer.link("Customers", key: ["ID": .string("C1")], navigation: "Orders", to: ["ID": .int32(2)])
            // And one from the order's end.
            try writer.link("Orders", key: ["ID": .int32(3)], navigation: "Customer", to: ["ID": .string("C2")])
        }
        #expect(Self.ids(try await store.query("Orders(2)/Customer")) == ["C1"])
        #expect(Self.ids(try await store.query("Customers('C2')/Orders")) == ["3"])
        #expect(Self.ids(try await store.query("Orders?$filter=Customer/Name eq 'One'&$orderby=ID")) == ["1", "2"])
        #expect(Self.ids(try await store.query("Customers?$filter=Orders/any(o:o/ID eq 3)")) == ["C2"])
        // A to-one end keeps one link: moving order 2 to C2 takes it from C1.
        try await store.write { writer in try writer.link("Orders", key: ["ID": .int32(2)], navigation: "Customer", to: ["ID": .string("C2")]) }
        #expect(Self.ids(try await store.query("Customers('C1')/Orders")) == ["1"])
        #expect(Self.ids(try await store.query("Customers('C2')/Orders?$orderby=ID")) == ["2", "3"])
        // From the collection end too: an order has one customer, so linking it to C1 moves it.
        try await store.write { writer in try writer.link("Customers", key: ["ID": .string("C1")], navigation: "Orders", to: ["ID": .int32(2)]) }
        #expect(Self.ids(try await store.query("Orders(2)/Customer")) == ["C1"])
        #expect(Self.ids(try await store.query("Customers('C2')/Orders")) == ["3"])
        try await store.write { writer in try writer.unlink("Orders", key: ["ID": .int32(3)], navigation: "Customer", from: ["ID": .string("C2")]) }
        #expect(Self.ids(try await store.query("Customers('C2')/Orders")).isEmpty)
    }

    @Test func anOlderStoresSecondLinkTableIsMerged() async throws {
        let model = try MetadataParser().parse(Data(Self.metadata.utf8))
        let dir = TemporaryDirectory()
        let path = dir.path("old.sqlite")
        let store = try await Store.create(path: path, model: model, key: "k")
        try await store.write { writer in
            _ = try writer.insert(Self.entity("Customer", ["ID": .string("C1")]), into: "Customers")
            _ = try writer.insert(Self.entity("Order", ["ID": .int32(7)]), into: "Orders")
            // The layout of earlier releases: a table of its own for the order's end.
            try writer.connection.execute(#"CREATE TABLE "lk_Orders/Customer" (source INTEGER NOT NULL, target INTEGER NOT NULL, PRIMARY KEY (source, target))"#)
            try writer.connection.execute(#"INSERT INTO "lk_Orders/Customer" SELECT o._rowid, c._rowid FROM "es_Orders" o, "es_Customers" c"#)
        }
        store.close()
        let reopened = try await Store.open(path: path, key: "k")
        defer { reopened.close() }
        #expect(Self.ids(try await reopened.query("Customers('C1')/Orders")) == ["7"])
        #expect(Self.ids(try await reopened.query("Orders(7)/Customer")) == ["C1"])
        let left = try await reopened.read { reader in try reader.connection.query("SELECT count(*) FROM sqlite_master WHERE name = 'lk_Orders/Customer'") }
        #expect(left == [[.integer(0)]])
    }
}
