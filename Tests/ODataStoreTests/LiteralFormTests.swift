import Foundation
import ODataCore
import Testing

@testable import ODataStore

/// Issue 55, items 6 and 7: literal forms OData 4.01 allows are answered by the store, and
/// values the model has no room for are refused, each checked against rows whose answer is
/// known.
@Suite struct LiteralFormTests {
    static let metadata = """
        <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.01"><edmx:DataServices>
        <Schema Namespace="S" xmlns="http://docs.oasis-open.org/odata/ns/edm">
        <EnumType Name="Status"><Member Name="New" Value="0"/><Member Name="Shipped" Value="2"/></EnumType>
        <EnumType Name="Color" IsFlags="true"><Member Name="Red" Value="1"/><Member Name="Blue" Value="4"/></EnumType>
        <EntityType Name="P"><Key><PropertyRef Name="ID"/></Key><Property Name="ID" Type="Edm.Int32" Nullable="false"/>
        <Property Name="ShelfLife" Type="Edm.Duration"/><Property Name="Status" Type="S.Status"/>
        <Property Name="Color" Type="S.Color"/><Property Name="Name" Type="Edm.String"/>
        <Property Name="Price" Type="Edm.Decimal"/></EntityType>
        <EntityContainer Name="C"><EntitySet Name="Ps" EntityType="S.P"/></EntityContainer>
        </Schema></edmx:DataServices></edmx:Edmx>
        """
    static let rows = #"""
        {"value":[
         {"ID":1,"ShelfLife":"P12DT23H59M59.999999999999S","Status":"Shipped","Color":"Red","Name":"one (a)","Price":1},
         {"ID":2,"ShelfLife":"P1D","Status":"New","Color":"Red,Blue","Name":"two","Price":2.5},
         {"ID":3,"ShelfLife":null,"Status":null,"Color":"Blue","Name":"three (b)","Price":null}
        ]}
        """#

    static func ids(_ store: Store, _ url: String) async throws -> [Int32] {
        guard case .collection(let collection) = try await store.query(url) else { return [] }
        return collection.entities.compactMap {
            if case .primitive(.int32(let id))? = $0["ID"] { return id }
            return nil
        }
    }

    static func refusal(_ store: Store, _ url: String) async -> String {
        do {
            _ = try await store.query(url)
            return ""
        } catch {
            return "\(error)"
        }
    }

    @Test func fourPointOhOneLiteralsAreAnsweredAndImpossibleValuesRefused() async throws {
        let dir = TemporaryDirectory()
        let model = try MetadataParser().parse(Self.metadata)
        let store = try await Store.create(path: dir.path("forms.sqlite"), model: model, key: nil)
        let entities = try V4JSONReader(model: model).readCollection(Array(Self.rows.utf8), entityType: "S.P").entities
        try await store.write { writer in try writer.bulkInsert(entities, into: "Ps") }
        // A duration without its prefix, the spec's own example.
        #expect(try await Self.ids(store, "Ps?$filter=ShelfLife eq 'P12DT23H59M59.999999999999S'") == [1])
        #expect(try await Self.ids(store, "Ps?$filter=ShelfLife gt 'PT1H'&$orderby=ID") == [1, 2])
        #expect(try await Self.ids(store, "Ps?$filter=ShelfLife in ('P1D','P2D')") == [2])
        #expect(await Self.refusal(store, "Ps?$filter=ShelfLife eq 'soon'").contains("Cannot compare"))
        // An enum without its type, after `has`.
        #expect(try await Self.ids(store, "Ps?$filter=Status has 'Shipped'") == [1])
        #expect(try await Self.ids(store, "Ps?$filter=Color has 'Blue'&$orderby=ID") == [2, 3])
        #expect(try await Self.ids(store, "Ps?$filter=Color has 'Red,Blue'") == [2])
        #expect(await Self.refusal(store, "Ps?$filter=Color has 'Green'").contains("has no member Green"))
        // Enum numbers name members (or, for flags, combinations of them) only.
        #expect(try await Self.ids(store, "Ps?$filter=Status eq S.Status'2'") == [1])
        #expect(try await Self.ids(store, "Ps?$filter=Color eq S.Color'5'") == [2])
        #expect(await Self.refusal(store, "Ps?$filter=Status eq S.Status'7'").contains("no member of value 7"))
        #expect(await Self.refusal(store, "Ps?$filter=Color eq S.Color'8'").contains("no member of value 8"))
        // Decimal exponents past Double's range are exact decimals, never INF.
        #expect(try await Self.ids(store, "Ps?$filter=Price lt 1e309&$orderby=ID") == [1, 2])
        #expect(try await Self.ids(store, "Ps?$filter=Price gt 1e-400&$orderby=ID") == [1, 2])
        #expect(try await Self.ids(store, "Ps?$filter=Price lt 1e6144&$orderby=ID") == [1, 2])
        #expect(await !Self.refusal(store, "Ps?$filter=Price eq 1e309").contains("INF"))
        // Encoded parentheses group in $search as written ones do.
        #expect(try await Self.ids(store, "Ps?$search=%28one%20OR%20two%29&$orderby=ID") == [1, 2])
        #expect(try await Self.ids(store, "Ps?$search=(one OR two)&$orderby=ID") == [1, 2])
    }
}
