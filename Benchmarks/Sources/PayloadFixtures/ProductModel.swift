import Foundation
public import ODataCore

/// The benchmark model: Products with ten properties and Categories.
public enum ProductModel {
    /// CSDL of the model.
    public static let metadata = """
<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
<Schema Namespace="Bench" xmlns="http://docs.oasis-open.org/odata/ns/edm">
  <EntityType Name="Product"><Key><PropertyRef Name="ID"/></Key>
    <Property Name="ID" Type="Edm.Int64" Nullable="false"/>
    <Property Name="Name" Type="Edm.String"/>
    <Property Name="Description" Type="Edm.String"/>
    <Property Name="Price" Type="Edm.Decimal" Precision="12" Scale="2"/>
    <Property Name="Quantity" Type="Edm.Int32"/>
    <Property Name="Rating" Type="Edm.Double"/>
    <Property Name="Active" Type="Edm.Boolean"/>
    <Property Name="Created" Type="Edm.DateTimeOffset"/>
    <Property Name="Code" Type="Edm.Guid"/>
    <Property Name="CategoryID" Type="Edm.Int32"/>
    <NavigationProperty Name="Category" Type="Bench.Category" Partner="Products"><ReferentialConstraint Property="CategoryID" ReferencedProperty="ID"/></NavigationProperty>
  </EntityType>
  <EntityType Name="Category"><Key><PropertyRef Name="ID"/></Key><Property Name="ID" Type="Edm.Int32" Nullable="false"/><Property Name="Name" Type="Edm.String"/>
    <NavigationProperty Name="Products" Type="Collection(Bench.Product)" Partner="Category"/></EntityType>
  <EntityContainer Name="C">
    <EntitySet Name="Products" EntityType="Bench.Product"><NavigationPropertyBinding Path="Category" Target="Categories"/></EntitySet>
    <EntitySet Name="Categories" EntityType="Bench.Category"><NavigationPropertyBinding Path="Products" Target="Products"/></EntitySet>
  </EntityContainer>
</Schema></edmx:DataServices></edmx:Edmx>
"""

    /// Product number `i` with ten properties.
    public static func product(_ i: Int) -> Entity {
    var e = Entity()
    e["ID"] = .primitive(.int64(Int64(i)))
    e["Name"] = .primitive(.string("Product number \(i)"))
    e["Description"] = .primitive(.string("A sturdy item for field work, batch \(i % 977)."))
    e["Price"] = .primitive(.decimal(DecimalValue("\(i % 10_000).\(i % 100 < 10 ? "0" : "")\(i % 100)") ?? DecimalValue(0)))
    e["Quantity"] = .primitive(.int32(Int32(i % 5000)))
    e["Rating"] = .primitive(.double(Double(i % 50) / 10))
    e["Active"] = .primitive(.boolean(i % 3 == 0))
    e["Created"] = .primitive(.dateTimeOffset(DateTimeOffsetValue(date: DateValue(year: 2024, month: 1 + i % 12, day: 1 + i % 28),
                                                                  time: TimeOfDayValue(hour: i % 24, minute: i % 60, second: 0), offsetMinutes: 0)))
    e["Code"] = .primitive(.guid(GuidValue(UUID(uuid: (0, 0, 0, 0, 0, 0, 0x40, 0, 0x80, 0, UInt8(i >> 40 & 0xFF), UInt8(i >> 32 & 0xFF), UInt8(i >> 24 & 0xFF), UInt8(i >> 16 & 0xFF), UInt8(i >> 8 & 0xFF), UInt8(i & 0xFF))))))
    e["CategoryID"] = .primitive(.int32(Int32(i % 100)))
    return e
}
}
