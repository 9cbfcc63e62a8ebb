import Foundation
import Testing

@testable import ODataCore

/// Issue 55, item 7: odata.net's reader test `ReadNestedDeletedEntryFromDifferentSetShouldFail`
/// (ODataJsonDeltaReaderTests.cs): a deleted entry nested in a navigation property whose
/// context names another entity set is refused, not read as a deleted entry of the property.
@Suite struct NestedDeltaContextTests {
    static let metadata = """
        <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.01"><edmx:DataServices>
        <Schema Namespace="MyNS" xmlns="http://docs.oasis-open.org/odata/ns/edm">
        <EntityType Name="Order"><Key><PropertyRef Name="Id"/></Key><Property Name="Id" Type="Edm.Int32" Nullable="false"/>
        </EntityType>
        <EntityType Name="Customer"><Key><PropertyRef Name="Id"/></Key><Property Name="Id" Type="Edm.String" Nullable="false"/>
        <Property Name="ContactName" Type="Edm.String"/>
        <NavigationProperty Name="Orders" Type="Collection(MyNS.Order)"/></EntityType>
        <EntityContainer Name="C"><EntitySet Name="Customers" EntityType="MyNS.Customer">
        <NavigationPropertyBinding Path="Orders" Target="Orders"/></EntitySet>
        <EntitySet Name="Orders" EntityType="MyNS.Order"/></EntityContainer>
        </Schema></edmx:DataServices></edmx:Edmx>
        """

    @Test func aNestedEntryOfAnotherSetIsRefused() throws {
        let model = try MetadataParser().parse(Self.metadata)
        let reader = V4JSONReader(model: model)
        let wrong = #"""
            {"@context":"http://host/service/$metadata#Customers/$delta","value":[{"@id":"Customers('BOTTM')",
            "ContactName":"Susan Halvenstern","Orders":[{"@context":"http://host/service/$metadata#Customers/$deletedEntity",
            "@removed":{"reason":"changed"},"Id":1}]}]}
            """#
        do {
            _ = try reader.readCollection(Array(wrong.utf8), entityType: "MyNS.Customer")
            Issue.record("a deleted Customer inside Orders was read")
        } catch {
            #expect("\(error)".contains("names the entity set Customers"), "\(error)")
        }
        // The same entry with the context of the property's set is a deleted order.
        let right = wrong.replacingOccurrences(of: "#Customers/$deletedEntity", with: "#Orders/$deletedEntity")
        let collection = try reader.readCollection(Array(right.utf8), entityType: "MyNS.Customer")
        guard case .collection(let orders)? = collection.entities.first?.navigation("Orders")?.inline else {
            Issue.record("no nested orders")
            return
        }
        #expect(orders.deleted.count == 1 && orders.entities.isEmpty)
    }
}
