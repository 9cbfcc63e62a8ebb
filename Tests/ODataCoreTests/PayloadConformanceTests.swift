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
