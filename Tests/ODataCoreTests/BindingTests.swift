import Foundation
import Testing
@testable import ODataCore

@Suite struct BindingTests {
    static let trippinNS = "Microsoft.OData.SampleService.Models.TripPin"

    static func model(_ file: String) throws -> Model {
        try MetadataParser().parse(try Conformance.data("metadata/" + file))
    }

    func bind(_ url: String, _ file: String = "v4/trippin-SampleService-Models-TripPin.xml") throws -> BoundRequest {
        let model = try Self.model(file)
        let parsed = try URLParser(version: .v401).parse(url)
        return try RequestBinder(model: model).bind(parsed, input: url)
    }

    @Test func pathsResolveAgainstTheModel() throws {
        let request = try bind("People('russellwhyte')/Trips(0)/PlanItems")
        let kinds = request.path.path.segments.map(\.kind)
        #expect(kinds.count == 5)
        #expect(kinds[0] == .entitySet("People"))
        #expect(kinds[2] == .navigation("Trips"))
        #expect(kinds[4] == .navigation("PlanItems"))
        guard case .key(let personKey) = kinds[1], case .key(let tripKey) = kinds[3] else {
            Issue.record("keys expected")
            return
        }
        #expect(personKey.map(\.value.node) == [.literal(.primitive(.string("russellwhyte")))])
        #expect(tripKey.map(\.value.node) == [.literal(.primitive(.int32(0)))])
        #expect(request.path.shape == .entityCollection(type: "\(Self.trippinNS).PlanItem"))
        #expect(try bind("Me/Friends/$count").path.shape == .primitive(type: "Edm.Int32"))
        #expect(try bind("People('a')/FirstName/$value").path.shape == .stream)
        let cast = try bind("People('a')/Friends/\(Self.trippinNS).Person")
        #expect(cast.path.path.segments.last?.kind == .typeCast("\(Self.trippinNS).Person"))
        let function = try bind("GetNearestAirport(lat=1.5,lon=2)")
        guard case .functionImport("GetNearestAirport", let arguments) = function.path.path.segments[0].kind else {
            Issue.record("function import expected")
            return
        }
        #expect(arguments.map(\.name) == ["lat", "lon"])
    }

    @Test func pathErrorsNameTheSegment() throws {
        let cases: [(String, String)] = [
            ("Peoples", "is not an entity set"),
            ("People('a')/Nope", "is not a property"),
            ("People('a')/FirstName/Foo", "cannot follow"),
            ("People/$value", "$value"),
            ("People('a')/Trips/$count/x", "Nothing may follow"),
            ("People('a')('b')", "A key may only follow"),
        ]
        for (url, message) in cases {
            do {
                _ = try bind(url)
                Issue.record("\(url) should not bind")
            } catch let error as BindingError {
                #expect(error.message.contains(message), "\(url): \(error.message)")
            }
        }
    }

    @Test func filterTypesAndPromotion() throws {
        let request = try bind("Airports?$filter=Location/Address eq 'x' and length(Name) add cast(1,Edm.Int64) gt 3")
        let filter = try #require(request.filter)
        #expect(filter.type == .primitive(.boolean))
        let right = filter.operands[1]
        let sum = right.operands[0]
        #expect(sum.type == .primitive(.int64), "Int32 add Int64 promotes to Int64")
        let location = filter.operands[0].operands[0]
        #expect(location.steps.map(\.name) == ["Location", "Address"])
        #expect(location.type == .primitive(.string))
    }

    @Test func typeErrorsGivePositionAndReason() throws {
        let cases: [(String, String, Int)] = [
            ("People?$filter=FirstName eq 5", "Cannot compare Edm.String with Edm.Int32", 13),
            ("People?$filter=FirstName", "must be a Boolean", 0),
            ("Airlines?$filter=Nope eq 1", "has no property Nope", 0),
            ("People?$filter=contains(Concurrency,'a')", "Argument 1 of contains must be a string", 9),
            ("People?$filter=Friends/any(f:f/FirstName eq 1)", "Cannot compare", 29),
            ("People?$orderby=Friends", "single value", 0),
            ("People?$filter=FirstName add 1 eq 2", "cannot combine", 14),
        ]
        for (url, message, offset) in cases {
            do {
                _ = try bind(url)
                Issue.record("\(url) should not bind")
            } catch let error as BindingError {
                #expect(error.message.contains(message), "\(url): \(error.message)")
                #expect(error.offset == offset, "\(url): \(error)")
            }
        }
    }

    @Test func lambdaVariablesAreTyped() throws {
        let request = try bind("People?$filter=Trips/any(t:t/PlanItems/all(p:p/ConfirmationCode ne null) and t/Budget gt 100)")
        let lambda = try #require(request.filter)
        #expect(lambda.steps.last?.kind == .any)
        #expect(lambda.type == .primitive(.boolean))
    }

    @Test func enumsAndExpand() throws {
        let request = try bind("People?$filter=Gender eq \(Self.trippinNS).PersonGender'Female'&$expand=Friends($filter=FirstName eq 'a';$expand=Trips)")
        #expect(request.expand.first?.targetType == "\(Self.trippinNS).Person")
        #expect(request.expand.first?.isCollection == true)
        #expect(request.expand.first?.expand.first?.targetType == "\(Self.trippinNS).Trip")
        #expect(throws: BindingError.self) { try bind("People?$expand=FirstName") }
        #expect(throws: BindingError.self) { try bind("Airlines?$select=Nope") }
        // Person is an open type: unknown names are dynamic properties.
        #expect(throws: Never.self) { try bind("People?$select=Nope&$filter=Nope eq 1") }
    }

    @Test func v2ModelBinding() throws {
        let model = try Self.model("v2/northwind-v2-pyodata.xml")
        let url = "Products(1)/Category?$filter=substringof('a',CategoryName) and CategoryID le 200L"
        let parsed = try URLParser(version: .v2).parse(url)
        let bound = try RequestBinder(model: model).bind(parsed, input: url)
        #expect(bound.path.shape == .entity(type: "NorthwindModel.Category"))
        #expect(bound.filter?.type == .primitive(.boolean))
        #expect(model.targetEntitySet(from: "Products", navigationPath: "Category")?.name == "Categories")
    }

    @Test func keyAsSegmentWhenTheServiceAllowsIt() throws {
        let model = try Self.model("v4/northwind-key-as-segment.xml")
        let set = try #require(model.entityContainer?.entitySets.first)
        let parsed = try URLParser(version: .v401).parse("\(set.name)/42")
        let resolution = try PathResolver(lookup: model).resolve(parsed.path, input: "")
        #expect(resolution.path.segments.last?.kind == .keySegment("42"))
        if case .entity = resolution.shape {} else { Issue.record("expected one entity, got \(resolution.shape)") }
    }
}
