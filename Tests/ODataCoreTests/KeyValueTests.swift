import Foundation
import Testing
import ODataCore

@Suite struct KeyValueTests {
    static let model: Model = {
        let csdl = """
        <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
        <Schema Namespace="K" xmlns="http://docs.oasis-open.org/odata/ns/edm">
          <TypeDefinition Name="Code" UnderlyingType="Edm.String"/>
          <EntityType Name="Order"><Key><PropertyRef Name="ID"/></Key><Property Name="ID" Type="K.Code" Nullable="false"/></EntityType>
          <EntityType Name="Item"><Key><PropertyRef Name="OrderID"/><PropertyRef Name="Position"/></Key>
            <Property Name="OrderID" Type="Edm.String" Nullable="false"/><Property Name="Position" Type="Edm.Int32" Nullable="false"/></EntityType>
          <EntityContainer Name="C"><EntitySet Name="Orders" EntityType="K.Order"/><EntitySet Name="Items" EntityType="K.Item"/></EntityContainer>
        </Schema></edmx:DataServices></edmx:Edmx>
        """
        return (try? MetadataParser().parse(Data(csdl.utf8))) ?? Model(version: .v4)
    }()

    func keys(_ url: String) throws -> [String: PrimitiveValue] {
        let parsed = try URLParser(version: .v401).parse(url)
        let resolved = try PathResolver(lookup: Self.model, aliases: parsed.query.aliases)
            .resolve(parsed.path, input: url)
        guard case .entitySet(let set) = resolved.path.segments[0].kind, case .key(let parts) = resolved.path.segments[1].kind else {
            throw BindingError(.invalidKey, "no key", input: url, offset: 0)
        }
        return try Self.model.keyValues(parts, ofEntitySet: set, aliases: parsed.query.aliases, input: url)
    }

    @Test func predicatesGiveTypedKeys() throws {
        #expect(try keys("Orders('A1')") == ["ID": .string("A1")])
        #expect(try keys("Items(OrderID='A1',Position=2)") == ["OrderID": .string("A1"), "Position": .int32(2)])
        #expect(try keys("Items(OrderID=@o,Position=3)?@o='B'") == ["OrderID": .string("B"), "Position": .int32(3)])
    }

    @Test func badPredicatesNameTheProblem() {
        let key = "The key of K.Item is OrderID, Position; "
        for (url, text) in [("Items(OrderID='A1')", key + "Position is missing"),
                            ("Items(OrderID='A',Position='x')", key + "'x' is not an Edm.Int32 for Position"),
                            ("Items(Nope='A',Position=1)", key + "Nope is not a key property"),
                            ("Items(OrderID='A',OrderID='B')", key + "OrderID is given twice")] {
            do {
                _ = try keys(url)
                Issue.record("\(url) must fail")
            } catch {
                #expect("\(error)".contains(text), "\(url): \(error)")
            }
        }
    }
}
