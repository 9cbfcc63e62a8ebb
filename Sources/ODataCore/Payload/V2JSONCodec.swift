import Foundation

/// Reads V2 "verbose" JSON: the `d` and `d.results` wrappers, `__metadata`, `__deferred`,
/// `__next`, `__count`, `__delta`, deleted entries, `/Date(…)/` values, `PT…` times and
/// Int64/Decimal as strings. With a model, values come out typed.
public struct V2JSONReader: Sendable {
    public var model: Model?

    /// Creates a value from its parts.
    public init(model: Model? = nil) { self.model = model }

    private typealias Context = V4JSONReader.Context

    /// Reads a single entity (`{"d": {…}}` or a bare object, as in request bodies).
    public func readEntity(_ bytes: [UInt8], entityType: String? = nil) throws(PayloadError) -> Entity {
        var reader = JSONReader(bytes)
        var context = Context(model: model)
        var entity: Entity?
        try unwrap(&reader) { (r) throws(PayloadError) in
            guard r.peek() == UInt8(ascii: "{") else { throw r.error("An entity must be a JSON object", .unexpectedValue) }
            entity = try readEntity(&r, type: entityType, &context)
        }
        try reader.expectEnd()
        guard let entity else { throw reader.error("No entity in the payload", .missingValue, at: 0) }
        return entity
    }

    /// Reads a collection: `{"d": {"results": […], "__count": …, "__next": …}}` or `{"d": […]}`.
    public func readCollection(_ bytes: [UInt8], entityType: String? = nil) throws(PayloadError) -> EntityCollection {
        var reader = JSONReader(bytes)
        var context = Context(model: model)
        var collection: EntityCollection?
        try unwrap(&reader) { (r) throws(PayloadError) in
            collection = try readFeed(&r, type: entityType, &context)
        }
        try reader.expectEnd()
        guard let collection else { throw reader.error("No collection in the payload", .missingValue, at: 0) }
        return collection
    }

    /// Calls `body` on the content of `d` (or on the whole document when there is no `d`).
    private func unwrap(_ r: inout JSONReader, _ body: (inout JSONReader) throws(PayloadError) -> Void) throws(PayloadError) {
        let start = r.i
        var probe = r
        var hasD = false
        if probe.peek() == UInt8(ascii: "{") {
            probe.i += 1
            if probe.peek() == 0x22, (try? probe.readString()) == "d" { hasD = true }
        }
        guard hasD else {
            r.i = start
            try body(&r)
            return
        }
        var sawD = false
        try r.readObject { (r, name) throws(PayloadError) in
            guard name == "d", !sawD else { throw r.error("Unexpected member '\(name)' beside 'd'", .unexpectedValue) }
            sawD = true
            r.enter("d")
            defer { r.leave() }
            try body(&r)
        }
    }

    private func readFeed(_ r: inout JSONReader, type: String?, _ context: inout Context) throws(PayloadError) -> EntityCollection {
        var collection = EntityCollection()
        if r.peek() == UInt8(ascii: "[") {
            try readResults(&r, type: type, into: &collection, &context)
            return collection
        }
        guard r.peek() == UInt8(ascii: "{") else { throw r.error("A collection must be an array or an object with 'results'", .unexpectedValue) }
        var sawResults = false
        try r.readObject { (r, name) throws(PayloadError) in
            r.enter(name)
            defer { r.leave() }
            switch name {
            case "results":
                sawResults = true
                try readResults(&r, type: type, into: &collection, &context)
            case "__count":
                let text = r.peek() == 0x22 ? try r.readString() : String(decoding: r.bytes[try r.readNumberRange()], as: UTF8.self)
                guard let count = Int64(text) else { throw r.error("__count must be an integer", .wrongType) }
                collection.count = count
            case "__next": collection.nextLink = try readLink(&r)
            case "__delta": collection.deltaLink = try readLink(&r)
            default:
                collection.annotations.append(InstanceAnnotation(property: nil, term: name, value: try r.readValue()))
            }
        }
        guard sawResults else { throw r.error("A V2 collection needs 'results'", .missingValue) }
        return collection
    }

    /// `"url"`, or `{"uri": "url"}` as some V2 services (pyslet) write `__next`.
    private func readLink(_ r: inout JSONReader) throws(PayloadError) -> String {
        guard r.peek() == UInt8(ascii: "{") else { return try r.readString() }
        var uri: String?
        try r.readObject { (r, name) throws(PayloadError) in
            if name == "uri" { uri = try r.readString() } else { _ = try r.readValue() }
        }
        guard let uri else { throw r.error("A link object needs 'uri'", .missingValue) }
        return uri
    }

    private func readResults(_ r: inout JSONReader, type: String?, into collection: inout EntityCollection, _ context: inout Context) throws(PayloadError) {
        try r.readArray { (r, index) throws(PayloadError) in
            r.enter("[\(index)]")
            defer { r.leave() }
            guard r.peek() == UInt8(ascii: "{") else { throw r.error("A collection element must be an object", .unexpectedValue) }
            let entity = try readEntity(&r, type: type, &context)
            if let deleted = deletedEntry(entity) {
                collection.deleted.append(deleted)
            } else {
                collection.entities.append(entity)
            }
        }
    }

    /// Deleted entries: Olingo's `$deletedEntity` objects, or SAP's `__deleted: true`.
    private func deletedEntry(_ entity: Entity) -> DeletedEntity? {
        if let context = entity.control.context, context.hasSuffix("$deletedEntity") {
            var properties = entity.properties
            var id: String?
            if case .primitive(.string(let text))? = entity["id"] {
                id = text
                properties.removeAll { $0.name == "id" }
            }
            return DeletedEntity(id: id, reason: "deleted", properties: properties, context: context)
        }
        if entity.annotations.contains(where: { $0.term == "__deleted" && $0.value == .bool(true) }) {
            return DeletedEntity(id: entity.control.id ?? entity.control.editLink, reason: "deleted", properties: entity.properties)
        }
        return nil
    }

    private func readEntity(_ r: inout JSONReader, type declared: String?, _ context: inout Context) throws(PayloadError) -> Entity {
        var entity = Entity(typeName: declared)
        var members = declared.map { context.members(of: $0) } ?? V4JSONReader.Context.PropertyTable()
        var seen: Set<String> = []
        try r.readObject { (r, name) throws(PayloadError) in
            r.enter(name)
            defer { r.leave() }
            guard seen.insert(name).inserted else { throw r.error("'\(name)' appears twice", .unexpectedValue) }
            switch name {
            case "__metadata":
                try readMetadata(&r, &entity)
                if let type = entity.typeName, type != declared { members = context.members(of: type) }
                return
            case "@odata.context":
                entity.control.context = try r.readString()
                return
            case "__deleted":
                entity.annotations.append(InstanceAnnotation(property: nil, term: "__deleted", value: try r.readValue()))
                return
            default:
                break
            }
            switch members[name] {
            case .navigation(let target, let collection)?:
                entity.navigation.append(try readNavigation(&r, name, target: target, collection: collection, &context))
            case .property(let kind)?:
                entity.properties.append(NamedValue(name: name, value: try readValue(&r, kind, &context)))
            case nil:
                if let navigation = try readUnknownNavigation(&r, name, &context) {
                    entity.navigation.append(navigation)
                } else {
                    entity.properties.append(NamedValue(name: name, value: try readValue(&r, nil, &context)))
                }
            }
        }
        return entity
    }

    private func readMetadata(_ r: inout JSONReader, _ entity: inout Entity) throws(PayloadError) {
        try r.readObject { (r, name) throws(PayloadError) in
            let value = r.peek() == 0x22 ? try r.readString() : (try r.readValue()).serialized
            switch name {
            case "id": entity.control.id = value
            case "uri": entity.control.editLink = value
            case "type": entity.typeName = value
            case "etag": entity.control.etag = value
            case "content_type": entity.control.mediaContentType = value
            case "media_src": entity.control.mediaReadLink = value
            case "edit_media": entity.control.mediaEditLink = value
            case "media_etag": entity.control.mediaETag = value
            default: entity.annotations.append(InstanceAnnotation(property: nil, term: "__metadata." + name, value: .string(value)))
            }
        }
    }

    /// Without a model: `__deferred`, `results`, or a `__metadata` with a `uri` mark navigation.
    private func readUnknownNavigation(_ r: inout JSONReader, _ name: String, _ context: inout Context) throws(PayloadError) -> NavigationValue? {
        guard r.peek() == UInt8(ascii: "{") || r.peek() == UInt8(ascii: "[") else { return nil }
        let save = r
        let value = try r.readValue()
        r = save
        func isEntity(_ item: JSONValue) -> Bool {
            item["__metadata"]?["uri"] != nil || item["__metadata"]?["id"] != nil
        }
        let isNavigation: Bool
        let isCollection: Bool
        switch value {
        case .array(let items):
            // A V1 inline feed: entities with their own URIs.
            isNavigation = !items.isEmpty && items.allSatisfy(isEntity)
            isCollection = true
        default:
            // A feed (`results` of entities, or empty), a deferred link, or an entity with a URI.
            let results = value["results"]?.arrayValue
            isCollection = results != nil
            isNavigation = value["__deferred"] != nil || isEntity(value) || (results.map { $0.allSatisfy(isEntity) } ?? false)
        }
        guard isNavigation else { return nil }
        return try readNavigation(&r, name, target: nil, collection: isCollection, &context)
    }

    private func readNavigation(_ r: inout JSONReader, _ name: String, target: String?, collection: Bool,
                                _ context: inout Context) throws(PayloadError) -> NavigationValue {
        var nav = NavigationValue(name: name)
        guard let c = r.peek() else { throw r.error("Unexpected end of JSON") }
        if c == UInt8(ascii: "n") {
            _ = try r.readKeyword()
            nav.inline = .entity(nil)
            return nav
        }
        if c == UInt8(ascii: "[") {
            // V1 inline collection, or a list of links in a request body.
            var inner = EntityCollection()
            var links: [String] = []
            try r.readArray { (r, index) throws(PayloadError) in
                r.enter("[\(index)]")
                defer { r.leave() }
                let entity = try readEntity(&r, type: target, &context)
                if entity.properties.isEmpty, entity.navigation.isEmpty, let uri = entity.control.editLink, entity.typeName == target {
                    links.append(uri)
                } else {
                    inner.entities.append(entity)
                }
            }
            if !links.isEmpty && inner.entities.isEmpty {
                nav.bind = links
                nav.bindIsCollection = true
            } else {
                nav.inline = .collection(inner)
            }
            return nav
        }
        // An object: deferred, a feed with results, a link, or an inline entity.
        let start = r
        let value = try r.readValue()
        if let deferred = value["__deferred"] {
            nav.navigationLink = deferred["uri"]?.stringValue
            return nav
        }
        r = start
        if value["results"] != nil {
            nav.inline = .collection(try readFeed(&r, type: target, &context))
            return nav
        }
        let entity = try readEntity(&r, type: target, &context)
        if entity.properties.isEmpty, entity.navigation.isEmpty, let uri = entity.control.editLink, value.objectMembers?.count == 1,
           value["__metadata"]?.objectMembers?.count == 1 {
            nav.bind = [uri]
            nav.bindIsCollection = collection
        } else {
            nav.inline = .entity(entity)
        }
        return nav
    }

    private func readValue(_ r: inout JSONReader, _ kind: V4JSONReader.Kind?, _ context: inout Context) throws(PayloadError) -> Value {
        guard let c = r.peek() else { throw r.error("Unexpected end of JSON, expected a value") }
        if c == UInt8(ascii: "n") {
            _ = try r.readKeyword()
            return .null
        }
        switch kind {
        case .primitive(let p, let collection)?:
            if collection { return try readCollection(&r) { (r) throws(PayloadError) in try readPrimitive(&r, p) } }
            return try readPrimitive(&r, p)
        case .complex(let name, let collection)?:
            if collection { return try readCollection(&r) { (r) throws(PayloadError) in try readComplex(&r, name, &context) } }
            return try readComplex(&r, name, &context)
        case .enumeration(let name, _)?:
            return .enumeration(EnumValue(typeName: name, members: [try r.readString()]))
        default:
            switch c {
            case UInt8(ascii: "{"):
                if kind == nil { return try readComplex(&r, nil, &context) }
                return try readComplex(&r, nil, &context)
            case UInt8(ascii: "["):
                return try readCollection(&r) { (r) throws(PayloadError) in try readValue(&r, nil, &context) }
            case 0x22:
                return .primitive(.string(try r.readString()))
            case UInt8(ascii: "t"), UInt8(ascii: "f"):
                if case .bool(let b) = try r.readKeyword() { return .primitive(.boolean(b)) }
                return .null
            default:
                let range = try r.readNumberRange()
                return .primitive(V4JSONReader.untypedNumber(r.bytes, range))
            }
        }
    }

    /// V2 collections of complex or primitive values: an array or `{"results": […]}`.
    private func readCollection(_ r: inout JSONReader, _ element: (inout JSONReader) throws(PayloadError) -> Value) throws(PayloadError) -> Value {
        var items: [Value] = []
        func readArray(_ r: inout JSONReader) throws(PayloadError) {
            try r.readArray { (r, index) throws(PayloadError) in
                r.enter("[\(index)]")
                defer { r.leave() }
                if r.peek() == UInt8(ascii: "n") {
                    _ = try r.readKeyword()
                    items.append(.null)
                } else {
                    items.append(try element(&r))
                }
            }
        }
        if r.peek() == UInt8(ascii: "{") {
            try r.readObject { (r, name) throws(PayloadError) in
                if name == "results" { try readArray(&r) } else { try r.skipValue() }
            }
        } else {
            try readArray(&r)
        }
        return .collection(items)
    }

    private func readComplex(_ r: inout JSONReader, _ name: String?, _ context: inout Context) throws(PayloadError) -> Value {
        guard r.peek() == UInt8(ascii: "{") else { throw r.error("Expected a JSON object", .wrongType) }
        let entity = try readEntity(&r, type: name, &context)
        return .complex(StructuredValue(typeName: entity.typeName, properties: entity.properties))
    }

    private func readPrimitive(_ r: inout JSONReader, _ type: PrimitiveType) throws(PayloadError) -> Value {
        guard let c = r.peek() else { throw r.error("Unexpected end of JSON") }
        let start = r.i
        if c == 0x22 {
            let text = try r.readString()
            if type == .string { return .primitive(.string(text)) }
            guard let value = Self.parseV2(text, as: type) else {
                throw PayloadError(.wrongType, "'\(text)' is not a valid V2 \(type.rawValue)", offset: start, path: r.pathString)
            }
            return .primitive(value)
        }
        if c == UInt8(ascii: "t") || c == UInt8(ascii: "f") {
            guard case .bool(let b) = try r.readKeyword(), type == .boolean else {
                throw PayloadError(.wrongType, "Expected \(type.rawValue), found a Boolean", offset: start, path: r.pathString)
            }
            return .primitive(.boolean(b))
        }
        let range = try r.readNumberRange()
        guard let value = V4JSONReader.number(r.bytes, range, as: type) else {
            throw PayloadError(.wrongType, "'\(String(decoding: r.bytes[range], as: UTF8.self))' is not a valid \(type.rawValue)", offset: start, path: r.pathString)
        }
        return .primitive(value)
    }

    /// Parses the V2 JSON string form of a value.
    static func parseV2(_ text: String, as type: PrimitiveType) -> PrimitiveValue? {
        switch type {
        case .dateTime, .dateTimeOffset:
            if let value = parseDate(text, as: type) { return value }
            return try? Literal.parsePayloadValue(text, as: type)
        case .date:
            // A V4 Date property read from V2 JSON arrives as a DateTime.
            if case .dateTime(let d)? = parseDate(text, as: .dateTime) { return .date(d.date) }
            if case .dateTimeOffset(let d)? = parseDate(text, as: .dateTimeOffset) { return .date(d.date) }
            return try? Literal.parsePayloadValue(text, as: type)
        case .timeOfDay:
            if case .duration(let d)? = try? Literal.parsePayloadValue(text, as: .duration), !d.negative, d.days == 0 {
                return .timeOfDay(TimeOfDayValue(hour: d.hours, minute: d.minutes, second: d.seconds, fraction: d.fraction))
            }
            return try? Literal.parsePayloadValue(text, as: type)
        case .binary:
            // V2 uses standard base64.
            return Literal.decodeBase64URL(text).map { .binary(Data($0)) }
        default:
            return try? Literal.parsePayloadValue(text, as: type)
        }
    }

    /// `/Date(1234567890000)/` or `/Date(1234567890000+0060)/`: UTC milliseconds, and the offset
    /// in minutes the value is shown in (nil when the text is not such a date).
    package static func parseDate(_ text: String, as type: PrimitiveType) -> PrimitiveValue? {
        guard text.hasPrefix("/Date(") && text.hasSuffix(")/") else { return nil }
        let inner = text.dropFirst(6).dropLast(2)
        var millisText = inner
        var offset: Int?
        if let signIndex = inner.dropFirst().firstIndex(where: { $0 == "+" || $0 == "-" }) {
            millisText = inner[..<signIndex]
            guard let minutes = Int(inner[signIndex...]) else { return nil }
            offset = minutes
        }
        guard let millis = Int64(millisText) else { return nil }
        // The number is UTC milliseconds; the offset says how to show the local time.
        let localMillis = millis + Int64(offset ?? 0) * 60_000
        let days = Int((localMillis >= 0 ? localMillis : localMillis - 86_399_999) / 86_400_000)
        let msOfDay = localMillis - Int64(days) * 86_400_000
        let seconds = Int(msOfDay / 1000)
        let ms = Int(msOfDay % 1000)
        let time = TimeOfDayValue(hour: seconds / 3600, minute: seconds / 60 % 60, second: seconds % 60,
                                  fraction: ms == 0 ? "" : String(pad(ms, 3).reversed().drop { $0 == "0" }.reversed()))
        let date = DateValue(daysSinceEpoch: days)
        if type == .dateTimeOffset || offset != nil {
            return .dateTimeOffset(DateTimeOffsetValue(date: date, time: time, offsetMinutes: offset ?? 0, usesZ: offset == nil))
        }
        return .dateTime(DateTimeOffsetValue(date: date, time: time, offsetMinutes: nil))
    }
}

/// Writes V2 verbose JSON: `{"d": …}` with `__metadata`, `results`, `__count`, `__next`,
/// `__delta`; Int64 and Decimal as strings, dates as `/Date(…)/`, times as `PT…`.
public struct V2JSONWriter: Sendable {
    /// Creates a value from its parts.
    public init() {}

    public func write(_ entity: Entity) -> [UInt8] {
        var writer = JSONWriter()
        writer.objectStart()
        writer.key("d")
        writeEntity(entity, &writer)
        writer.endObject()
        return writer.bytes
    }

    public func write(_ collection: EntityCollection) -> [UInt8] {
        var writer = JSONWriter()
        writer.objectStart()
        writer.key("d")
        writeFeed(collection, &writer)
        writer.endObject()
        return writer.bytes
    }

    /// A request body for POST, PUT or MERGE: the entity without the `d` wrapper.
    public func writeRequestBody(_ entity: Entity) -> [UInt8] {
        var writer = JSONWriter()
        writeEntity(entity, &writer)
        return writer.bytes
    }

    private func writeFeed(_ collection: EntityCollection, _ writer: inout JSONWriter) {
        writer.objectStart()
        if let count = collection.count {
            writer.key("__count")
            writer.string(String(count))
        }
        writer.key("results")
        writer.arrayStart()
        for entity in collection.entities { writeEntity(entity, &writer) }
        for deleted in collection.deleted {
            writer.objectStart()
            if let context = deleted.context {
                writer.key("@odata.context")
                writer.string(context)
                if let id = deleted.id {
                    writer.key("id")
                    writer.string(id)
                }
            } else {
                writer.key("__metadata")
                writer.objectStart()
                if let id = deleted.id {
                    writer.key("uri")
                    writer.string(id)
                }
                writer.endObject()
                writer.key("__deleted")
                writer.bool(true)
            }
            writeProperties(deleted.properties, &writer)
            writer.endObject()
        }
        writer.endArray()
        for annotation in collection.annotations where annotation.property == nil {
            writer.key(annotation.term)
            writer.value(annotation.value)
        }
        if let next = collection.nextLink {
            writer.key("__next")
            writer.string(next)
        }
        if let delta = collection.deltaLink {
            writer.key("__delta")
            writer.string(delta)
        }
        writer.endObject()
    }

    private func writeEntity(_ entity: Entity, _ writer: inout JSONWriter) {
        writer.objectStart()
        let c = entity.control
        let pairs: [(String, String?)] = [
            ("id", c.id), ("uri", c.editLink), ("type", entity.typeName), ("etag", c.etag), ("content_type", c.mediaContentType),
            ("media_src", c.mediaReadLink), ("edit_media", c.mediaEditLink), ("media_etag", c.mediaETag),
        ]
        let extra = entity.annotations.filter { $0.term.hasPrefix("__metadata.") }
        if pairs.contains(where: { $0.1 != nil }) || !extra.isEmpty {
            writer.key("__metadata")
            writer.objectStart()
            for (name, value) in pairs {
                guard let value else { continue }
                writer.key(name)
                writer.string(value)
            }
            for annotation in extra {
                writer.key(String(annotation.term.dropFirst("__metadata.".count)))
                writer.value(annotation.value)
            }
            writer.endObject()
        }
        if let context = c.context {
            writer.key("@odata.context")
            writer.string(context)
        }
        for annotation in entity.annotations where !annotation.term.hasPrefix("__metadata.") && annotation.property == nil {
            writer.key(annotation.term)
            writer.value(annotation.value)
        }
        writeProperties(entity.properties, &writer)
        for nav in entity.navigation {
            writer.key(nav.name)
            if let inline = nav.inline {
                switch inline {
                case .entity(let inner):
                    if let inner { writeEntity(inner, &writer) } else { writer.null() }
                case .collection(let inner):
                    writeFeed(inner, &writer)
                }
            } else if let bind = nav.bind {
                func link(_ uri: String) {
                    writer.objectStart()
                    writer.key("__metadata")
                    writer.objectStart()
                    writer.key("uri")
                    writer.string(uri)
                    writer.endObject()
                    writer.endObject()
                }
                if nav.bindIsCollection || bind.count != 1 {
                    writer.arrayStart()
                    for uri in bind { link(uri) }
                    writer.endArray()
                } else {
                    link(bind[0])
                }
            } else {
                writer.objectStart()
                writer.key("__deferred")
                writer.objectStart()
                writer.key("uri")
                writer.string(nav.navigationLink ?? "")
                writer.endObject()
                writer.endObject()
            }
        }
        writer.endObject()
    }

    private func writeProperties(_ properties: [NamedValue], _ writer: inout JSONWriter) {
        for property in properties {
            writer.key(property.name)
            writeValue(property.value, &writer)
        }
    }

    private func writeValue(_ value: Value, _ writer: inout JSONWriter) {
        switch value {
        case .null: writer.null()
        case .enumeration(let e): writer.string(e.members.joined(separator: ","))
        case .collection(let items):
            // Collection values as plain arrays; `{"results": …}` is kept for feeds.
            writer.arrayStart()
            for item in items { writeValue(item, &writer) }
            writer.endArray()
        case .complex(let s), .entity(let s):
            writer.objectStart()
            if let type = s.typeName {
                writer.key("__metadata")
                writer.objectStart()
                writer.key("type")
                writer.string(type)
                writer.endObject()
            }
            writeProperties(s.properties, &writer)
            writer.endObject()
        case .primitive(let p):
            switch p {
            case .boolean(let b): writer.bool(b)
            case .byte(let v): writer.raw(String(v))
            case .sbyte(let v): writer.raw(String(v))
            case .int16(let v): writer.raw(String(v))
            case .int32(let v): writer.raw(String(v))
            case .double(let v) where v.isFinite: writer.raw(String(v))
            case .single(let v) where v.isFinite: writer.raw(String(v))
            case .dateTime(let d): writer.string(Self.dateText(d, offset: false))
            case .dateTimeOffset(let d): writer.string(Self.dateText(d, offset: true))
            case .date(let d):
                // V2 has no Edm.Date: a date is a DateTime at midnight UTC.
                writer.string("/Date(\(Int64(d.daysSinceEpoch) * 86_400_000))/")
            case .timeOfDay(let t):
                // V2 has no Edm.TimeOfDay: a time of day is an Edm.Time duration.
                writer.string(DurationValue(hours: t.hour, minutes: t.minute, seconds: t.second, fraction: t.fraction).description)
            case .binary(let data): writer.string(Data(data).base64EncodedString())
            default: writer.string(Literal.payloadText(p))
            }
        }
    }

    /// `/Date(ms)/` for an Edm.DateTime; `/Date(ms+0000)/` for an Edm.DateTimeOffset, as SAP
    /// Gateway writes it. `ms` is always UTC milliseconds and the offset always `+0000`: readers
    /// disagree on what a non-zero offset means (UTC milliseconds with the offset to show, or
    /// local milliseconds in that offset), and on `+0000` they all agree.
    static func dateText(_ value: DateTimeOffsetValue, offset: Bool) -> String {
        let (seconds, picos) = value.instant
        let millis = seconds * 1000 + picos / 1_000_000_000
        if offset {
            return "/Date(\(millis)+0000)/"
        }
        return "/Date(\(millis))/"
    }
}
