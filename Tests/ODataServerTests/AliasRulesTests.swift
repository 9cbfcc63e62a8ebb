import Foundation
import ODataCore
import ODataServer
import Testing

/// Issue 55, item 8: parameter aliases in keys and function imports.
@Suite struct AliasRulesTests {
    @Test func aKeyAliasWithoutAValueIsAClientError() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            let missing = try await client.send("GET", "/odata/v4/BusinessPartners(@k)")
            let text = String(decoding: missing.body, as: UTF8.self)
            #expect(missing.status == 400 && text.contains("@k has no value"), "\(missing.status) \(text)")
            let computed = try await client.send("GET", "/odata/v4/BusinessPartners(@k)?@k=1%20add%201")
            #expect(computed.status == 400, "\(String(decoding: computed.body, as: UTF8.self))")
            let given = try await client.send("GET", "/odata/v4/BusinessPartners(@k)?@k='BP1'")
            #expect(given.status == 200, "\(String(decoding: given.body, as: UTF8.self))")
            #expect(try JSONValue.parse(given.body)["PartnerID"]?.stringValue == "BP1")
        }
    }

    @Test func anAliasSharedByAFunctionImportAndTheFilterHasTheParametersType() throws {
        let metadata = """
            <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
            <Schema Namespace="S" xmlns="http://docs.oasis-open.org/odata/ns/edm">
            <EntityType Name="P"><Key><PropertyRef Name="ID"/></Key>
            <Property Name="ID" Type="Edm.Int32" Nullable="false"/>
            <Property Name="Price" Type="Edm.Decimal"/></EntityType>
            <Function Name="Cheap"><Parameter Name="max" Type="Edm.Decimal"/>
            <ReturnType Type="Collection(S.P)"/></Function>
            <EntityContainer Name="C"><EntitySet Name="Ps" EntityType="S.P"/>
            <FunctionImport Name="Cheap" Function="S.Cheap" EntitySet="Ps"/></EntityContainer>
            </Schema></edmx:DataServices></edmx:Edmx>
            """
        let model = try MetadataParser().parse(metadata)
        let url = "Cheap(max=@p)?$filter=Price gt @p&@p=5"
        let bound = try RequestBinder(model: model).bind(try URLParser(version: .v401).parse(url), input: url)
        #expect(bound.filter?.operands.last?.type == .primitive(.decimal))
        // Without the function, the alias keeps its literal's type.
        let plain = "Ps?$filter=Price gt @p&@p=5"
        let alone = try RequestBinder(model: model).bind(try URLParser(version: .v401).parse(plain), input: plain)
        #expect(alone.filter?.operands.last?.type == .primitive(.int32))
    }
}
