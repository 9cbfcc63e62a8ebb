import Foundation
import Testing
import ODataCore
@testable import ODataStore

/// A small catalogue covering every kind of column, with nulls, for query tests.
enum Catalogue {
    static let metadata = """
    <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
    <Schema Namespace="C" xmlns="http://docs.oasis-open.org/odata/ns/edm">
      <EnumType Name="Color" IsFlags="true"><Member Name="Red" Value="1"/><Member Name="Green" Value="2"/><Member Name="Blue" Value="4"/></EnumType>
      <ComplexType Name="Address"><Property Name="City" Type="Edm.String"/><Property Name="Zip" Type="Edm.String"/></ComplexType>
      <EntityType Name="Category"><Key><PropertyRef Name="ID"/></Key><Property Name="ID" Type="Edm.Int32" Nullable="false"/>
        <Property Name="Name" Type="Edm.String"/>
        <NavigationProperty Name="Products" Type="Collection(C.Product)" Partner="Category"/></EntityType>
      <EntityType Name="Product"><Key><PropertyRef Name="ID"/></Key>
        <Property Name="ID" Type="Edm.Int32" Nullable="false"/>
        <Property Name="Name" Type="Edm.String"/>
        <Property Name="Price" Type="Edm.Decimal" Scale="2"/>
        <Property Name="Rating" Type="Edm.Double"/>
        <Property Name="Stock" Type="Edm.Int64"/>
        <Property Name="Released" Type="Edm.DateTimeOffset"/>
        <Property Name="Available" Type="Edm.Date"/>
        <Property Name="Color" Type="C.Color"/>
        <Property Name="Code" Type="Edm.Guid"/>
        <Property Name="Address" Type="C.Address"/>
        <Property Name="Tags" Type="Collection(Edm.String)"/>
        <Property Name="CategoryID" Type="Edm.Int32"/>
        <NavigationProperty Name="Category" Type="C.Category" Partner="Products"><ReferentialConstraint Property="CategoryID" ReferencedProperty="ID"/></NavigationProperty>
        <NavigationProperty Name="Related" Type="Collection(C.Product)"/>
      </EntityType>
      <EntityContainer Name="Service">
        <EntitySet Name="Categories" EntityType="C.Category"><NavigationPropertyBinding Path="Products" Target="Products"/></EntitySet>
        <EntitySet Name="Products" EntityType="C.Product">
          <NavigationPropertyBinding Path="Category" Target="Categories"/><NavigationPropertyBinding Path="Related" Target="Products"/></EntitySet>
      </EntityContainer>
    </Schema></edmx:DataServices></edmx:Edmx>
    """

    static let categories = #"{"value":[{"ID":1,"Name":"Tools"},{"ID":2,"Name":"Toys"},{"ID":3,"Name":null}]}"#
    static let products = #"""
    {"value":[
     {"ID":1,"Name":"Hammer","Price":12.50,"Rating":4.5,"Stock":10,"Released":"2020-01-01T10:00:00+02:00","Available":"2020-01-05","Color":"Red","Code":"00000000-0000-0000-0000-000000000001","Address":{"City":"Berlin","Zip":"10115"},"Tags":["steel","heavy"],"CategoryID":1},
     {"ID":2,"Name":"hammer drill","Price":99.99,"Rating":3.0,"Stock":0,"Released":"2020-01-01T07:00:00Z","Available":"2021-03-01","Color":"Red,Blue","Code":"00000000-0000-0000-0000-000000000002","Address":{"City":"Paris","Zip":null},"Tags":["power"],"CategoryID":1},
     {"ID":3,"Name":"Yo-yo","Price":2.5,"Rating":null,"Stock":500,"Released":"2019-12-31T23:30:00-01:00","Available":"2019-06-30","Color":"Green","Code":"00000000-0000-0000-0000-000000000003","Address":null,"Tags":[],"CategoryID":2},
     {"ID":4,"Name":null,"Price":null,"Rating":1.25,"Stock":null,"Released":null,"Available":null,"Color":null,"Code":null,"Address":{"City":"Berlin","Zip":"10117"},"Tags":["steel"],"CategoryID":null},
     {"ID":5,"Name":"It's a kite","Price":100,"Rating":5,"Stock":7,"Released":"2022-06-15T12:00:00Z","Available":"2022-06-15","Color":"Blue","Code":"00000000-0000-0000-0000-000000000005","Address":{"City":"Zürich","Zip":"8001"},"Tags":["wind","steel"],"CategoryID":2}
    ]}
    """#

    static func store(_ dir: TemporaryDirectory, key: String? = nil) async throws -> Store {
        let model = try MetadataParser().parse(metadata)
        let store = try await Store.create(path: dir.path("catalogue.sqlite"), model: model, key: key)
        let reader = V4JSONReader(model: model)
        let cats = try reader.readCollection(Array(categories.utf8), entityType: "C.Category").entities
        let prods = try reader.readCollection(Array(products.utf8), entityType: "C.Product").entities
        try await store.write { writer in
            try writer.bulkInsert(cats, into: "Categories")
            try writer.bulkInsert(prods, into: "Products")
            try writer.link("Products", key: ["ID": .int32(1)], navigation: "Related", to: ["ID": .int32(2)])
            try writer.link("Products", key: ["ID": .int32(1)], navigation: "Related", to: ["ID": .int32(5)])
            try writer.link("Products", key: ["ID": .int32(3)], navigation: "Related", to: ["ID": .int32(5)])
        }
        return store
    }
}

@Suite struct StoreQueryTests {
    static func ids(_ result: QueryResult) -> [Int32] {
        guard case .collection(let collection) = result else { return [] }
        return collection.entities.compactMap { if case .primitive(.int32(let id))? = $0["ID"] { return id }; return nil }
    }

    /// query → expected IDs in order.
    static let cases: [(String, [Int32])] = [
        ("Products", [1, 2, 3, 4, 5]),
        ("Products?$filter=Name eq 'Hammer'", [1]),
        ("Products?$filter=Name eq 'hammer'", []),
        ("Products?$filter=Name ne 'Hammer'", [2, 3, 4, 5]),
        ("Products?$filter=Name eq null", [4]),
        ("Products?$filter=Name ne null", [1, 2, 3, 5]),
        ("Products?$filter=contains(Name,'ammer')", [1, 2]),
        ("Products?$filter=contains(Name,'AMMER')", []),
        ("Products?$filter=startswith(Name,'ham')", [2]),
        ("Products?$filter=endswith(Name,'kite')", [5]),
        // An empty string starts, ends and is contained in every value that is not null.
        ("Products?$filter=endswith(Name,'')", [1, 2, 3, 5]),
        ("Products?$filter=startswith(Name,'')", [1, 2, 3, 5]),
        ("Products?$filter=contains(Name,'')", [1, 2, 3, 5]),
        ("Products?$filter=indexof(Name,'mm') eq 2", [1, 2]),
        ("Products?$filter=substring(Name,1,3) eq 'amm'", [1, 2]),
        ("Products?$filter=length(Name) eq 6", [1]),
        ("Products?$filter=tolower(Name) eq 'hammer'", [1]),
        ("Products?$filter=toupper(Name) eq 'YO-YO'", [3]),
        ("Products?$filter=concat(Name,'!') eq 'Yo-yo!'", [3]),
        ("Products?$filter=trim(' x ') eq 'x' and ID eq 1", [1]),
        ("Products?$filter=Name eq 'It''s a kite'", [5]),
        ("Products?$filter=Price gt 12.5", [2, 5]),
        ("Products?$filter=Price ge 12.50", [1, 2, 5]),
        ("Products?$filter=Price lt 10", [3]),
        ("Products?$filter=Price eq 100", [5]),
        ("Products?$filter=Rating ge 4.5", [1, 5]),
        ("Products?$filter=Rating lt 2", [4]),
        ("Products?$filter=Stock add 1 gt 10", [1, 3]),
        ("Products?$filter=Stock mul 2 eq 1000", [3]),
        ("Products?$filter=Stock mod 2 eq 1", [5]),
        ("Products?$filter=Stock div 3 eq 3", [1]),
        // sub and div are left-associative: 10 sub 3 sub 2 is 5, (10 div 5) div 2 is 1.
        ("Products?$filter=Stock sub 3 sub 2 eq 5", [1]),
        ("Products?$filter=Stock div 5 div 2 eq 1", [1]),
        ("Products?$filter=10 sub 3 sub 2 eq 5 and ID lt 3", [1, 2]),
        ("Products?$filter=Stock sub 3 add 2 eq 9", [1]),
        ("Products?$filter=-Stock lt -100", [3]),
        ("Products?$filter=Released lt 2020-01-01T08:30:00Z", [1, 2, 3]),
        ("Products?$filter=Released lt 2020-01-01T07:30:00Z", [2, 3]),
        ("Products?$filter=Released eq 2020-01-01T08:00:00Z", [1]),
        ("Products?$filter=Released eq 2020-01-01T10:00:00%2B02:00", [1]),
        ("Products?$filter=year(Released) eq 2019", [3]),
        ("Products?$filter=hour(Released) eq 10", [1]),
        ("Products?$filter=day(Released) eq 31", [3]),
        ("Products?$filter=totaloffsetminutes(Released) eq 120", [1]),
        ("Products?$filter=date(Released) eq 2019-12-31", [3]),
        ("Products?$filter=Available gt 2020-01-05", [2, 5]),
        ("Products?$filter=year(Available) eq 2021", [2]),
        ("Products?$filter=month(Available) eq 6", [3, 5]),
        ("Products?$filter=Color has C.Color'Blue'", [2, 5]),
        ("Products?$filter=Color eq C.Color'Red'", [1]),
        ("Products?$filter=Code eq 00000000-0000-0000-0000-000000000003", [3]),
        ("Products?$filter=ID in (1,3,9)", [1, 3]),
        ("Products?$filter=Address/City eq 'Berlin'", [1, 4]),
        ("Products?$filter=Address/Zip eq null", [2, 3]),
        ("Products?$filter=Address eq null", [3]),
        ("Products?$filter=Tags/any(t:t eq 'steel')", [1, 4, 5]),
        ("Products?$filter=Tags/all(t:t eq 'steel')", [3, 4]),
        ("Products?$filter=Tags/any()", [1, 2, 4, 5]),
        ("Products?$filter=Tags/$count eq 2", [1, 5]),
        ("Products?$filter=Category/Name eq 'Toys'", [3, 5]),
        ("Products?$filter=Category/Name eq null", [4]),
        ("Products?$filter=Related/any(r:r/Price gt 50)", [1, 3]),
        ("Products?$filter=Related/any(r:r/Tags/any(t:t eq 'power'))", [1]),
        ("Products?$filter=Related/all(r:r/Rating ge 3)", [1, 2, 3, 4, 5]),
        ("Products?$filter=Related/$count gt 1", [1]),
        // `gt` with a null operand is false, not unknown (Part 2, 5.1.1.1.3), so `not` makes
        // it true for product 4, whose Stock is null (issue 55's oracle found this).
        ("Products?$filter=not (Stock gt 5)", [2, 4]),
        ("Products?$filter=not (Stock in (0, 10))", [3, 4, 5]),
        ("Products?$filter=(Stock gt 5) eq false", [2, 4]),
        // Found by the oracle too: an enum casts to an integer as its value (5.1.1.10.1 rule 9);
        // case by Unicode rules; floor of a double past 2^52 is itself.
        ("Products?$filter=cast(Color,Edm.Int32) eq 5", [2]),
        ("Products?$filter=cast(Color,Edm.Byte) ge 2", [2, 3, 5]),
        ("Products?$filter=toupper(Address/City) eq 'ZÜRICH'", [5]),
        // What the oracle saw refused, now answered: a flags enum as a string; a date-time or a
        // date moved by a duration (in its own offset: 10:00+02:00 plus 14 hours is day 2).
        ("Products?$filter=cast(Color,Edm.String) eq 'Red,Blue'", [2]),
        ("Products?$filter=cast(Color,Edm.String) eq null", [4]),
        ("Categories?$filter=Products/$count($filter=Price gt 10) ge 2", [1]),
        // A reviewer's case: mod of reals keeps the fraction.
        ("Products?$filter=Rating mod 2 eq 0.5", [1]),
        ("Categories?$filter=Products/$count($filter=Price gt 10) eq 1", [2]),
        ("Products?$filter=Released add duration'PT1H' gt 2020-01-01T08:30:00Z", [1, 5]),
        ("Products?$filter=day(Released add duration'PT14H') eq 2", [1]),
        ("Products?$filter=Available add duration'P1D' eq 2020-01-06", [1]),
        ("Products?$filter=Available sub duration'P366D' lt 2019-01-01", [3]),
        // (3: Rating is null, and null eq null.)
        ("Products?$filter=floor(Rating mul 1e20) eq Rating mul 1e20", [1, 2, 3, 4, 5]),
        ("Products?$filter=round(Rating mul 1e20) eq Rating mul 1e20", [1, 2, 3, 4, 5]),
        ("Products?$filter=Stock gt 5 or Name eq null", [1, 3, 4, 5]),
        ("Products?$filter=round(Rating) eq 5", [1, 5]),
        ("Products?$filter=floor(Rating) eq 1", [4]),
        ("Products?$filter=ceiling(Rating) eq 2", [4]),
        ("Products?$filter=isof(C.Product)", [1, 2, 3, 4, 5]),
        ("Products?$filter=Stock gt @n&@n=100", [3]),
        ("Products?$orderby=Price", [4, 3, 1, 2, 5]),
        ("Products?$orderby=Price desc", [5, 2, 1, 3, 4]),
        ("Products?$orderby=Address/City,ID desc", [3, 4, 1, 2, 5]),
        ("Products?$orderby=Category/Name desc,ID", [3, 5, 1, 2, 4]),
        ("Products?$orderby=Released", [4, 3, 2, 1, 5]),
        ("Products?$top=2&$skip=1", [2, 3]),
        ("Products?$orderby=Rating desc&$top=2", [5, 1]),
        ("Products?$search=hammer", [1, 2]),
        ("Products?$search=hammer NOT drill", [1]),
        ("Products?$search=yo OR kite", [3, 5]),
        ("Products?$search=\"hammer drill\"", [2]),
        ("Categories(1)/Products", [1, 2]),
        ("Categories(2)/Products?$filter=Price lt 5", [3]),
        ("Products(1)/Related", [2, 5]),
        ("Products(1)/Related?$orderby=ID desc", [5, 2]),
    ]

    @Test func queryTable() async throws {
        for key in [nil, "secret"] as [String?] {
            let dir = TemporaryDirectory()
            let store = try await Catalogue.store(dir, key: key)
            defer { store.close() }
            for (url, expected) in Self.cases {
                do {
                    let result = try await store.query(url)
                    #expect(Self.ids(result) == expected, "\(url) (\(key == nil ? "unkeyed" : "keyed"))")
                } catch {
                    Issue.record("\(url): \(error)")
                }
            }
        }
    }

    @Test func singleEntitiesValuesCountsAndReferences() async throws {
        let dir = TemporaryDirectory()
        let store = try await Catalogue.store(dir)
        defer { store.close() }
        guard case .entity(let hammer?) = try await store.query("Products(1)") else {
            Issue.record("Products(1) must be one entity")
            return
        }
        #expect(hammer["Price"] == .primitive(.decimal(DecimalValue("12.5")!)))
        #expect(hammer["Color"] == .enumeration(EnumValue(typeName: "C.Color", members: ["Red"])))
        guard case .entity(nil) = try await store.query("Products(42)") else {
            Issue.record("a missing key is not found")
            return
        }
        #expect(try await store.query("Products/$count") == .count(5))
        #expect(try await store.query("Products/$count?$filter=Price gt 50") == .count(2))
        #expect(try await store.query("Products(1)/Name") == .value(.primitive(.string("Hammer"))))
        #expect(try await store.query("Products(1)/Address/City") == .value(.primitive(.string("Berlin"))))
        #expect(try await store.query("Products(1)/Tags/$count") == .count(2))
        #expect(try await store.query("Products(1)/Related/$ref") == .references(["Products(2)", "Products(5)"]))
        guard case .entity(let category?) = try await store.query("Products(3)/Category") else {
            Issue.record("Products(3)/Category")
            return
        }
        #expect(category["Name"] == .primitive(.string("Toys")))
        guard case .collection(let counted) = try await store.query("Products?$count=true&$top=1") else { return }
        #expect(counted.count == 5)
        #expect(counted.entities.count == 1)
    }

    @Test func selectAndExpandWithNestedOptions() async throws {
        let dir = TemporaryDirectory()
        let store = try await Catalogue.store(dir)
        defer { store.close() }
        guard case .collection(let categories) = try await store.query("Categories?$expand=Products($filter=Price gt 5;$orderby=Price desc;$select=Name,Price)&$select=Name") else {
            Issue.record("collection expected")
            return
        }
        #expect(categories.entities.count == 3)
        let tools = categories.entities[0]
        #expect(Set(tools.properties.map(\.name)) == ["ID", "Name"])
        guard case .collection(let toolProducts)? = tools.navigation("Products")?.inline else {
            Issue.record("expanded products expected")
            return
        }
        #expect(toolProducts.entities.map { $0["Name"] } == [.primitive(.string("hammer drill")), .primitive(.string("Hammer"))])
        #expect(Set(toolProducts.entities[0].properties.map(\.name)) == ["ID", "Name", "Price"])
        guard case .collection(let noName)? = categories.entities[2].navigation("Products")?.inline else { return }
        #expect(noName.entities.isEmpty)
        // Single-valued expand and $top per parent.
        guard case .collection(let products) = try await store.query("Products?$expand=Category,Related($top=1;$orderby=ID desc)&$filter=ID le 3") else { return }
        guard case .entity(let category?)? = products.entities[0].navigation("Category")?.inline,
              case .collection(let related)? = products.entities[0].navigation("Related")?.inline else {
            Issue.record("expanded values expected")
            return
        }
        #expect(category["Name"] == .primitive(.string("Tools")))
        #expect(related.entities.map { $0["ID"] } == [.primitive(.int32(5))])
        // $levels follows the same navigation again.
        guard case .entity(let withLevels?) = try await store.query("Products(3)?$expand=Related($levels=2)") else { return }
        guard case .collection(let first)? = withLevels.navigation("Related")?.inline else { return }
        #expect(first.entities.map { $0["ID"] } == [.primitive(.int32(5))])
        #expect(first.entities.first?.navigation("Related") != nil)
    }

    @Test func pagingResumesExactlyWhereItStopped() async throws {
        let dir = TemporaryDirectory()
        let store = try await Catalogue.store(dir)
        defer { store.close() }
        var url: String? = "Products?$orderby=Price desc"
        var seen: [Int32] = []
        var pages = 0
        while let next = url {
            guard case .collection(let page) = try await store.query(next, pageSize: 2) else { break }
            seen += Self.ids(.collection(page))
            url = page.nextLink
            pages += 1
            #expect(pages <= 3)
        }
        #expect(seen == [5, 2, 1, 3, 4])
        #expect(pages == 3)
    }

    @Test func keyOrderPagingResumesAfterTheLastRowEvenWhenRowsChange() async throws {
        let dir = TemporaryDirectory()
        let store = try await Catalogue.store(dir)
        defer { store.close() }
        guard case .collection(let first) = try await store.query("Products?$filter=ID gt 1", pageSize: 2), let next = first.nextLink else {
            Issue.record("no first page")
            return
        }
        #expect(Self.ids(.collection(first)) == [2, 3])
        #expect(next.contains("$skiptoken=r"), "\(next)")
        // A row before the resume point goes away: the next page still starts after ID 3.
        try await store.write { writer in _ = try writer.delete(from: "Products", key: ["ID": .int32(2)]) }
        guard case .collection(let second) = try await store.query(next, pageSize: 2) else { return }
        #expect(Self.ids(.collection(second)) == [4, 5])
        // A plain number still skips that many rows (and is what a token falls back to when its row is gone).
        guard case .collection(let counted) = try await store.query("Products?$skiptoken=1", pageSize: 2) else { return }
        #expect(Self.ids(.collection(counted)) == [3, 4])
        // $top counts the rows already returned.
        guard case .collection(let topped) = try await store.query("Products?$top=3", pageSize: 2), let more = topped.nextLink,
              case .collection(let rest) = try await store.query(more, pageSize: 2) else { return }
        #expect(Self.ids(.collection(topped)) + Self.ids(.collection(rest)) == [1, 3, 4])
    }

    @Test func unsupportedQueriesNameTheFeature() async throws {
        let dir = TemporaryDirectory()
        let store = try await Catalogue.store(dir)
        defer { store.close() }
        for (url, feature) in [("Products?$filter=Price add 1 gt 5", "Decimal"), ("Products?$filter=geo.distance(Address,Address) lt 1", "geo.distance"),
                               ("Products?$filter=matchesPattern(Name,'^H')", "matchespattern")] {
            do {
                _ = try await store.query(url)
                Issue.record("\(url) must fail")
            } catch let error as StoreError {
                #expect(error.code == .unsupported, "\(url): \(error)")
                #expect(error.message.contains(feature), "\(url): \(error)")
            } catch {
                // A binding error is also a clear refusal.
                #expect(error is BindingError, "\(url): \(error)")
            }
        }
    }
}

@Suite struct StoreSQLTests {
    @Test func expandRunsOneQueryPerLevelNotPerParent() async throws {
        let dir = TemporaryDirectory()
        let store = try await Catalogue.store(dir)
        defer { store.close() }
        let (_, few) = try await store.queryTracingSQL("Categories?$filter=ID eq 1&$expand=Products($expand=Related)")
        let (_, all) = try await store.queryTracingSQL("Categories?$expand=Products($expand=Related)")
        // The same number of statements whether one parent or three.
        #expect(few.count == all.count, "\(few) vs \(all)")
        let expandQueries = all.filter { $0.contains("JOIN") }
        #expect(expandQueries.count == 2, "one join per expand level: \(expandQueries)")
    }

    @Test func valuesAreBoundNeverSpliced() async throws {
        let dir = TemporaryDirectory()
        let store = try await Catalogue.store(dir)
        defer { store.close() }
        let (result, sql) = try await store.queryTracingSQL("Products?$filter=Name eq 'x'' OR 1=1 --' or contains(Name,'drop table')&$search=secretword")
        #expect(StoreQueryTests.ids(result).isEmpty)
        #expect(!sql.joined().contains("secretword"))
        #expect(!sql.joined().contains("drop table"))
        #expect(!sql.joined().contains("1=1"))
        // String comparisons use instr/substr, not LIKE (which ignores case).
        let (_, contains) = try await store.queryTracingSQL("Products?$filter=contains(Name,'a') and startswith(Name,'H')")
        #expect(!contains.joined().uppercased().contains(" LIKE "))
        #expect(contains.joined().contains("instr("))
    }
}

@Suite struct TripPinQueryTests {
    @Test func realModelAndData() async throws {
        let dir = TemporaryDirectory()
        let (store, people) = try await StoreWriteTests.tripPin(dir, key: "k")
        defer { store.close() }
        #expect(try await store.query("People/$count") == .count(Int64(people.count)))
        guard case .collection(let females) = try await store.query("People?$filter=Gender eq Microsoft.OData.SampleService.Models.TripPin.PersonGender'Female'&$orderby=LastName&$select=UserName,LastName") else { return }
        #expect(!females.entities.isEmpty)
        let lastNames = females.entities.compactMap { entity -> String? in if case .primitive(.string(let s))? = entity["LastName"] { return s }; return nil }
        #expect(lastNames == lastNames.sorted())
        guard case .collection(let inSF) = try await store.query("People?$filter=AddressInfo/any(a:a/City/Name eq 'Boise')") else { return }
        #expect(!inSF.entities.isEmpty)
        for person in inSF.entities {
            guard case .collection(let addresses)? = person["AddressInfo"] else { continue }
            #expect(addresses.contains { value in
                if case .complex(let address) = value, case .complex(let city)? = address["City"] { return city["Name"] == .primitive(.string("Boise")) }
                return false
            })
        }
        guard case .collection(let emails) = try await store.query("People?$filter=Emails/any(e:endswith(e,'@contoso.com'))&$top=3") else { return }
        #expect(emails.entities.count <= 3 && !emails.entities.isEmpty)
    }
}
