public import ODataCore

/// The `sales` sample service: business partners, contacts, products, categories, sales
/// orders and their items, with deterministic generated data.
public enum SalesSample {
    /// The model, as CSDL 4.0.
    public static let metadata = """
    <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
    <Schema Namespace="Sales" xmlns="http://docs.oasis-open.org/odata/ns/edm">
      <EnumType Name="OrderStatus"><Member Name="New" Value="0"/><Member Name="Confirmed" Value="1"/><Member Name="Shipped" Value="2"/><Member Name="Cancelled" Value="3"/></EnumType>
      <ComplexType Name="Address">
        <Property Name="Street" Type="Edm.String"/><Property Name="City" Type="Edm.String"/>
        <Property Name="PostalCode" Type="Edm.String"/><Property Name="Country" Type="Edm.String"/>
      </ComplexType>
      <EntityType Name="BusinessPartner"><Key><PropertyRef Name="PartnerID"/></Key>
        <Property Name="PartnerID" Type="Edm.String" Nullable="false" MaxLength="10"/>
        <Property Name="CompanyName" Type="Edm.String"/><Property Name="Email" Type="Edm.String"/><Property Name="Phone" Type="Edm.String"/>
        <Property Name="Address" Type="Sales.Address"/><Property Name="CreatedAt" Type="Edm.DateTimeOffset"/>
        <NavigationProperty Name="Contacts" Type="Collection(Sales.Contact)" Partner="Partner"/>
        <NavigationProperty Name="SalesOrders" Type="Collection(Sales.SalesOrder)" Partner="Partner"/>
      </EntityType>
      <EntityType Name="Contact"><Key><PropertyRef Name="ContactID"/></Key>
        <Property Name="ContactID" Type="Edm.Int64" Nullable="false"/>
        <Property Name="PartnerID" Type="Edm.String"/><Property Name="FirstName" Type="Edm.String"/>
        <Property Name="LastName" Type="Edm.String"/><Property Name="Email" Type="Edm.String"/>
        <NavigationProperty Name="Partner" Type="Sales.BusinessPartner" Partner="Contacts"><ReferentialConstraint Property="PartnerID" ReferencedProperty="PartnerID"/></NavigationProperty>
      </EntityType>
      <EntityType Name="ProductCategory"><Key><PropertyRef Name="CategoryID"/></Key>
        <Property Name="CategoryID" Type="Edm.String" Nullable="false"/><Property Name="Name" Type="Edm.String"/>
        <NavigationProperty Name="Products" Type="Collection(Sales.Product)" Partner="Category"/>
      </EntityType>
      <EntityType Name="Product"><Key><PropertyRef Name="ProductID"/></Key>
        <Property Name="ProductID" Type="Edm.String" Nullable="false"/><Property Name="Name" Type="Edm.String"/>
        <Property Name="Description" Type="Edm.String"/><Property Name="CategoryID" Type="Edm.String"/>
        <Property Name="Price" Type="Edm.Decimal" Precision="12" Scale="2"/><Property Name="Currency" Type="Edm.String"/>
        <Property Name="WeightKg" Type="Edm.Double"/><Property Name="ReleaseDate" Type="Edm.Date"/>
        <NavigationProperty Name="Category" Type="Sales.ProductCategory" Partner="Products"><ReferentialConstraint Property="CategoryID" ReferencedProperty="CategoryID"/></NavigationProperty>
        <NavigationProperty Name="Pictures" Type="Collection(Sales.ProductPicture)" Partner="Product"/>
      </EntityType>
      <EntityType Name="ProductPicture" HasStream="true"><Key><PropertyRef Name="PictureID"/></Key>
        <Property Name="PictureID" Type="Edm.String" Nullable="false"/><Property Name="ProductID" Type="Edm.String"/>
        <Property Name="Caption" Type="Edm.String"/>
        <NavigationProperty Name="Product" Type="Sales.Product" Partner="Pictures"><ReferentialConstraint Property="ProductID" ReferencedProperty="ProductID"/></NavigationProperty>
      </EntityType>
      <EntityType Name="SalesOrder"><Key><PropertyRef Name="OrderID"/></Key>
        <Property Name="OrderID" Type="Edm.String" Nullable="false"/><Property Name="PartnerID" Type="Edm.String"/>
        <Property Name="OrderDate" Type="Edm.DateTimeOffset"/><Property Name="Status" Type="Sales.OrderStatus"/>
        <Property Name="GrossAmount" Type="Edm.Decimal" Precision="14" Scale="2"/><Property Name="Currency" Type="Edm.String"/>
        <Property Name="Note" Type="Edm.String"/>
        <NavigationProperty Name="Partner" Type="Sales.BusinessPartner" Partner="SalesOrders"><ReferentialConstraint Property="PartnerID" ReferencedProperty="PartnerID"/></NavigationProperty>
        <NavigationProperty Name="Items" Type="Collection(Sales.SalesOrderItem)" Partner="Order"><OnDelete Action="Cascade"/></NavigationProperty>
      </EntityType>
      <EntityType Name="SalesOrderItem"><Key><PropertyRef Name="OrderID"/><PropertyRef Name="ItemPosition"/></Key>
        <Property Name="OrderID" Type="Edm.String" Nullable="false"/><Property Name="ItemPosition" Type="Edm.Int32" Nullable="false"/>
        <Property Name="ProductID" Type="Edm.String"/><Property Name="Quantity" Type="Edm.Int32"/>
        <Property Name="NetAmount" Type="Edm.Decimal" Precision="14" Scale="2"/><Property Name="DeliveryDate" Type="Edm.Date"/>
        <NavigationProperty Name="Order" Type="Sales.SalesOrder" Partner="Items"><ReferentialConstraint Property="OrderID" ReferencedProperty="OrderID"/></NavigationProperty>
        <NavigationProperty Name="Product" Type="Sales.Product"><ReferentialConstraint Property="ProductID" ReferencedProperty="ProductID"/></NavigationProperty>
      </EntityType>
      <Function Name="GetProductsByCategory"><Parameter Name="CategoryID" Type="Edm.String"/><ReturnType Type="Collection(Sales.Product)"/></Function>
      <Action Name="ConfirmOrder"><Parameter Name="OrderID" Type="Edm.String"/><ReturnType Type="Sales.SalesOrder"/></Action>
      <EntityContainer Name="SalesService">
        <EntitySet Name="BusinessPartners" EntityType="Sales.BusinessPartner">
          <NavigationPropertyBinding Path="Contacts" Target="Contacts"/><NavigationPropertyBinding Path="SalesOrders" Target="SalesOrders"/></EntitySet>
        <EntitySet Name="Contacts" EntityType="Sales.Contact"><NavigationPropertyBinding Path="Partner" Target="BusinessPartners"/></EntitySet>
        <EntitySet Name="ProductCategories" EntityType="Sales.ProductCategory"><NavigationPropertyBinding Path="Products" Target="Products"/></EntitySet>
        <EntitySet Name="Products" EntityType="Sales.Product">
          <NavigationPropertyBinding Path="Category" Target="ProductCategories"/><NavigationPropertyBinding Path="Pictures" Target="ProductPictures"/></EntitySet>
        <EntitySet Name="ProductPictures" EntityType="Sales.ProductPicture"><NavigationPropertyBinding Path="Product" Target="Products"/></EntitySet>
        <EntitySet Name="SalesOrders" EntityType="Sales.SalesOrder">
          <NavigationPropertyBinding Path="Partner" Target="BusinessPartners"/><NavigationPropertyBinding Path="Items" Target="SalesOrderItems"/></EntitySet>
        <EntitySet Name="SalesOrderItems" EntityType="Sales.SalesOrderItem">
          <NavigationPropertyBinding Path="Order" Target="SalesOrders"/><NavigationPropertyBinding Path="Product" Target="Products"/></EntitySet>
        <FunctionImport Name="GetProductsByCategory" Function="Sales.GetProductsByCategory" EntitySet="Products"/>
        <ActionImport Name="ConfirmOrder" Action="Sales.ConfirmOrder" EntitySet="SalesOrders"/>
      </EntityContainer>
    </Schema></edmx:DataServices></edmx:Edmx>
    """

    /// The sample model.
    public static func model() throws(MetadataError) -> Model { try MetadataParser().parse(metadata) }

    /// Entity sets whose keys the server generates when a POST leaves them out.
    public static let serverGeneratedKeys: [String: String] = ["Contacts": "ContactID"]

    /// Deterministic data: `scale` partners, about 10 × scale orders. Same scale, same data.
    public static func data(scale: Int) -> [(entitySet: String, entities: [Entity])] {
        var random = SplitMix(seed: 0x5A1E5 &+ UInt64(scale))
        func text(_ s: String) -> Value { .primitive(.string(s)) }
        func decimal(_ cents: Int) -> Value { .primitive(.decimal(DecimalValue("\(cents / 100).\(cents % 100 < 10 ? "0" : "")\(cents % 100)") ?? DecimalValue(0))) }
        let cities = [("Walldorf", "69190", "DE"), ("Paris", "75001", "FR"), ("Boston", "02108", "US"), ("Osaka", "530-0001", "JP"), ("Lyon", "69001", "FR")]
        var categories: [Entity] = []
        for c in 0..<10 {
            var e = Entity()
            e["CategoryID"] = text("C\(c)")
            e["Name"] = text(["Notebooks", "Screens", "Mice", "Keyboards", "Printers", "Tablets", "Phones", "Cables", "Speakers", "Software"][c])
            categories.append(e)
        }
        let productCount = max(20, min(2000, scale * 2))
        var products: [Entity] = []
        var pictures: [Entity] = []
        for p in 0..<productCount {
            var e = Entity()
            e["ProductID"] = text("P\(p)")
            e["Name"] = text("Product \(p)")
            e["Description"] = text("Sturdy item \(p) for the field")
            e["CategoryID"] = text("C\(p % 10)")
            e["Price"] = decimal(Int(random.next() % 200_000) + 99)
            e["Currency"] = text("EUR")
            e["WeightKg"] = .primitive(.double(Double(random.next() % 5000) / 100))
            e["ReleaseDate"] = .primitive(.date(DateValue(year: 2015 + p % 10, month: 1 + p % 12, day: 1 + p % 28)))
            products.append(e)
            if p < 5 {
                var picture = Entity()
                picture["PictureID"] = text("PIC\(p)")
                picture["ProductID"] = text("P\(p)")
                picture["Caption"] = text("Picture of product \(p)")
                pictures.append(picture)
            }
        }
        var partners: [Entity] = []
        var contacts: [Entity] = []
        var orders: [Entity] = []
        var items: [Entity] = []
        var contactID: Int64 = 1
        for b in 0..<scale {
            let city = cities[b % cities.count]
            var e = Entity()
            e["PartnerID"] = text("BP\(b)")
            e["CompanyName"] = text("Company \(b)")
            e["Email"] = text("info@company\(b).example")
            e["Phone"] = text("+49 6227 \(1000 + b)")
            e["Address"] = .complex(StructuredValue(typeName: "Sales.Address", properties: [
                NamedValue(name: "Street", value: text("Main Street \(b + 1)")), NamedValue(name: "City", value: text(city.0)),
                NamedValue(name: "PostalCode", value: text(city.1)), NamedValue(name: "Country", value: text(city.2)),
            ]))
            e["CreatedAt"] = .primitive(.dateTimeOffset(DateTimeOffsetValue(date: DateValue(year: 2020, month: 1 + b % 12, day: 1 + b % 28),
                                                                            time: TimeOfDayValue(hour: b % 24, minute: 0, second: 0), offsetMinutes: 0)))
            partners.append(e)
            for k in 0..<2 {
                var contact = Entity()
                contact["ContactID"] = .primitive(.int64(contactID))
                contactID += 1
                contact["PartnerID"] = text("BP\(b)")
                contact["FirstName"] = text(["Anna", "Ben", "Chen", "Dana", "Emil"][(b + k) % 5])
                contact["LastName"] = text(["Meyer", "Dubois", "Smith", "Tanaka", "Rossi"][(b * 3 + k) % 5])
                contact["Email"] = text("contact\(k)@company\(b).example")
                contacts.append(contact)
            }
            for o in 0..<10 {
                let orderID = "SO\(b * 10 + o)"
                var order = Entity()
                order["OrderID"] = text(orderID)
                order["PartnerID"] = text("BP\(b)")
                order["OrderDate"] = .primitive(.dateTimeOffset(DateTimeOffsetValue(date: DateValue(year: 2023 + o % 2, month: 1 + (b + o) % 12, day: 1 + o % 28),
                                                                                    time: TimeOfDayValue(hour: 9, minute: o, second: 0), offsetMinutes: 60)))
                order["Status"] = .enumeration(EnumValue(typeName: "Sales.OrderStatus", members: [["New", "Confirmed", "Shipped", "Cancelled"][Int(random.next() % 4)]]))
                order["Currency"] = text("EUR")
                order["Note"] = o % 3 == 0 ? .null : text("Order note \(o)")
                var total = 0
                for position in 1...(1 + Int(random.next() % 3)) {
                    var item = Entity()
                    let quantity = 1 + Int(random.next() % 9)
                    let cents = quantity * (Int(random.next() % 50_000) + 100)
                    total += cents
                    item["OrderID"] = text(orderID)
                    item["ItemPosition"] = .primitive(.int32(Int32(position * 10)))
                    item["ProductID"] = text("P\(Int(random.next() % UInt64(productCount)))")
                    item["Quantity"] = .primitive(.int32(Int32(quantity)))
                    item["NetAmount"] = decimal(cents)
                    item["DeliveryDate"] = .primitive(.date(DateValue(year: 2024, month: 1 + o % 12, day: 1 + position)))
                    items.append(item)
                }
                order["GrossAmount"] = decimal(total)
                orders.append(order)
            }
        }
        return [("ProductCategories", categories), ("Products", products), ("ProductPictures", pictures), ("BusinessPartners", partners),
                ("Contacts", contacts), ("SalesOrders", orders), ("SalesOrderItems", items)]
    }
}

/// A small deterministic random number generator (SplitMix64).
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
