/// Writes entities and collections as V4 JSON.
///
/// Control information that an entity carries is written at `minimal` and `full`; `none`
/// leaves it out. At `full`, every value whose JSON form would read back as another type gets
/// an `@odata.type` annotation, so that payloads round-trip even without a model.
public struct V4JSONWriter: Sendable {
    public var format: JSONFormat

    /// Creates a value from its parts.
    public init(format: JSONFormat = JSONFormat()) { self.format = format }

    public func write(_ entity: Entity) -> [UInt8] {
        var writer = JSONWriter()
        writeEntity(entity, &writer)
        return writer.bytes
    }

    public func write(_ collection: EntityCollection) -> [UInt8] {
        var writer = JSONWriter()
        writer.objectStart()
        if format.metadata != .none, let context = collection.context {
            writer.key("@odata.context")
            writer.string(context)
        }
        if let count = collection.count {
            writer.key("@odata.count")
            if format.ieee754Compatible { writer.string(String(count)) } else { writer.raw(String(count)) }
        }
        writeAnnotations(collection.annotations.filter { $0.property == nil }, &writer)
        writer.key("value")
        writeCollectionItems(collection, &writer)
        if let nextLink = collection.nextLink {
            writer.key("@odata.nextLink")
            writer.string(nextLink)
        }
        if let deltaLink = collection.deltaLink {
            writer.key("@odata.deltaLink")
            writer.string(deltaLink)
        }
        writer.endObject()
        return writer.bytes
    }

    /// Writes `{"value": …}` for a property or operation result.
    public func writeValue(_ value: Value, context: String? = nil) -> [UInt8] {
        var writer = JSONWriter()
        writer.objectStart()
        if format.metadata != .none, let context {
            writer.key("@odata.context")
            writer.string(context)
        }
        if format.metadata == .full, let type = annotationType(value) {
            writer.key("value@odata.type")
            writer.string("#" + type)
        }
        writer.key("value")
        writeValue(value, &writer)
        writer.endObject()
        return writer.bytes
    }

    private func writeCollectionItems(_ collection: EntityCollection, _ writer: inout JSONWriter) {
        writer.arrayStart()
        for entity in collection.entities { writeEntity(entity, &writer) }
        for reference in collection.references {
            writer.objectStart()
            writer.key("@odata.id")
            writer.string(reference)
            writer.endObject()
        }
        for deleted in collection.deleted {
            writer.objectStart()
            if let context = deleted.context, context.hasSuffix("$deletedEntity") {
                writer.key("@odata.context")
                writer.string(context)
                if let id = deleted.id {
                    writer.key("id")
                    writer.string(id)
                }
                if let reason = deleted.reason {
                    writer.key("reason")
                    writer.string(reason)
                }
            } else {
                if let context = deleted.context {
                    writer.key("@odata.context")
                    writer.string(context)
                }
                writer.key("@odata.removed")
                writer.objectStart()
                if let reason = deleted.reason {
                    writer.key("reason")
                    writer.string(reason)
                }
                writer.endObject()
                if let id = deleted.id {
                    writer.key("@odata.id")
                    writer.string(id)
                }
            }
            writeProperties(deleted.properties, [], &writer)
            writer.endObject()
        }
        for (links, suffix) in [(collection.addedLinks, "$link"), (collection.removedLinks, "$deletedLink")] {
            for link in links {
                writer.objectStart()
                writer.key("@odata.context")
                writer.string(link.context ?? "$metadata#" + suffix)
                writer.key("source")
                writer.string(link.source)
                writer.key("relationship")
                writer.string(link.relationship)
                writer.key("target")
                writer.string(link.target)
                writer.endObject()
            }
        }
        writer.endArray()
    }

    func writeEntity(_ entity: Entity, _ writer: inout JSONWriter) {
        writer.objectStart()
        if format.metadata != .none {
            let c = entity.control
            writer.member("@odata.context", c.context)
            writer.member("@odata.type", entity.typeName.map { "#" + $0 })
            writer.member("@odata.id", c.id)
            writer.member("@odata.etag", c.etag)
            writer.member("@odata.editLink", c.editLink)
            writer.member("@odata.readLink", c.readLink)
            writer.member("@odata.mediaReadLink", c.mediaReadLink)
            writer.member("@odata.mediaEditLink", c.mediaEditLink)
            writer.member("@odata.mediaEtag", c.mediaETag)
            writer.member("@odata.mediaContentType", c.mediaContentType)
        }
        if !entity.annotations.isEmpty {
            writeAnnotations(entity.annotations.filter { $0.property == nil }, &writer)
        }
        writeProperties(entity.properties, entity.annotations, &writer)
        for nav in entity.navigation {
            if format.metadata != .none {
                if let link = nav.navigationLink {
                    writer.key(nav.name + "@odata.navigationLink")
                    writer.string(link)
                }
                if let link = nav.associationLink {
                    writer.key(nav.name + "@odata.associationLink")
                    writer.string(link)
                }
            }
            if let bind = nav.bind {
                writer.key(nav.name + "@odata.bind")
                if bind.count == 1 && !nav.bindIsCollection {
                    writer.string(bind[0])
                } else {
                    writer.arrayStart()
                    for link in bind { writer.string(link) }
                    writer.endArray()
                }
            }
            if let count = nav.count {
                writer.key(nav.name + "@odata.count")
                writer.raw(String(count))
            }
            if let nextLink = nav.nextLink {
                writer.key(nav.name + "@odata.nextLink")
                writer.string(nextLink)
            }
            switch nav.inline {
            case .entity(let inner)?:
                writer.key(nav.name)
                if let inner { writeEntity(inner, &writer) } else { writer.null() }
            case .collection(let inner)?:
                writer.key(nav.name)
                writeCollectionItems(inner, &writer)
            case nil:
                break
            }
        }
        writer.endObject()
    }

    private func writeProperties(_ properties: [NamedValue], _ annotations: [InstanceAnnotation], _ writer: inout JSONWriter) {
        if annotations.isEmpty && format.metadata != .full {
            for property in properties {
                writer.key(property.name)
                writeValue(property.value, &writer)
            }
            return
        }
        for property in properties {
            if format.metadata == .full, let type = annotationType(property.value) {
                writer.key(property.name + "@odata.type")
                writer.string("#" + type)
            }
            writeAnnotations(annotations.filter { $0.property == property.name }, &writer)
            writer.key(property.name)
            writeValue(property.value, &writer)
        }
        // Annotations of properties that are not in the payload.
        let names = Set(properties.map(\.name))
        for annotation in annotations where annotation.property.map({ !names.contains($0) }) == true {
            writeAnnotations([annotation], &writer)
        }
    }

    private func writeAnnotations(_ annotations: [InstanceAnnotation], _ writer: inout JSONWriter) {
        for annotation in annotations {
            writer.key((annotation.property ?? "") + "@" + annotation.term)
            writer.value(annotation.value)
        }
    }

    /// The `@odata.type` a value needs so that it reads back as the same type without a model.
    func annotationType(_ value: Value) -> String? {
        switch value {
        case .primitive(let p):
            let written = jsonText(p)
            let readBack: PrimitiveType
            if written.first == 0x22 {
                readBack = .string
            } else if written == Array("true".utf8) || written == Array("false".utf8) {
                readBack = .boolean
            } else {
                readBack = V4JSONReader.untypedNumber(written, 0..<written.count).type
            }
            if case .spatial = p { return p.type.shortName }
            return readBack == p.type ? nil : p.type.shortName
        case .collection(let items):
            guard let first = items.first(where: { $0 != .null }), let element = annotationType(first) else { return nil }
            return "Collection(\(element))"
        default:
            return nil
        }
    }

    func writeValue(_ value: Value, _ writer: inout JSONWriter) {
        switch value {
        case .null: writer.null()
        case .primitive(let p):
            if case .spatial(let s) = p {
                writeGeoJSON(s, &writer)
            } else {
                writePrimitive(p, &writer)
            }
        case .enumeration(let e): writer.string(e.members.joined(separator: ","))
        case .collection(let items):
            writer.arrayStart()
            for item in items { writeValue(item, &writer) }
            writer.endArray()
        case .complex(let s), .entity(let s):
            writer.objectStart()
            if format.metadata != .none, let type = s.typeName {
                writer.key("@odata.type")
                writer.string("#" + type)
            }
            writeProperties(s.properties, [], &writer)
            writer.endObject()
        }
    }

    /// The JSON text of a primitive value.
    func jsonText(_ p: PrimitiveValue) -> [UInt8] {
        var writer = JSONWriter()
        writePrimitive(p, &writer)
        return writer.bytes
    }

    /// Writes a primitive value as its JSON number, boolean or string.
    func writePrimitive(_ p: PrimitiveValue, _ writer: inout JSONWriter) {
        switch p {
        case .boolean(let b): writer.bool(b)
        case .byte(let v): writer.integer(Int(v))
        case .sbyte(let v): writer.integer(Int(v))
        case .int16(let v): writer.integer(Int(v))
        case .int32(let v): writer.integer(Int(v))
        case .int64(let v): if format.ieee754Compatible { writer.string(String(v)) } else { writer.integer(Int(v)) }
        case .decimal(let d): if format.ieee754Compatible { writer.string(d.description) } else { writer.raw(d.description) }
        case .double(let v):
            if !v.isFinite { writer.string(Literal.payloadText(p)) } else { writer.raw(Self.floatingText(v.description)) }
        case .single(let v):
            if !v.isFinite { writer.string(Literal.payloadText(p)) } else { writer.raw(Self.floatingText(v.description)) }
        case .string(let s): writer.string(s)
        case .dateTimeOffset(let d), .dateTime(let d):
            // Digits and separators only, unless the fraction was built by hand.
            if d.time.fraction.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
                writer.plainString { d.append(to: &$0) }
            } else {
                writer.string(d.description)
            }
        default: writer.string(Literal.payloadText(p))
        }
    }

    /// Swift prints `1e+20`/`5.0`; JSON accepts both, but keep doubles recognisable as floating.
    static func floatingText(_ text: String) -> String { text }

    /// GeoJSON coordinates for a WKT body such as `LineString(1 2,3 4)`: nested arrays of
    /// positions.
    static func coordinates(fromWellKnownText wkt: String) -> JSONValue? {
        guard let open = wkt.firstIndex(of: "(") else { return nil }
        var stack: [[JSONValue]] = []
        var token = ""
        var result: JSONValue?
        func flushPosition() -> Bool {
            let numbers = token.split(separator: " ").map(String.init)
            token = ""
            if numbers.isEmpty { return true }
            guard numbers.allSatisfy({ Double($0) != nil }), !stack.isEmpty else { return false }
            stack[stack.count - 1].append(.array(numbers.map { .number($0) }))
            return true
        }
        for character in wkt[open...] {
            switch character {
            case "(":
                stack.append([])
            case ")":
                guard flushPosition(), let items = stack.popLast() else { return nil }
                if stack.isEmpty { result = .array(items) } else { stack[stack.count - 1].append(.array(items)) }
            case ",":
                guard flushPosition() else { return nil }
            default:
                token.append(character)
            }
        }
        // MultiPoint written as `(1 2,3 4)` has positions at the top level already; a Point's
        // single position is unwrapped by the caller (points use `point`).
        return result
    }

    private func writeGeoJSON(_ s: SpatialValue, _ writer: inout JSONWriter) {
        writer.objectStart()
        writer.key("type")
        writer.string(s.kind == "Collection" ? "GeometryCollection" : s.kind)
        if let point = s.point {
            writer.key("coordinates")
            writer.arrayStart()
            for n in [point.x, point.y] + [point.z, point.m].compactMap({ $0 }) {
                let text = String(n)
                writer.raw(text.hasSuffix(".0") ? String(text.dropLast(2)) : text)
            }
            writer.endArray()
        } else if s.kind != "Collection", let coordinates = Self.coordinates(fromWellKnownText: s.wellKnownText) {
            writer.key("coordinates")
            writer.value(coordinates)
        } else {
            // A geometry collection keeps its well-known text (read back by this reader).
            writer.key("wkt")
            writer.string(s.wellKnownText)
        }
        if let srid = s.srid {
            writer.key("crs")
            writer.value(.object([.init("type", .string("name")), .init("properties", .object([.init("name", .string("EPSG:\(srid)"))]))]))
        }
        writer.endObject()
    }
}
