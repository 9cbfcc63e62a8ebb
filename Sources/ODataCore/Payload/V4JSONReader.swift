import Foundation

/// Reads V4 JSON payloads (`application/json;odata.metadata=…`) into typed entities.
///
/// With a model, property values come out as their declared Edm types and navigation
/// properties are told apart from complex ones. Without a model, values are typed from
/// `@odata.type` annotations where present and otherwise from their JSON shape (integers as
/// Int32/Int64, other numbers as exact decimals or doubles).
public struct V4JSONReader: Sendable {
    public var model: Model?

    /// Creates a value from its parts.
    public init(model: Model? = nil) { self.model = model }

    /// Reads a single entity (a response to `Set(key)`, or a request body).
    public func readEntity(_ bytes: [UInt8], entityType: String? = nil) throws(PayloadError) -> Entity {
        try withPathOnFailure { (trackPath) throws(PayloadError) in try readEntity(bytes, entityType: entityType, trackPath: trackPath) }
    }

    /// Runs `body` fast, without maintaining the JSON path; if it fails, runs it again with
    /// the path so the error says where.
    func withPathOnFailure<T>(_ body: (Bool) throws(PayloadError) -> T) throws(PayloadError) -> T {
        do {
            return try body(false)
        } catch {
            do {
                _ = try body(true)
            } catch let tracked {
                throw tracked
            }
            throw error
        }
    }

    private func readEntity(_ bytes: [UInt8], entityType: String?, trackPath: Bool) throws(PayloadError) -> Entity {
        var reader = JSONReader(bytes)
        reader.trackPath = trackPath
        var context = Context(model: model)
        guard reader.peek() == UInt8(ascii: "{") else { throw reader.error("An entity must be a JSON object", .unexpectedValue) }
        let entity = try readEntity(&reader, type: entityType, &context)
        try reader.expectEnd()
        return entity
    }

    /// Reads a collection of entities (with count, next link, delta link and delta entries).
    public func readCollection(_ bytes: [UInt8], entityType: String? = nil) throws(PayloadError) -> EntityCollection {
        try withPathOnFailure { (trackPath) throws(PayloadError) in try readCollection(bytes, entityType: entityType, trackPath: trackPath) }
    }

    private func readCollection(_ bytes: [UInt8], entityType: String?, trackPath: Bool) throws(PayloadError) -> EntityCollection {
        var reader = JSONReader(bytes)
        reader.trackPath = trackPath
        var context = Context(model: model)
        guard reader.peek() == UInt8(ascii: "{") else { throw reader.error("A collection response must be a JSON object", .unexpectedValue) }
        var collection = EntityCollection()
        var sawValue = false
        try reader.readObject { (r, name) throws(PayloadError) in
            if name == "value" {
                sawValue = true
                r.enter("value")
                defer { r.leave() }
                try r.readArray { (r, index) throws(PayloadError) in
                    r.enter("[\(index)]")
                    defer { r.leave() }
                    try readCollectionItem(&r, type: entityType, into: &collection, &context)
                }
                return
            }
            try readCollectionAnnotation(&r, name, into: &collection)
        }
        try reader.expectEnd()
        guard sawValue else { throw reader.error("A collection response needs a 'value' array", .missingValue, at: 0) }
        return collection
    }

    /// Reads a property or operation result: `{"value": …}` (or a bare complex object) as a
    /// value of the given type.
    public func readValue(_ bytes: [UInt8], type: TypeReference?) throws(PayloadError) -> Value {
        var reader = JSONReader(bytes)
        var context = Context(model: model)
        var result: Value?
        var complex: [JSONValue.Member] = []
        var wholeObject = false
        let kind = type.map { context.kind(of: $0) }
        if case .complex? = kind { wholeObject = true }
        if wholeObject && type?.isCollection == false {
            let value = try readTyped(&reader, kind, &context)
            try reader.expectEnd()
            return value
        }
        try reader.readObject { (r, name) throws(PayloadError) in
            if name == "value" {
                r.enter("value")
                defer { r.leave() }
                result = try readTyped(&r, kind, &context)
            } else {
                complex.append(JSONValue.Member(name, try r.readValue()))
            }
        }
        try reader.expectEnd()
        guard let result else { throw reader.error("The payload has no 'value'", .missingValue, at: 0) }
        return result
    }

    // MARK: Context

    /// What the model says about a type, cached per read.
    enum Kind: Sendable {
        case primitive(PrimitiveType, collection: Bool)
        case enumeration(String, collection: Bool)
        case complex(String, collection: Bool)
        case entity(String, collection: Bool)
        case untyped(collection: Bool)
    }

    struct Context {
        let model: Model?
        var typeCache: [String: PropertyTable] = [:]

        /// A member of a structured type.
        enum Member {
            case property(Kind)
            case navigation(String, collection: Bool)
        }

        /// The members of one structured type, found by name bytes without allocating.
        struct PropertyTable {
            struct Entry {
                let name: String
                let bytes: [UInt8]
                let member: Member
            }
            var entries: [Entry] = []

            subscript(name: String) -> Member? { entries.first { $0.name == name }?.member }

            @inline(__always) func index(of range: Range<Int>, in source: [UInt8]) -> Int? {
                let length = range.count
                for (index, entry) in entries.enumerated() where entry.bytes.count == length {
                    var equal = true
                    var k = 0
                    while k < length {
                        if entry.bytes[k] != source[range.lowerBound + k] {
                            equal = false
                            break
                        }
                        k += 1
                    }
                    if equal { return index }
                }
                return nil
            }
        }

        func kind(of reference: TypeReference) -> Kind {
            kind(of: reference.name, collection: reference.isCollection)
        }

        func kind(of name: String, collection: Bool) -> Kind {
            if let p = PrimitiveType(qualifiedName: name) { return .primitive(p, collection: collection) }
            guard let model else { return .untyped(collection: collection) }
            if let definition = model.typeDefinition(name), let p = PrimitiveType(qualifiedName: definition.underlyingType) {
                return .primitive(p, collection: collection)
            }
            if model.enumType(name) != nil { return .enumeration(name, collection: collection) }
            if model.complexType(name) != nil { return .complex(name, collection: collection) }
            if model.entityType(name) != nil { return .entity(name, collection: collection) }
            return .untyped(collection: collection)
        }

        mutating func members(of type: String) -> PropertyTable {
            if let cached = typeCache[type] { return cached }
            var table = PropertyTable()
            if let model {
                for property in model.allProperties(ofStructuredType: type) {
                    table.entries.append(.init(name: property.name, bytes: Array(property.name.utf8), member: .property(kind(of: property.type))))
                }
                for nav in model.allNavigationProperties(ofStructuredType: type) {
                    table.entries.append(.init(name: nav.name, bytes: Array(nav.name.utf8), member: .navigation(nav.type.name, collection: nav.type.isCollection)))
                }
            }
            typeCache[type] = table
            return table
        }
    }

    // MARK: Entities

    /// Normalizes a control or annotation name: `@odata.id` and 4.01's `@id` both become `id`.
    static func controlName(_ name: String) -> String? {
        if name.hasPrefix("@odata.") { return String(name.dropFirst(7)) }
        if name.hasPrefix("odata.") { return String(name.dropFirst(6)) }
        if name.hasPrefix("@"), !name.dropFirst().contains(".") { return String(name.dropFirst()) }
        return nil
    }

    /// Normalizes an `@odata.type` value: `#Edm.Int32`/`#Int32` → `Edm.Int32`, `#Ns.T` → `Ns.T`.
    static func typeName(_ raw: String) -> TypeReference? {
        var text = raw.hasPrefix("#") ? String(raw.dropFirst()) : raw
        var collection = false
        if text.hasPrefix("Collection(") && text.hasSuffix(")") {
            collection = true
            text = String(text.dropFirst(11).dropLast())
        }
        if !text.contains("."), PrimitiveType(rawValue: "Edm." + text) != nil { text = "Edm." + text }
        guard !text.isEmpty else { return nil }
        return TypeReference(name: text, isCollection: collection)
    }

    func readEntity(_ r: inout JSONReader, type declared: String?, _ context: inout Context) throws(PayloadError) -> Entity {
        var entity = Entity(typeName: declared)
        var pendingTypes: [String: TypeReference] = [:]
        var members = declared.map { context.members(of: $0) } ?? Context.PropertyTable()
        entity.properties.reserveCapacity(members.entries.count)
        var seenMask: UInt64 = 0
        var seenNames: Set<String> = []
        try r.readObjectKeys { (r, key) throws(PayloadError) in
            // Fast path: a declared property or navigation property, matched by its bytes.
            if key.decoded == nil, let index = members.index(of: key.range, in: r.bytes) {
                let entry = members.entries[index]
                if index < 64 {
                    guard seenMask & (1 << UInt64(index)) == 0 else { throw r.error("'\(entry.name)' appears twice", .unexpectedValue) }
                    seenMask |= 1 << UInt64(index)
                } else {
                    guard seenNames.insert(entry.name).inserted else { throw r.error("'\(entry.name)' appears twice", .unexpectedValue) }
                }
                r.enter(entry.name)
                defer { r.leave() }
                try readMember(&r, entry.name, entry.member, &entity, pendingTypes, &context)
                return
            }
            let name = key.string(r.bytes)
            r.enter(name)
            defer { r.leave() }
            guard seenNames.insert(name).inserted else { throw r.error("'\(name)' appears twice", .unexpectedValue) }
            if name.hasPrefix("@") || name.hasPrefix("odata.") {
                try readEntityControl(&r, name, &entity, &members, &context)
                return
            }
            if let at = name.firstIndex(of: "@") {
                let property = String(name[..<at])
                let term = String(name[name.index(after: at)...])
                try readPropertyAnnotation(&r, property: property, term: term, &entity, &pendingTypes)
                return
            }
            if let member = members[name] {
                try readMember(&r, name, member, &entity, pendingTypes, &context)
            } else {
                let kind = pendingTypes[name].map { context.kind(of: $0) }
                let value = try readTyped(&r, kind, &context)
                entity.properties.append(NamedValue(name: name, value: value))
            }
        }
        // Types announced after their property: convert now.
        for (name, type) in pendingTypes {
            guard let index = entity.properties.firstIndex(where: { $0.name == name }) else { continue }
            entity.properties[index].value = retype(entity.properties[index].value, context.kind(of: type))
        }
        return entity
    }

    @inline(__always)
    private func readMember(_ r: inout JSONReader, _ name: String, _ member: Context.Member, _ entity: inout Entity,
                            _ pendingTypes: [String: TypeReference], _ context: inout Context) throws(PayloadError) {
        switch member {
        case .navigation(let target, let collection):
            var nav = entity.navigation(name) ?? NavigationValue(name: name)
            if r.peek() == UInt8(ascii: "n") {
                _ = try r.readKeyword()
                nav.inline = .entity(nil)
            } else if collection {
                nav.inline = .collection(try readInlineCollection(&r, type: target, &context))
            } else {
                nav.inline = .entity(try readEntity(&r, type: target, &context))
            }
            setNavigation(nav, in: &entity)
        case .property(let kind):
            let value = try readTyped(&r, pendingTypes.isEmpty ? kind : pendingTypes[name].map { context.kind(of: $0) } ?? kind, &context)
            entity.properties.append(NamedValue(name: name, value: value))
        }
    }

    private func setNavigation(_ nav: NavigationValue, in entity: inout Entity) {
        if let index = entity.navigation.firstIndex(where: { $0.name == nav.name }) {
            entity.navigation[index] = nav
        } else {
            entity.navigation.append(nav)
        }
    }

    private func readEntityControl(_ r: inout JSONReader, _ name: String, _ entity: inout Entity,
                                   _ members: inout Context.PropertyTable, _ context: inout Context) throws(PayloadError) {
        guard let control = Self.controlName(name) else {
            entity.annotations.append(InstanceAnnotation(property: nil, term: String(name.dropFirst()), value: try r.readValue()))
            return
        }
        func string() throws(PayloadError) -> String {
            guard r.peek() == 0x22 else { throw r.error("@odata.\(control) must be a string", .wrongType) }
            return try r.readString()
        }
        switch control {
        case "context": entity.control.context = try string()
        case "id": entity.control.id = try string()
        case "etag": entity.control.etag = try string()
        case "editLink": entity.control.editLink = try string()
        case "readLink": entity.control.readLink = try string()
        case "mediaReadLink": entity.control.mediaReadLink = try string()
        case "mediaEditLink": entity.control.mediaEditLink = try string()
        case "mediaEtag", "mediaETag": entity.control.mediaETag = try string()
        case "mediaContentType": entity.control.mediaContentType = try string()
        case "type":
            guard let type = Self.typeName(try string()) else { throw r.error("Empty @odata.type", .wrongType) }
            entity.typeName = type.name
            members = context.members(of: type.name)
        default:
            entity.annotations.append(InstanceAnnotation(property: nil, term: "odata." + control, value: try r.readValue()))
        }
    }

    private func readPropertyAnnotation(_ r: inout JSONReader, property: String, term: String, _ entity: inout Entity,
                                        _ pendingTypes: inout [String: TypeReference]) throws(PayloadError) {
        let control = term.hasPrefix("odata.") ? String(term.dropFirst(6)) : (term.contains(".") ? nil : term)
        func string() throws(PayloadError) -> String {
            guard r.peek() == 0x22 else { throw r.error("\(property)@\(term) must be a string", .wrongType) }
            return try r.readString()
        }
        switch control {
        case "type"?:
            guard let type = Self.typeName(try string()) else { throw r.error("Empty type annotation", .wrongType) }
            pendingTypes[property] = type
        case "navigationLink"?, "navigationLinkUrl"?:
            var nav = entity.navigation(property) ?? NavigationValue(name: property)
            nav.navigationLink = try string()
            setNavigation(nav, in: &entity)
        case "associationLink"?, "associationLinkUrl"?:
            var nav = entity.navigation(property) ?? NavigationValue(name: property)
            nav.associationLink = try string()
            setNavigation(nav, in: &entity)
        case "bind"?:
            var nav = entity.navigation(property) ?? NavigationValue(name: property)
            if r.peek() == UInt8(ascii: "[") {
                var links: [String] = []
                try r.readArray { (r, _) throws(PayloadError) in links.append(try r.readString()) }
                nav.bind = links
                nav.bindIsCollection = true
            } else {
                nav.bind = [try string()]
            }
            setNavigation(nav, in: &entity)
        case "count"?:
            var nav = entity.navigation(property) ?? NavigationValue(name: property)
            let range = try r.readNumberRange()
            nav.count = Int64(String(decoding: r.bytes[range], as: UTF8.self))
            setNavigation(nav, in: &entity)
        case "nextLink"?:
            var nav = entity.navigation(property) ?? NavigationValue(name: property)
            nav.nextLink = try string()
            setNavigation(nav, in: &entity)
        default:
            entity.annotations.append(InstanceAnnotation(property: property, term: term, value: try r.readValue()))
        }
    }

    func readInlineCollection(_ r: inout JSONReader, type: String?, _ context: inout Context) throws(PayloadError) -> EntityCollection {
        var collection = EntityCollection()
        try r.readArray { (r, index) throws(PayloadError) in
            r.enter("[\(index)]")
            defer { r.leave() }
            try readCollectionItem(&r, type: type, into: &collection, &context, nested: true)
        }
        return collection
    }

    /// An entry nested in a navigation property that names its own context must be of that
    /// property's set: a deleted entity of `Customers` inside `Orders` is refused, not read as
    /// a deleted order.
    private func checkNestedContext(_ context: String?, type: String?, _ r: JSONReader) throws(PayloadError) {
        guard let context, let type, let model, let hash = context.lastIndex(of: "#") else { return }
        let fragment = context[context.index(after: hash)...]
        let setName = String(fragment.prefix { $0 != "/" && $0 != "(" })
        guard let set = model.entitySet(setName) else { return }
        guard model.isType(set.entityType, derivedFrom: type) || model.isType(type, derivedFrom: set.entityType) else {
            throw r.error(
                "The nested entry's context \(context) names the entity set \(setName) (\(set.entityType)), "
                    + "not one of the navigation property's type \(type)", .unexpectedValue)
        }
    }

    /// One element of `value`: an entity, a reference, a deleted entity or a link change.
    func readCollectionItem(_ r: inout JSONReader, type: String?, into collection: inout EntityCollection, _ context: inout Context,
                            nested: Bool = false) throws(PayloadError) {
        guard r.peek() == UInt8(ascii: "{") else { throw r.error("A collection element must be an object", .unexpectedValue) }
        let entity = try readEntity(&r, type: type, &context)
        if nested { try checkNestedContext(entity.control.context, type: type, r) }
        let entityContext = entity.control.context ?? ""
        if entityContext.hasSuffix("$deletedEntity") || entity.annotations.contains(where: { $0.term == "odata.removed" || $0.term == "removed" }) {
            collection.deleted.append(deletedEntity(from: entity))
        } else if entityContext.hasSuffix("/$link") || entityContext.hasSuffix("/$deletedLink") {
            func text(_ name: String) -> String {
                if case .primitive(.string(let s))? = entity[name] { return s }
                return ""
            }
            let change = DeltaLinkChange(source: text("source"), relationship: text("relationship"), target: text("target"), context: entity.control.context)
            if entityContext.hasSuffix("/$link") { collection.addedLinks.append(change) } else { collection.removedLinks.append(change) }
        } else if entity.properties.isEmpty && entity.navigation.isEmpty, let id = entity.control.id, entity.control.context == nil,
                  entity.typeName == type || type == nil, entity.annotations.isEmpty, entity.control.etag == nil, entity.control.editLink == nil {
            collection.references.append(id)
        } else {
            collection.entities.append(entity)
        }
    }

    private func deletedEntity(from entity: Entity) -> DeletedEntity {
        var reason: String?
        var id = entity.control.id
        for annotation in entity.annotations where annotation.term == "odata.removed" || annotation.term == "removed" {
            reason = annotation.value["reason"]?.stringValue
        }
        var properties = entity.properties
        if case .primitive(.string(let text))? = entity["reason"] {
            reason = text
            properties.removeAll { $0.name == "reason" }
        }
        if id == nil, case .primitive(.string(let text))? = entity["id"] {
            id = text
            properties.removeAll { $0.name == "id" }
        }
        return DeletedEntity(id: id, reason: reason, properties: properties, context: entity.control.context)
    }

    func readCollectionAnnotation(_ r: inout JSONReader, _ name: String, into collection: inout EntityCollection) throws(PayloadError) {
        guard let control = Self.controlName(name) else {
            let term = name.hasPrefix("@") ? String(name.dropFirst()) : name
            collection.annotations.append(InstanceAnnotation(property: nil, term: term, value: try r.readValue()))
            return
        }
        switch control {
        case "context": collection.context = try r.readString()
        case "nextLink": collection.nextLink = try r.readString()
        case "deltaLink": collection.deltaLink = try r.readString()
        case "count":
            if r.peek() == 0x22 {
                collection.count = Int64(try r.readString())
            } else {
                let range = try r.readNumberRange()
                guard let count = Int64(String(decoding: r.bytes[range], as: UTF8.self)) else {
                    throw r.error("@odata.count must be an integer", .wrongType, at: range.lowerBound)
                }
                collection.count = count
            }
        default:
            collection.annotations.append(InstanceAnnotation(property: nil, term: "odata." + control, value: try r.readValue()))
        }
    }

    // MARK: Values

    /// Reads a value of a known kind (nil: untyped).
    func readTyped(_ r: inout JSONReader, _ kind: Kind?, _ context: inout Context) throws(PayloadError) -> Value {
        guard let c = r.peek() else { throw r.error("Unexpected end of JSON, expected a value") }
        if c == UInt8(ascii: "n") {
            _ = try r.readKeyword()
            return .null
        }
        switch kind {
        case .primitive(let p, let collection)?:
            if collection { return try readCollection(&r) { (r) throws(PayloadError) in try readPrimitive(&r, p) } }
            return try readPrimitive(&r, p)
        case .enumeration(let name, let collection)?:
            if collection { return try readCollection(&r) { (r) throws(PayloadError) in try readEnum(&r, name) } }
            return try readEnum(&r, name)
        case .complex(let name, let collection)?, .entity(let name, let collection)?:
            if collection { return try readCollection(&r) { (r) throws(PayloadError) in try readComplex(&r, name, &context) } }
            return try readComplex(&r, name, &context)
        case .untyped(let collection)?:
            if collection { return try readCollection(&r) { (r) throws(PayloadError) in try readUntyped(&r, &context) } }
            return try readUntyped(&r, &context)
        case nil:
            return try readUntyped(&r, &context)
        }
    }

    private func readCollection(_ r: inout JSONReader, _ element: (inout JSONReader) throws(PayloadError) -> Value) throws(PayloadError) -> Value {
        guard r.peek() == UInt8(ascii: "[") else { throw r.error("Expected a JSON array for a collection", .wrongType) }
        var items: [Value] = []
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
        return .collection(items)
    }

    private func readEnum(_ r: inout JSONReader, _ name: String) throws(PayloadError) -> Value {
        let text: String
        if r.peek() == 0x22 {
            text = try r.readString()
            let members = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            if members.count != 1 || Int64(members[0]) == nil {
                return .enumeration(EnumValue(typeName: name, members: members))
            }
        } else {
            let range = try r.readNumberRange()
            text = String(decoding: r.bytes[range], as: UTF8.self)
        }
        // A numeric value: name the members when the model knows them.
        if let number = Int64(text.trimmingCharacters(in: .whitespaces)), let type = model?.enumType(name) {
            if let member = type.members.first(where: { $0.value == number }) {
                return .enumeration(EnumValue(typeName: name, members: [member.name]))
            }
            if type.isFlags {
                let names = type.members.filter { $0.value != 0 && number & $0.value == $0.value }.map(\.name)
                if !names.isEmpty, names.reduce(Int64(0), { result, member in result | (type.member(named: member)?.value ?? 0) }) == number {
                    return .enumeration(EnumValue(typeName: name, members: names))
                }
            }
        }
        return .enumeration(EnumValue(typeName: name, members: [text]))
    }

    private func readComplex(_ r: inout JSONReader, _ name: String, _ context: inout Context) throws(PayloadError) -> Value {
        guard r.peek() == UInt8(ascii: "{") else { throw r.error("Expected a JSON object for \(name)", .wrongType) }
        let entity = try readEntity(&r, type: name, &context)
        return .complex(StructuredValue(typeName: entity.typeName, properties: entity.properties))
    }

    func readPrimitive(_ r: inout JSONReader, _ type: PrimitiveType) throws(PayloadError) -> Value {
        guard let c = r.peek() else { throw r.error("Unexpected end of JSON, expected a value") }
        let start = r.i
        if c == 0x22 {
            if type != .string {
                // Dates, times, GUIDs: parse straight from the bytes when there are no escapes.
                let key = try r.readKey()
                if key.decoded == nil, let value = Self.fromBytes(r.bytes, key.range, as: type) { return .primitive(value) }
                r.i = start
            }
            let text = try r.readString()
            if type == .string { return .primitive(.string(text)) }
            do {
                return .primitive(try Literal.parsePayloadValue(text, as: type))
            } catch {
                let problem = Literal.temporalProblem(Array(text.utf8), 0).map { " (\($0))" } ?? ""
                throw PayloadError(.wrongType, "'\(text)' is not a valid \(type.rawValue)\(problem)", offset: start,
                                   path: r.pathString)
            }
        }
        if c == UInt8(ascii: "t") || c == UInt8(ascii: "f") {
            guard case .bool(let b) = try r.readKeyword(), type == .boolean else {
                throw PayloadError(.wrongType, "Expected \(type.rawValue), found a Boolean", offset: start, path: r.pathString)
            }
            return .primitive(.boolean(b))
        }
        if c == UInt8(ascii: "{") && type.isSpatial {
            return try readGeoJSON(&r, type)
        }
        guard c == UInt8(ascii: "-") || isDigit(c) else {
            throw PayloadError(.wrongType, "Expected \(type.rawValue)", offset: start, path: r.pathString)
        }
        let range = try r.readNumberRange()
        guard let value = Self.number(r.bytes, range, as: type) else {
            throw PayloadError(.wrongType, "'\(String(decoding: r.bytes[range], as: UTF8.self))' is not a valid \(type.rawValue)", offset: start, path: r.pathString)
        }
        return .primitive(value)
    }

    /// Parses the payload form of temporal and GUID values directly from bytes.
    static func fromBytes(_ bytes: [UInt8], _ range: Range<Int>, as type: PrimitiveType) -> PrimitiveValue? {
        let start = range.lowerBound
        switch type {
        case .dateTimeOffset:
            guard let (value, end) = Literal.scanDateTimeOffset(bytes, start), end == range.upperBound else { return nil }
            return .dateTimeOffset(value)
        case .date:
            guard let (value, end) = Literal.scanDate(bytes, start), end == range.upperBound else { return nil }
            return .date(value)
        case .timeOfDay:
            guard let (value, end) = Literal.scanTimeOfDay(bytes, start), end == range.upperBound else { return nil }
            return .timeOfDay(value)
        case .guid:
            return bytes.withUnsafeBufferPointer { GuidValue(utf8: UnsafeBufferPointer(rebasing: $0[range])) }.map { .guid($0) }
        default:
            return nil
        }
    }

    /// Powers of ten exactly representable as Double.
    private static let exactPowers: [Double] = (0...22).map { pow(10, Double($0)) }

    /// Correctly rounded Double for simple numbers (at most 15 significant digits, small
    /// exponent), without allocating; nil when the slow path is needed.
    @inline(__always) static func fastDouble(_ bytes: [UInt8], _ range: Range<Int>) -> Double? {
        var k = range.lowerBound
        var negative = false
        if bytes[k] == UInt8(ascii: "-") {
            negative = true
            k += 1
        }
        var mantissa: UInt64 = 0
        var digits = 0
        var scale = 0
        var inFraction = false
        while k < range.upperBound {
            let c = bytes[k]
            if isDigit(c) {
                if mantissa == 0 && c == UInt8(ascii: "0") && !inFraction {
                    // leading zero
                } else {
                    digits += 1
                    if digits > 15 { return nil }
                    mantissa = mantissa * 10 + UInt64(c - 48)
                }
                if inFraction { scale += 1 }
            } else if c == UInt8(ascii: ".") {
                inFraction = true
            } else {
                return nil
            }
            k += 1
        }
        guard scale < exactPowers.count else { return nil }
        let value = Double(mantissa) / exactPowers[scale]
        return negative ? -value : value
    }

    /// Converts number bytes to a primitive of `type`, without going through Double for exact types.
    static func number(_ bytes: [UInt8], _ range: Range<Int>, as type: PrimitiveType) -> PrimitiveValue? {
        switch type {
        case .byte, .sbyte, .int16, .int32, .int64:
            guard let v = integer(bytes, range) else { return nil }
            switch type {
            case .byte: return UInt8(exactly: v).map { .byte($0) }
            case .sbyte: return Int8(exactly: v).map { .sbyte($0) }
            case .int16: return Int16(exactly: v).map { .int16($0) }
            case .int32: return Int32(exactly: v).map { .int32($0) }
            default: return .int64(v)
            }
        case .decimal:
            return DecimalValue(bytes: bytes[range]).map { .decimal($0) }
        case .double:
            if let fast = fastDouble(bytes, range) { return .double(fast) }
            // A number too large for a Double is refused, not stored as infinity.
            return Double(String(decoding: bytes[range], as: UTF8.self)).flatMap { $0.isFinite ? .double($0) : nil }
        case .single:
            return Float(String(decoding: bytes[range], as: UTF8.self)).flatMap { $0.isFinite ? .single($0) : nil }
        default:
            return nil
        }
    }

    /// Parses a JSON integer without allocating; nil on overflow or a fraction.
    @inline(__always) static func integer(_ bytes: [UInt8], _ range: Range<Int>) -> Int64? {
        var index = range.lowerBound
        var negative = false
        if bytes[index] == UInt8(ascii: "-") {
            negative = true
            index += 1
        }
        var value: Int64 = 0
        while index < range.upperBound {
            let c = bytes[index]
            guard isDigit(c) else { return nil }
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (s, o2) = negative ? m.subtractingReportingOverflow(Int64(c - 48)) : m.addingReportingOverflow(Int64(c - 48))
            if o1 || o2 { return nil }
            value = s
            index += 1
        }
        return value
    }

    private func readGeoJSON(_ r: inout JSONReader, _ type: PrimitiveType) throws(PayloadError) -> Value {
        let start = r.i
        let json = try r.readValue()
        guard let kind = json["type"]?.stringValue else {
            throw PayloadError(.wrongType, "GeoJSON needs a 'type'", offset: start, path: r.pathString)
        }
        var srid: Int?
        if let crs = json["crs"]?["properties"]?["name"]?.stringValue, let number = crs.split(separator: ":").last.flatMap({ Int($0) }) {
            srid = number
        }
        let wkt = json["wkt"]?.stringValue ?? Self.wellKnownText(json) ?? kind + "()"
        var point: SpatialValue.Point?
        if kind == "Point", let coordinates = json["coordinates"]?.arrayValue {
            let numbers = coordinates.compactMap { value -> Double? in
                if case .number(let n) = value { return Double(n) }
                return nil
            }
            if numbers.count >= 2 {
                point = SpatialValue.Point(x: numbers[0], y: numbers[1], z: numbers.count > 2 ? numbers[2] : nil, m: numbers.count > 3 ? numbers[3] : nil)
            }
        }
        return .primitive(.spatial(SpatialValue(kind: kind == "GeometryCollection" ? "Collection" : kind, isGeography: type.isGeography,
                                                srid: srid, point: point, wellKnownText: wkt)))
    }

    /// Well-known text for a GeoJSON object.
    static func wellKnownText(_ json: JSONValue) -> String? {
        guard let kind = json["type"]?.stringValue else { return nil }
        func position(_ value: JSONValue) -> String? {
            guard let items = value.arrayValue else { return nil }
            let numbers = items.compactMap { item -> String? in
                if case .number(let n) = item { return n }
                return nil
            }
            return numbers.count >= 2 ? numbers.joined(separator: " ") : nil
        }
        func nested(_ value: JSONValue, depth: Int) -> String? {
            if depth == 0 { return position(value) }
            guard let items = value.arrayValue else { return nil }
            let parts = items.compactMap { nested($0, depth: depth - 1) }
            return "(" + parts.joined(separator: ",") + ")"
        }
        if kind == "GeometryCollection" {
            let parts = json["geometries"]?.arrayValue?.compactMap { wellKnownText($0) } ?? []
            return "Collection(" + parts.joined(separator: ",") + ")"
        }
        guard let coordinates = json["coordinates"] else { return nil }
        let depth: [String: Int] = ["Point": 0, "LineString": 1, "MultiPoint": 1, "Polygon": 2, "MultiLineString": 2, "MultiPolygon": 3]
        guard let d = depth[kind], let body = nested(coordinates, depth: d) else { return nil }
        return kind + (d == 0 ? "(" + body + ")" : body)
    }

    /// An untyped value: typed by `@odata.type` when an object says so, else by its JSON shape.
    func readUntyped(_ r: inout JSONReader, _ context: inout Context) throws(PayloadError) -> Value {
        guard let c = r.peek() else { throw r.error("Unexpected end of JSON, expected a value") }
        switch c {
        case 0x22: return .primitive(.string(try r.readString()))
        case UInt8(ascii: "{"):
            let entity = try readEntity(&r, type: nil, &context)
            return .complex(StructuredValue(typeName: entity.typeName, properties: entity.properties))
        case UInt8(ascii: "["):
            return try readCollection(&r) { (r) throws(PayloadError) in try readUntyped(&r, &context) }
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            let range = try r.readNumberRange()
            return .primitive(Self.untypedNumber(r.bytes, range))
        default:
            switch try r.readKeyword() {
            case .bool(let b): return .primitive(.boolean(b))
            default: return .null
            }
        }
    }

    static func untypedNumber(_ bytes: [UInt8], _ range: Range<Int>) -> PrimitiveValue {
        if let v = integer(bytes, range) {
            if let small = Int32(exactly: v) { return .int32(small) }
            return .int64(v)
        }
        let text = String(decoding: bytes[range], as: UTF8.self)
        if !text.contains("e") && !text.contains("E"), let d = DecimalValue(text) { return .decimal(d) }
        return .double(Double(text) ?? .nan)
    }

    /// Re-types a value read before its type annotation arrived.
    func retype(_ value: Value, _ kind: Kind) -> Value {
        switch (value, kind) {
        case (.primitive, .primitive(let p, false)):
            return Literal.convert(value, to: p) ?? value
        case (.primitive(.string(let s)), .enumeration(let name, false)):
            return .enumeration(EnumValue(typeName: name, members: s.split(separator: ",").map(String.init)))
        case (.collection(let items), .primitive(let p, true)):
            return .collection(items.map { Literal.convert($0, to: p) ?? $0 })
        case (.complex(var s), .complex(let name, false)):
            s.typeName = s.typeName ?? name
            return .complex(s)
        default:
            return value
        }
    }
}
