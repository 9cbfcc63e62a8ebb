import Foundation
import Testing
@testable import ODataCore

/// Every V4 JSON file under payloads/ decodes, re-encodes and decodes again into an equal
/// value, or is rejected with a clear error when it is invalid by design.
@Suite struct PayloadConformanceTests {
    /// Files that are invalid on purpose, with the reason the reader must reject them.
    static let invalidByDesign: [String: String] = [:]

    enum Decoded: Equatable {
        case entity(Entity)
        case collection(EntityCollection)
        case value(Value)
        case error(ODataError)
    }

    static func classify(_ bytes: [UInt8]) throws -> String {
        guard case .object(let members) = try JSONValue.parse(bytes) else { return "value" }
        if members.contains(where: { $0.name == "error" }) { return "error" }
        if let value = members.first(where: { $0.name == "value" })?.value {
            if case .array(let items) = value, items.allSatisfy({ if case .object = $0 { return true }; return false }) { return "collection" }
            return "value"
        }
        return "entity"
    }

    static func decode(_ bytes: [UInt8], as kind: String, reader: V4JSONReader, entityType: String? = nil) throws -> Decoded {
        switch kind {
        case "error": return .error(try ODataError.parse(bytes))
        case "collection": return .collection(try reader.readCollection(bytes, entityType: entityType))
        case "value": return .value(try reader.readValue(bytes, type: nil))
        default: return .entity(try reader.readEntity(bytes, entityType: entityType))
        }
    }

    static func encode(_ decoded: Decoded) -> [UInt8] {
        let writer = V4JSONWriter(format: JSONFormat(metadata: .full))
        switch decoded {
        case .entity(let e): return writer.write(e)
        case .collection(let c): return writer.write(c)
        case .value(let v): return writer.writeValue(v)
        case .error(let e): return e.v4JSON()
        }
    }

    static var v4Files: [URL] {
        let root = Conformance.url("payloads/v4-json")
        let enumerator = FileManager.default.enumerator(atPath: root.path)
        var files: [URL] = []
        while let next = enumerator?.nextObject() as? String {
            if next.hasSuffix(".json") { files.append(root.appendingPathComponent(next)) }
        }
        return files.sorted { $0.path < $1.path }
    }

    @Test func v4FilesRoundTrip() throws {
        let files = Self.v4Files
        #expect(files.count > 50)
        var failures: [String] = []
        for file in files {
            let name = file.path.replacingOccurrences(of: Conformance.url("payloads").path + "/", with: "")
            let bytes = Array(try Data(contentsOf: file))
            do {
                let kind = try Self.classify(bytes)
                let first = try Self.decode(bytes, as: kind, reader: V4JSONReader())
                let second = try Self.decode(Self.encode(first), as: kind, reader: V4JSONReader())
                if first != second { failures.append("\(name): round trip differs") }
                if Self.invalidByDesign[name] != nil { failures.append("\(name): accepted but invalid by design") }
            } catch {
                if Self.invalidByDesign[name] == nil { failures.append("\(name): \(error)") }
            }
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
    }
}

extension PayloadConformanceTests {
    static let trippinTypes: [String: String] = [
        "people.json": "Person", "airlines.json": "Airline", "airports.json": "Airport", "photos.json": "Photo",
        "event.json": "Event", "flight.json": "Flight", "trip.json": "Trip",
    ]

    /// With the model, TripPin data comes out typed, and still round-trips.
    @Test(arguments: trippinTypes.keys.sorted())
    func trippinDataIsTypedByTheModel(_ file: String) throws {
        let folder = "payloads/v4-json/olingo4-trippin-data/"
        let model = try MetadataParser().parse(try Conformance.data(folder + "trippin.xml"))
        let type = "Microsoft.OData.SampleService.Models.TripPin." + (Self.trippinTypes[file] ?? "")
        let reader = V4JSONReader(model: model)
        let bytes = Array(try Conformance.data(folder + file))
        let first = try reader.readCollection(bytes, entityType: type)
        #expect(!first.entities.isEmpty)
        for writer in [V4JSONWriter(format: JSONFormat(metadata: .minimal)), V4JSONWriter(format: JSONFormat(metadata: .full, ieee754Compatible: true))] {
            let second = try reader.readCollection(writer.write(first), entityType: type)
            #expect(second == first)
        }
        // Typed values, not JSON shapes.
        for entity in first.entities {
            for property in entity.properties {
                guard let declared = model.property(property.name, ofStructuredType: type), !declared.type.isCollection,
                      let primitive = PrimitiveType(qualifiedName: declared.type.name), case .primitive(let value) = property.value else { continue }
                #expect(value.type == primitive, "\(file): \(property.name)")
            }
        }
    }

    @Test func typedValuesFromTripPin() throws {
        let folder = "payloads/v4-json/olingo4-trippin-data/"
        let model = try MetadataParser().parse(try Conformance.data(folder + "trippin.xml"))
        let ns = "Microsoft.OData.SampleService.Models.TripPin."
        let flights = try V4JSONReader(model: model).readCollection(Array(try Conformance.data(folder + "flight.json")), entityType: ns + "Flight")
        guard case .primitive(.dateTimeOffset(let start))? = flights.entities.first?["StartsAt"] else {
            Issue.record("StartsAt must be a DateTimeOffset")
            return
        }
        #expect(start.description == "2014-01-01T06:15:00Z")
        let people = try V4JSONReader(model: model).readCollection(Array(try Conformance.data(folder + "people.json")), entityType: ns + "Person")
        guard case .enumeration(let gender)? = people.entities.first?["Gender"] else {
            Issue.record("Gender must be an enum")
            return
        }
        #expect(gender.typeName == ns + "PersonGender")
        guard case .collection(let addresses)? = people.entities.first?["AddressInfo"], case .complex(let address)? = addresses.first else {
            Issue.record("AddressInfo must be a collection of complex values")
            return
        }
        #expect(address.typeName == ns + "Location")
    }
}

extension PayloadConformanceTests {
    /// V2 JSON files that are invalid on purpose.
    static let invalidV2: [String: String] = [
        "invalidSvcDocJson.json": "malformed JSON: the EntitySets array has no opening bracket",
        "InvalidSvcDocJson2.json": "malformed JSON: an extra closing brace after the document",
        "JsonInvalidTeamDoubleNameProperty.json": "the property Name appears twice in one entity",
    ]

    static var v2Files: [String] {
        let dir = Conformance.url("payloads/v2-json/olingo2")
        return ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []).filter { $0.hasSuffix(".json") }.sorted()
    }

    static func v2IsCollection(_ bytes: [UInt8]) throws -> Bool {
        let root = try JSONValue.parse(bytes)
        let content = root["d"] ?? root
        if case .array = content { return true }
        return content["results"] != nil
    }

    @Test func v2FilesRoundTripOrAreRejected() throws {
        var failures: [String] = []
        #expect(Self.v2Files.count > 30)
        for name in Self.v2Files {
            let bytes = Array(try Conformance.data("payloads/v2-json/olingo2/" + name))
            do {
                let reader = V2JSONReader()
                let writer = V2JSONWriter()
                if try Self.v2IsCollection(bytes) {
                    let first = try reader.readCollection(bytes)
                    let second = try reader.readCollection(writer.write(first))
                    if first != second { failures.append("\(name): round trip differs") }
                } else {
                    let first = try reader.readEntity(bytes)
                    let second = try reader.readEntity(writer.write(first))
                    if first != second { failures.append("\(name): round trip differs") }
                }
                if Self.invalidV2[name] != nil { failures.append("\(name): accepted but invalid by design") }
            } catch let error as PayloadError {
                if Self.invalidV2[name] == nil { failures.append("\(name): \(error)") }
            }
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
    }

    @Test func v2TypedWithTheReferenceScenarioModel() throws {
        let model = try MetadataParser().parse(try Conformance.data("metadata/v2/olingo2-refScenario.xml"))
        let reader = V2JSONReader(model: model)
        let employee = try reader.readEntity(Array(try Conformance.data("payloads/v2-json/olingo2/JsonEmployee.json")), entityType: "RefScenario.Employee")
        #expect(employee.typeName == "RefScenario.Employee")
        #expect(employee.control.mediaReadLink == "Employees('1')/$value")
        guard case .primitive(.int16(let age))? = employee["Age"] else {
            Issue.record("Age must be an Int16: \(String(describing: employee["Age"]))")
            return
        }
        #expect(age > 0)
        guard case .primitive(.dateTime(let entry))? = employee["EntryDate"] else {
            Issue.record("EntryDate must be a DateTime: \(String(describing: employee["EntryDate"]))")
            return
        }
        #expect(entry.date.year > 1970)
        #expect(employee.navigation("ne_Manager")?.navigationLink?.hasSuffix("ne_Manager") == true)
        let again = try reader.readEntity(V2JSONWriter().write(employee), entityType: "RefScenario.Employee")
        #expect(again == employee)

        let teams = try reader.readCollection(Array(try Conformance.data("payloads/v2-json/olingo2/JsonTeamsWithCount.json")), entityType: "RefScenario.Team")
        #expect(teams.count == 3)
        #expect(teams.entities.count >= 2)
        let deleted = try reader.readCollection(Array(try Conformance.data("payloads/v2-json/olingo2/JsonWithDeletedEntries.json")), entityType: "RefScenario.Room")
        #expect(deleted.deleted.map(\.id) == ["http://host:80/service/Rooms('3')", "http://host:80/service/Rooms('4')"])
        #expect(deleted.deltaLink != nil)
    }

    @Test func v2DatesAndRequestBodies() throws {
        #expect(V2JSONReader.parseDate("/Date(1234567890000)/", as: .dateTime) == .dateTime(DateTimeOffsetValue(
            date: DateValue(year: 2009, month: 2, day: 13), time: TimeOfDayValue(hour: 23, minute: 31, second: 30), offsetMinutes: nil)))
        guard case .dateTimeOffset(let withOffset)? = V2JSONReader.parseDate("/Date(1234567890000+0060)/", as: .dateTimeOffset) else {
            Issue.record("offset date")
            return
        }
        #expect(withOffset.offsetMinutes == 60)
        #expect(withOffset.time.hour == 0)
        // Written back as the same instant with `+0000`, the form every V2 reader agrees on;
        // an Edm.DateTime has no offset part.
        #expect(V2JSONWriter.dateText(withOffset, offset: true) == "/Date(1234567890000+0000)/")
        #expect(V2JSONWriter.dateText(withOffset, offset: false) == "/Date(1234567890000)/")
        #expect(V2JSONReader.parseDate("/Date(1234567890000+0000)/", as: .dateTimeOffset).map { Literal.format(.primitive($0)) }
                == "2009-02-13T23:31:30+00:00")
        var order = Entity(typeName: "RefScenario.Room")
        order["Id"] = .primitive(.string("7"))
        order["Seats"] = .primitive(.int16(3))
        var link = NavigationValue(name: "nr_Building")
        link.bind = ["Buildings('1')"]
        order.navigation.append(link)
        let body = String(decoding: V2JSONWriter().writeRequestBody(order), as: UTF8.self)
        #expect(body == #"{"__metadata":{"type":"RefScenario.Room"},"Id":"7","Seats":3,"nr_Building":{"__metadata":{"uri":"Buildings('1')"}}}"#)
        let read = try V2JSONReader().readEntity(Array(body.utf8))
        #expect(read.navigation("nr_Building")?.bind == ["Buildings('1')"])
    }
}

@Suite struct PayloadRobustnessTests {
    static let model = """
    <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
    <Schema Namespace="T" xmlns="http://docs.oasis-open.org/odata/ns/edm">
      <EntityType Name="P"><Key><PropertyRef Name="ID"/></Key><Property Name="ID" Type="Edm.Int64" Nullable="false"/>
        <Property Name="When" Type="Edm.DateTimeOffset"/><Property Name="Price" Type="Edm.Decimal"/></EntityType>
      <EntityContainer Name="C"><EntitySet Name="Ps" EntityType="T.P"/></EntityContainer>
    </Schema></edmx:DataServices></edmx:Edmx>
    """

    @Test func wronglyTypedValuesNameThePlace() throws {
        let reader = V4JSONReader(model: try MetadataParser().parse(Self.model))
        let cases: [(String, String)] = [
            (#"{"value":[{"ID":1},{"ID":"x"}]}"#, "value[1].ID"),
            (#"{"value":[{"ID":1,"When":"yesterday"}]}"#, "value[0].When"),
            (#"{"value":[{"ID":1.5}]}"#, "value[0].ID"),
            (#"{"value":[{"ID":1,"Price":true}]}"#, "value[0].Price"),
            (#"{"value":[{"ID":1},{"ID":2"#, "value[1]"),
        ]
        for (text, path) in cases {
            do {
                _ = try reader.readCollection(Array(text.utf8), entityType: "T.P")
                Issue.record("should fail: \(text)")
            } catch {
                #expect(error.path == path, "\(text): \(error)")
                #expect(error.offset > 0)
            }
        }
        // IEEE754Compatible strings are accepted for Int64 and Decimal.
        let ieee = try reader.readCollection(Array(#"{"value":[{"ID":"9007199254740993","Price":"12.345678901234567890"}]}"#.utf8), entityType: "T.P")
        #expect(ieee.entities.first?["ID"] == .primitive(.int64(9_007_199_254_740_993)))
        #expect(ieee.entities.first?["Price"] == .primitive(.decimal(DecimalValue("12.345678901234567890")!)))
        let written = String(decoding: V4JSONWriter(format: JSONFormat(ieee754Compatible: true)).write(ieee), as: UTF8.self)
        #expect(written.contains(#""ID":"9007199254740993""#))
    }

    @Test func mutatedCorpusFilesNeverCrash() throws {
        var generator = SystemRandomNumberGenerator()
        let files = PayloadConformanceTests.v4Files.prefix(20).map { Array((try? Data(contentsOf: $0)) ?? Data()) }
            + PayloadConformanceTests.v2Files.prefix(10).map { Array((try? Conformance.data("payloads/v2-json/olingo2/" + $0)) ?? Data()) }
        for bytes in files where !bytes.isEmpty {
            for _ in 0..<40 {
                var mutated = bytes
                for _ in 0..<Int.random(in: 1...6, using: &generator) {
                    mutated[Int.random(in: 0..<mutated.count, using: &generator)] = "{}[]\",:0a\\n-".utf8.randomElement(using: &generator) ?? 0
                }
                let cut = Array(mutated.prefix(Int.random(in: 0...mutated.count, using: &generator)))
                for input in [mutated, cut] {
                    _ = try? V4JSONReader().readCollection(input)
                    _ = try? V4JSONReader().readEntity(input)
                    _ = try? V2JSONReader().readCollection(input)
                    _ = try? V2JSONReader().readEntity(input)
                    _ = try? ODataError.parse(input)
                    var parser = CollectionStreamParser()
                    _ = try? parser.feed(input)
                    _ = try? parser.finish()
                }
            }
        }
        // Deep nesting is refused, not a stack overflow.
        let deep = Array((String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)).utf8)
        #expect(throws: PayloadError.self) { try JSONValue.parse(deep) }
        #expect(throws: PayloadError.self) { try V4JSONReader().readValue(Array(#"{"value":"#.utf8) + deep + Array("}".utf8), type: nil) }
    }

    @Test func conformanceDocumentListsEveryInvalidFile() throws {
        let document = try String(contentsOf: Conformance.repositoryRoot.appendingPathComponent("docs/conformance.md"), encoding: .utf8)
        for name in Array(PayloadConformanceTests.invalidV2.keys) + Array(BatchTests.invalidByDesign.keys) {
            #expect(document.contains(name), "docs/conformance.md must say why \(name) is rejected")
        }
    }
}
