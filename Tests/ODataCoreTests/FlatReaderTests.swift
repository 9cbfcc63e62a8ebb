import Foundation
import Testing
@testable import ODataCore

/// `readFlatCollection` gives the values `readCollection` gives, or nil where a page needs
/// the general reader.
@Suite struct FlatReaderTests {
    static let metadata = """
    <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
    <Schema Namespace="F" xmlns="http://docs.oasis-open.org/odata/ns/edm">
      <EnumType Name="Color" IsFlags="true"><Member Name="Red" Value="1"/><Member Name="Green" Value="2"/><Member Name="Blue" Value="4"/></EnumType>
      <ComplexType Name="Address"><Property Name="City" Type="Edm.String"/></ComplexType>
      <EntityType Name="Group"><Key><PropertyRef Name="ID"/></Key><Property Name="ID" Type="Edm.Int32" Nullable="false"/>
        <NavigationProperty Name="Items" Type="Collection(F.Item)" Partner="Group"/></EntityType>
      <EntityType Name="Item"><Key><PropertyRef Name="ID"/></Key>
        <Property Name="ID" Type="Edm.Int32" Nullable="false"/><Property Name="Name" Type="Edm.String"/>
        <Property Name="Price" Type="Edm.Decimal" Scale="variable"/><Property Name="Stock" Type="Edm.Int64"/>
        <Property Name="Released" Type="Edm.DateTimeOffset"/><Property Name="Code" Type="Edm.Guid"/>
        <Property Name="Color" Type="F.Color"/><Property Name="Active" Type="Edm.Boolean"/><Property Name="GroupID" Type="Edm.Int32"/>
        <NavigationProperty Name="Group" Type="F.Group" Partner="Items"><ReferentialConstraint Property="GroupID" ReferencedProperty="ID"/></NavigationProperty>
      </EntityType>
      <EntityType Name="Site"><Key><PropertyRef Name="ID"/></Key><Property Name="ID" Type="Edm.Int32" Nullable="false"/>
        <Property Name="Address" Type="F.Address"/></EntityType>
      <EntityContainer Name="Service">
        <EntitySet Name="Groups" EntityType="F.Group"/><EntitySet Name="Items" EntityType="F.Item"/><EntitySet Name="Sites" EntityType="F.Site"/>
      </EntityContainer>
    </Schema></edmx:DataServices></edmx:Edmx>
    """

    static let page = #"""
    {"@odata.context":"$metadata#Items","@odata.count":3,"value":[
      {"@odata.etag":"W/\"a\"","@odata.id":"Items(1)","@odata.editLink":"Items(1)","ID":1,"Name":"Bolt \u00e9\n","Price":1.50,"Stock":9007199254740993,
       "Released":"2024-02-29T12:00:00.5+01:00","Code":"0a000000-0000-4000-8000-00000000000f","Color":"Red,Blue","Active":true,"GroupID":7,
       "Group@odata.navigationLink":"Items(1)/Group"},
      {"@odata.type":"#F.Item","GroupID":null,"Name":null,"ID":2,"Color":4},
      {"ID":3,"Price":-12345678901234567890.125,"Active":false,"Released":"0001-01-01T00:00:00Z"}
    ],"@odata.nextLink":"Items?$skiptoken=3","@odata.deltaLink":"Items?$deltatoken=9"}
    """#

    @Test func rowsHoldWhatTheGeneralReaderReads() throws {
        let model = try MetadataParser().parse(Self.metadata)
        let reader = V4JSONReader(model: model)
        let bytes = Array(Self.page.utf8)
        let general = try reader.readCollection(bytes, entityType: "F.Item")
        let rows = try #require(try reader.readFlatCollection(bytes, entityType: "F.Item"))
        #expect(rows.propertyNames == ["ID", "Name", "Price", "Stock", "Released", "Code", "Color", "Active", "GroupID"])
        #expect(rows.entityCount == 3)
        // Every row has every property, also when they come out of order (row 2) or are left out.
        #expect(rows.values.count == 3 * rows.propertyNames.count)
        #expect(rows.context == "$metadata#Items" && rows.count == 3)
        #expect(rows.nextLink == "Items?$skiptoken=3" && rows.deltaLink == "Items?$deltatoken=9")
        #expect(rows.etags == ["W/\"a\"", nil, nil])
        #expect(rows.editLinks == ["Items(1)", nil, nil])
        for (row, entity) in general.entities.enumerated() {
            for (index, name) in rows.propertyNames.enumerated() {
                #expect(rows[row, index] == (entity[name] ?? .null), "row \(row) \(name)")
            }
        }
        #expect(rows[0, 1] == .primitive(.string("Bolt é\n")))
        // The common kinds are cells of their own, without a Value: integers and Booleans,
        // strings and lowercase GUIDs as text; decimals and DateTimeOffsets in arrays of their
        // own; dates and enums are other values.
        let width = rows.propertyNames.count
        #expect(rows.cells[0] == .integer(1) && rows.cells[7] == .integer(1) && rows.cells[2 * width + 7] == .integer(0))
        #expect(rows.cells[2 * width + 3] == .null, "Stock of entity 3 is left out")
        guard case .text(let start, let count) = rows.cells[5] else {
            Issue.record("a GUID is text")
            return
        }
        #expect(rows.string(start: start, count: count) == "0a000000-0000-4000-8000-00000000000f")
        if case .text = rows.cells[1] {} else { Issue.record("a string with escapes is text too") }
        guard case .decimal(let decimal) = rows.cells[2] else {
            Issue.record("a decimal has a cell of its own")
            return
        }
        #expect(rows.decimals[decimal].description == "1.50")
        guard case .instant(let instant) = rows.cells[4] else {
            Issue.record("a DateTimeOffset has a cell of its own")
            return
        }
        #expect(rows.instants[instant].description == "2024-02-29T12:00:00.5+01:00")
        #expect(rows.decimals.count == 2 && rows.instants.count == 2 && rows.others.count == 2, "\(rows.others)")
        #expect(rows[1, 6] == .enumeration(EnumValue(typeName: "F.Color", members: ["Blue"])))
        #expect(rows[2, 3] == .null)
    }

    @Test func pagesThatAreNotFlatGiveNil() throws {
        let model = try MetadataParser().parse(Self.metadata)
        let reader = V4JSONReader(model: model)
        let notFlat = [
            #"{"value":[{"ID":1},{"ID":2,"Group":{"ID":7}}]}"#,
            ##"{"value":[{"ID":1,"@odata.type":"#F.Other"}]}"##,
            ##"{"value":[{"ID":1,"Price@odata.type":"#Decimal","Price":1}]}"##,
            #"{"value":[{"ID":1,"Dynamic":5}]}"#,
            #"{"value":[{"ID":1,"@custom.note":"x"}]}"#,
            #"{"value":[{"ID":1,"@odata.mediaReadLink":"Items(1)/$value"}]}"#,
            #"{"value":[{"@odata.id":"Items(1)"}]}"#,
            #"{"value":[{"@odata.removed":{"reason":"deleted"},"@odata.id":"Items(1)","ID":1}]}"#,
            #"{"value":[{"@odata.context":"$metadata#Items/$deletedEntity","id":"Items(1)"}]}"#,
            #"{"@custom.page":1,"value":[{"ID":1}]}"#,
        ]
        for payload in notFlat {
            let bytes = Array(payload.utf8)
            #expect(try reader.readFlatCollection(bytes, entityType: "F.Item") == nil, "\(payload)")
            // The general reader reads every one of them.
            _ = try reader.readCollection(bytes, entityType: "F.Item")
        }
        // Complex properties: never flat; no model: never flat.
        #expect(try reader.readFlatCollection(Array(#"{"value":[{"ID":1}]}"#.utf8), entityType: "F.Site") == nil)
        #expect(try V4JSONReader().readFlatCollection(Array(#"{"value":[{"ID":1}]}"#.utf8), entityType: "F.Item") == nil)
        // An empty page is flat.
        #expect(try reader.readFlatCollection(Array(#"{"value":[]}"#.utf8), entityType: "F.Item")?.entityCount == 0)
    }

    @Test func badPagesAreTheGeneralReadersErrors() throws {
        let model = try MetadataParser().parse(Self.metadata)
        let reader = V4JSONReader(model: model)
        let bad = [
            (#"{"value":[{"ID":"one"}]}"#, "value[0].ID"),
            (#"{"value":[{"ID":1,"ID":2}]}"#, "value[0]"),
            (#"{"value":[{"ID":1,"Released":"yesterday"}]}"#, "value[0].Released"),
            (#"{"value":[{"ID":1}"#, "value"),
            (#"{"value":[1]}"#, "value[0]"),
            (#"{"value":{}}"#, "value"),
            (#"{"@odata.count":"x","values":[]}"#, ""),
            (#"{"value":[{"ID":1,"@odata.etag":5}]}"#, "value[0].@odata.etag"),
        ]
        for (payload, path) in bad {
            let bytes = Array(payload.utf8)
            do {
                _ = try reader.readFlatCollection(bytes, entityType: "F.Item")
                Issue.record("\(payload) was read")
            } catch {
                #expect(error.path == path, "\(payload): \(error)")
                // Where the general reader fails too, it names the same place.
                do {
                    _ = try reader.readCollection(bytes, entityType: "F.Item")
                    Issue.record("\(payload) was read by the general reader")
                } catch let general {
                    #expect(general.path == error.path && general.code == error.code, "\(payload): \(general) / \(error)")
                }
            }
        }
        // Any bytes: an error or a page, never a crash.
        var generator = SystemRandomNumberGenerator()
        let base = Array(Self.page.utf8)
        for _ in 0..<300 {
            var bytes = base
            for _ in 0..<3 { bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator) }
            _ = try? reader.readFlatCollection(Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &generator))), entityType: "F.Item")
        }
    }
}
