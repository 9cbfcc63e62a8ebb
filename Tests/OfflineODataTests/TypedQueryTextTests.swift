import Foundation
import ODataCodeGen
import ODataCore
import ODataServer
import Testing

/// The URL text each typed query operator compiles to, pinned for V4, V4.01 and V2.
@Suite struct TypedQueryTextTests {
    typealias Partner = SalesV4.BusinessPartner
    typealias Order = SalesV4.SalesOrder
    typealias Product = SalesV4.Product

    func text<E>(_ query: TypedQuery<E>, _ version: ODataVersion = .v4) throws -> String {
        try query.url(for: version)
    }

    var partners: TypedQuery<Partner> { SalesV4.SalesService.businessPartners.query }
    var orders: TypedQuery<Order> { SalesV4.SalesService.salesOrders.query }
    var products: TypedQuery<Product> { SalesV4.SalesService.products.query }

    @Test func comparisonsAndLogic() throws {
        let query = partners.filter { $0.address.country == "US" && $0.companyName.starts(with: "A") }
        #expect(try text(query) == "BusinessPartners?$filter=Address/Country eq 'US' and startswith(CompanyName,'A')")
        #expect(
            try text(query, .v2) == "BusinessPartners?$filter=Address/Country eq 'US' and startswith(CompanyName,'A')")
        #expect(try text(products.filter { $0.price > 100 }) == "Products?$filter=Price gt 100")
        #expect(try text(products.filter { $0.price > 100 }, .v2) == "Products?$filter=Price gt 100M")
        #expect(try text(products.filter { $0.price >= 19.99 }) == "Products?$filter=Price ge 19.99")
        #expect(try text(products.filter { $0.price < 5 }) == "Products?$filter=Price lt 5")
        #expect(try text(products.filter { $0.price <= 5 }) == "Products?$filter=Price le 5")
        #expect(try text(products.filter { $0.name != "X" }) == "Products?$filter=Name ne 'X'")
        #expect(try text(products.filter { $0.weightKg <= 2.5 }) == "Products?$filter=WeightKg le 2.5E0")
        #expect(try text(products.filter { $0.weightKg <= 2.5 }, .v2) == "Products?$filter=WeightKg le 2.5d")
        let logic = orders.filter { ($0.status == .new || $0.status == .confirmed) && !($0.note == nil) }
        #expect(
            try text(logic)
                == "SalesOrders?$filter=(Status eq Sales.OrderStatus'New' or Status eq Sales.OrderStatus'Confirmed') "
                + "and not (Note eq null)")
        #expect(try text(orders.filter { $0.note != nil }) == "SalesOrders?$filter=Note ne null")
        let optional: String? = nil
        #expect(try text(orders.filter { $0.note == optional }) == "SalesOrders?$filter=Note eq null")
        // A right operand of the same strength keeps its parentheses: a or (b or c) stays as written.
        let grouped = products.filter { $0.name == "A" || ($0.name == "B" || $0.name == "C") }
        #expect(try text(grouped) == "Products?$filter=Name eq 'A' or Name eq 'B' or Name eq 'C'")
        let mixed = products.filter { $0.name == "A" && ($0.name == "B" || $0.name == "C") }
        #expect(try text(mixed) == "Products?$filter=Name eq 'A' and (Name eq 'B' or Name eq 'C')")
        // Two filter calls join with and.
        #expect(
            try text(products.filter { $0.price > 1 }.filter { $0.price < 9 })
                == "Products?$filter=Price gt 1 and Price lt 9")
        // A property compared with a property.
        #expect(try text(products.filter { $0.name == $0.description_ }) == "Products?$filter=Name eq Description")
    }

    @Test func stringFunctions() throws {
        #expect(
            try text(partners.filter { $0.companyName.contains("pan") })
                == "BusinessPartners?$filter=contains(CompanyName,'pan')")
        #expect(
            try text(partners.filter { $0.companyName.contains("pan") }, .v2)
                == "BusinessPartners?$filter=substringof('pan',CompanyName)")
        #expect(
            try text(partners.filter { $0.companyName.ends(with: "2") })
                == "BusinessPartners?$filter=endswith(CompanyName,'2')")
        #expect(
            try text(partners.filter { $0.companyName.lowercased() == "company 1" })
                == "BusinessPartners?$filter=tolower(CompanyName) eq 'company 1'")
        #expect(
            try text(partners.filter { $0.companyName.uppercased().trimmed() == "X" })
                == "BusinessPartners?$filter=trim(toupper(CompanyName)) eq 'X'")
        #expect(
            try text(partners.filter { $0.companyName.length > 9 })
                == "BusinessPartners?$filter=length(CompanyName) gt 9")
        #expect(
            try text(partners.filter { $0.companyName.index(of: "y") == 6 })
                == "BusinessPartners?$filter=indexof(CompanyName,'y') eq 6")
        #expect(
            try text(partners.filter { $0.companyName.substring(from: 1, length: 3) == "omp" })
                == "BusinessPartners?$filter=substring(CompanyName,1,3) eq 'omp'")
        #expect(
            try text(partners.filter { $0.email.appending("x") == "ax" })
                == "BusinessPartners?$filter=concat(Email,'x') eq 'ax'")
        // Quotes are doubled; characters that would end the option early are percent-encoded.
        #expect(
            try text(partners.filter { $0.companyName == "O'Neil & Sons #1 100%+" })
                == "BusinessPartners?$filter=CompanyName eq 'O''Neil %26 Sons %231 100%25%2B'")
    }

    @Test func numbersDatesAndEnums() throws {
        #expect(try text(products.filter { $0.price * 2 > 100 }) == "Products?$filter=Price mul 2 gt 100")
        #expect(try text(products.filter { $0.price * 2 > 100 }, .v2) == "Products?$filter=Price mul 2M gt 100M")
        #expect(try text(products.filter { ($0.price + 1) * 2 > 10 }) == "Products?$filter=(Price add 1) mul 2 gt 10")
        #expect(
            try text(products.filter { $0.price - 1 == $0.price % 3 })
                == "Products?$filter=Price sub 1 eq Price mod 3")
        #expect(try text(products.filter { $0.price / 4 < 2 }) == "Products?$filter=Price div 4 lt 2")
        #expect(try text(products.filter { -$0.price < 0 }) == "Products?$filter=-Price lt 0")
        #expect(try text(products.filter { $0.weightKg.rounded() == 3 }) == "Products?$filter=round(WeightKg) eq 3E0")
        #expect(
            try text(products.filter { $0.weightKg.floor() == 3 && $0.weightKg.ceiling() == 4 })
                == "Products?$filter=floor(WeightKg) eq 3E0 and ceiling(WeightKg) eq 4E0")
        #expect(
            try text(products.filter { $0.releaseDate.year == 2020 && $0.releaseDate.month >= 6 })
                == "Products?$filter=year(ReleaseDate) eq 2020 and month(ReleaseDate) ge 6")
        #expect(
            try text(orders.filter { $0.orderDate.day == 1 && $0.orderDate.hour < 12 })
                == "SalesOrders?$filter=day(OrderDate) eq 1 and hour(OrderDate) lt 12")
        let date = DateValue(year: 2020, month: 1, day: 31)
        #expect(try text(products.filter { $0.releaseDate > date }) == "Products?$filter=ReleaseDate gt 2020-01-31")
        #expect(
            try text(products.filter { $0.releaseDate > date }, .v2)
                == "Products?$filter=ReleaseDate gt datetime'2020-01-31T00:00'")
        let instant = DateTimeOffsetValue(
            date: DateValue(year: 2024, month: 1, day: 1), time: TimeOfDayValue(hour: 0, minute: 0), offsetMinutes: 0)
        #expect(
            try text(orders.filter { $0.orderDate >= instant })
                == "SalesOrders?$filter=OrderDate ge 2024-01-01T00:00:00Z")
        #expect(
            try text(orders.filter { $0.orderDate >= instant }, .v2)
                == "SalesOrders?$filter=OrderDate ge datetimeoffset'2024-01-01T00:00:00Z'")
        // V2's Edm.DateTime keeps its own literal.
        let v2Products = SalesV2.SalesService.products.query
        #expect(
            try text(v2Products.filter { $0.releaseDate < instant }, .v2)
                == "Products?$filter=ReleaseDate lt datetime'2024-01-01T00:00:00'")
        // V2's DateTime has no offset: another offset is converted to UTC.
        let paris = DateTimeOffsetValue(
            date: DateValue(year: 2024, month: 1, day: 1), time: TimeOfDayValue(hour: 0, minute: 30), offsetMinutes: 60)
        #expect(
            try text(v2Products.filter { $0.releaseDate < paris }, .v2)
                == "Products?$filter=ReleaseDate lt datetime'2023-12-31T23:30:00'")
        let contacts = SalesV4.SalesService.contacts.query
        #expect(try text(contacts.filter { $0.contactID == 5 }) == "Contacts?$filter=ContactID eq 5")
        #expect(try text(contacts.filter { $0.contactID == 5 }, .v2) == "Contacts?$filter=ContactID eq 5L")
        #expect(
            try text(orders.filter { $0.status.has(.shipped) })
                == "SalesOrders?$filter=Status has Sales.OrderStatus'Shipped'")
        #expect(throws: QueryError.self) { try text(orders.filter { $0.status.has(.shipped) }, .v2) }
    }

    @Test func inAndLambdas() throws {
        let query = partners.filter { $0.address.country.isIn(["US", "DE"]) }
        #expect(try text(query, .v401) == "BusinessPartners?$filter=Address/Country in ('US','DE')")
        #expect(try text(query) == "BusinessPartners?$filter=(Address/Country eq 'US' or Address/Country eq 'DE')")
        #expect(try text(query, .v2) == "BusinessPartners?$filter=(Address/Country eq 'US' or Address/Country eq 'DE')")
        #expect(
            try text(orders.filter { $0.items.any { $0.quantity > 5 } })
                == "SalesOrders?$filter=Items/any(d:d/Quantity gt 5)")
        #expect(
            try text(orders.filter { $0.items.all { $0.netAmount < 100 } })
                == "SalesOrders?$filter=Items/all(d:d/NetAmount lt 100)")
        #expect(try text(orders.filter { $0.items.isNotEmpty() }) == "SalesOrders?$filter=Items/any()")
        #expect(
            try text(partners.filter { $0.salesOrders.any { $0.items.any { $0.quantity > 5 } } })
                == "BusinessPartners?$filter=SalesOrders/any(d:d/Items/any(d1:d1/Quantity gt 5))")
        #expect(throws: QueryError.self) { try text(orders.filter { $0.items.any { $0.quantity > 5 } }, .v2) }
        #expect(
            try text(orders.filter { $0.partner.companyName == "Company 1" })
                == "SalesOrders?$filter=Partner/CompanyName eq 'Company 1'")
        #expect(
            try text(orders.filter { $0.partner.address.city == "Paris" })
                == "SalesOrders?$filter=Partner/Address/City eq 'Paris'")
        #expect(try text(orders.filter { $0.partner.isNil }) == "SalesOrders?$filter=Partner eq null")
        #expect(
            try text(partners.filter { $0.salesOrders.count > 2 }) == "BusinessPartners?$filter=SalesOrders/$count gt 2"
        )
    }

    @Test func edgeCasesOfVersionsAndPaths() throws {
        // An empty `in` list is false in every version (4.01's `in ()` is not valid).
        #expect(try text(products.filter { $0.name.isIn([String]()) }, .v401) == "Products?$filter=false")
        // $count paths and type casts do not exist in V2.
        #expect(throws: QueryError.self) { try text(partners.filter { $0.salesOrders.count > 2 }, .v2) }
        #expect(throws: QueryError.self) {
            try text(SalesV4.SalesService.businessPartners.cast(to: SalesV4.BusinessPartner.self), .v2)
        }
        #expect(
            try text(SalesV4.SalesService.businessPartners.cast(to: SalesV4.BusinessPartner.self))
                == "BusinessPartners/Sales.BusinessPartner")
        // Key literals with `?` or `/` stay inside the path.
        #expect(
            SalesV4.SalesService.salesOrders.path(.init(orderID: "a?b/c")).text(for: .v4) == "SalesOrders('a%3Fb%2Fc')")
        // A to-one navigation compares with nil.
        #expect(try text(orders.filter { $0.partner == nil }) == "SalesOrders?$filter=Partner eq null")
        #expect(try text(orders.filter { $0.partner != nil }) == "SalesOrders?$filter=Partner ne null")
        // Collections of complex values: any/all over their members.
        let addresses = ComplexCollectionField<SalesV4.Address>("Addresses", prefix: .root)
        #expect(try addresses.any { $0.city == "Boise" }.text(for: .v4) == "Addresses/any(d:d/City eq 'Boise')")
        #expect(try (addresses.count > 1).text(for: .v4) == "Addresses/$count gt 1")
        // Bound operations and function parameters that are not primitive.
        let bound = OperationCall<[SalesV4.Product]>.boundFunction(
            "Sales.Similar", on: SalesV4.SalesService.products.path(.init(productID: "P1")),
            parameters: [.init("Top", Int32(3)), .init("Tags", ["a", "b"])], result: .entities(SalesV4.Product.self))
        #expect(bound.request(for: .v4).url == "Products('P1')/Sales.Similar(Top=3,Tags=@p1)?@p1=[\"a\",\"b\"]")
        let action = OperationCall<Void>.boundAction(
            "Sales.Confirm", on: SalesV4.SalesService.salesOrders.path(.init(orderID: "SO1")), result: .none)
        #expect(
            action.request(for: .v4).method == "POST"
                && action.request(for: .v4).url == "SalesOrders('SO1')/Sales.Confirm")
    }

    @Test func v2SelectsWhatItExpands() throws {
        // A level that selects nothing but expands one that does: the parent's `*` and the child's fields.
        #expect(
            try text(orders.expand(\.items) { $0.select(\.quantity).expand(\.product) }, .v2)
                == "SalesOrders?$select=*,Items/Quantity,Items/Product&$expand=Items,Items/Product")
        // A grandchild that selects: the levels above keep all their properties.
        #expect(
            try text(orders.expand(\.items) { $0.expand(\.product) { $0.select(\.name) } }, .v2)
                == "SalesOrders?$select=*,Items,Items/Product/Name&$expand=Items,Items/Product")
        #expect(
            try text(orders.select(\.orderID).expand(\.items) { $0.expand(\.product) }, .v2)
                == "SalesOrders?$select=OrderID,Items,Items/Product&$expand=Items,Items/Product")
    }

    @Test func optionsAndNestedExpands() throws {
        let query =
            orders
            .select(\.orderID, \.grossAmount)
            .expand(\.items) { $0.filter { $0.quantity > 1 }.orderBy(\.itemPosition, descending: true).top(2) }
            .orderBy(\.orderDate, descending: true)
            .skip(5).top(10).withCount()
        #expect(
            try text(query)
                == "SalesOrders?$select=OrderID,GrossAmount&$expand=Items($filter=Quantity gt 1;$orderby=ItemPosition desc;"
                + "$top=2)&$orderby=OrderDate desc&$top=10&$skip=5&$count=true")
        #expect(throws: QueryError.self) { try text(query, .v2) }
        #expect(
            try text(orders.select(\.orderID).expand(\.items), .v2) == "SalesOrders?$select=OrderID,Items&$expand=Items"
        )
        #expect(
            try text(orders.expand(\.items) { $0.expand(\.product) }, .v2) == "SalesOrders?$expand=Items,Items/Product")
        #expect(
            try text(orders.expand(\.items) { $0.expand(\.product) }) == "SalesOrders?$expand=Items($expand=Product)")
        #expect(
            try text(orders.expand(\.partner).withCount(), .v2) == "SalesOrders?$expand=Partner&$inlinecount=allpages")
        #expect(
            try text(orders.orderBy { $0.partner.companyName.descending }.orderBy(\.orderID))
                == "SalesOrders?$orderby=Partner/CompanyName desc,OrderID")
        #expect(try text(partners.select(\.companyName, \.address)) == "BusinessPartners?$select=CompanyName,Address")
        #expect(try text(products.search("blue OR green")) == "Products?$search=blue OR green")
        #expect(throws: QueryError.self) { try text(products.search("blue"), .v2) }
    }

    @Test func pathsKeysAndOperations() throws {
        let orderKey = Order.Key(orderID: "SO1")
        #expect(SalesV4.SalesService.salesOrders.path(orderKey).text(for: .v4) == "SalesOrders('SO1')")
        let itemKey = SalesV4.SalesOrderItem.Key(orderID: "SO1", itemPosition: 10)
        #expect(
            SalesV4.SalesService.salesOrderItems.path(itemKey).text(for: .v2)
                == "SalesOrderItems(OrderID='SO1',ItemPosition=10)")
        let contactKey = SalesV4.Contact.Key(contactID: 5)
        #expect(SalesV4.SalesService.contacts.path(contactKey).text(for: .v4) == "Contacts(5)")
        #expect(SalesV4.SalesService.contacts.path(contactKey).text(for: .v2) == "Contacts(5L)")
        let related = SalesV4.SalesService.salesOrders.related(\.items, of: orderKey).filter { $0.quantity > 2 }
        #expect(try text(related) == "SalesOrders('SO1')/Items?$filter=Quantity gt 2")
        let function = SalesV4.SalesService.getProductsByCategory(categoryID: "C1").request(for: .v4)
        #expect(
            function.method == "GET" && function.url == "GetProductsByCategory(CategoryID='C1')"
                && function.body.isEmpty)
        let action = SalesV4.SalesService.confirmOrder(orderID: "SO1").request(for: .v4)
        #expect(action.method == "POST" && action.url == "ConfirmOrder")
        #expect(String(decoding: action.body, as: UTF8.self) == #"{"OrderID":"SO1"}"#)
        let v2Function = SalesV2.SalesService.getProductsByCategory(categoryID: "C1").request(for: .v2)
        #expect(v2Function.method == "GET" && v2Function.url == "GetProductsByCategory?CategoryID='C1'")
        let v2Action = SalesV2.SalesService.confirmOrder(orderID: "SO1").request(for: .v2)
        #expect(v2Action.method == "POST" && v2Action.url == "ConfirmOrder?OrderID='SO1'")
        #expect(try text(TypedQuery<SalesV4.SalesOrder>()) == "SalesOrders")
    }

    /// The benchmark's plugin input is the sample's metadata.
    @Test func benchmarkMetadataIsTheSamples() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let copy = try String(
            contentsOf: root.appendingPathComponent("Benchmarks/Sources/TypedRatio/Sales.metadata.xml"), encoding: .utf8
        )
        #expect(
            copy.trimmingCharacters(in: .whitespacesAndNewlines)
                == SalesSample.metadata.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// The generated test types are what the generator writes today for the sample service, V4 and V2.
    @Test func generatedSampleTypesAreCurrent() throws {
        let model = try SalesSample.model()
        let tests = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        let cli = tests.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Sources/oodata")
        for (namespace, metadata, file, access) in [
            (
                "SalesV4", SalesSample.metadata, tests.appendingPathComponent("Generated/SalesV4.swift"),
                SwiftGenerator.Access.public
            ),
            ("SalesV2", MetadataWriter().v2(model), tests.appendingPathComponent("Generated/SalesV2.swift"), .public),
            ("Sales", SalesSample.metadata, cli.appendingPathComponent("Generated/SalesTypes.swift"), .internal),
        ] {
            let parsed = try MetadataParser().parse(metadata)
            var generator = SwiftGenerator(model: parsed, access: access, namespace: namespace)
            let source = generator.generate()
            let url = file
            if ProcessInfo.processInfo.environment["OODATA_REGENERATE"] == "1" {
                try source.write(to: url, atomically: true, encoding: .utf8)
            }
            let committed = try String(contentsOf: url, encoding: .utf8)
            #expect(
                source == committed, "run the tests with OODATA_REGENERATE=1 to regenerate \(file.lastPathComponent)")
        }
    }
}
