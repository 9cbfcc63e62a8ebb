/// A page of entities read as rows: one cell per property and entity, without ``Entity``
/// values in between. See ``V4JSONReader/readFlatCollection(_:entityType:)``.
public struct FlatCollection: Sendable {
    /// The properties of every row, in the entity type's order.
    public var propertyNames: [String]
    /// The primitive type of each property (nil for enum properties).
    public var propertyTypes: [PrimitiveType?]
    /// `propertyNames.count` cells per entity, entity after entity.
    public var cells: [FlatCell] = []
    /// The UTF-8 text that `.text` cells point into.
    public var text: [UInt8] = []
    /// The values of `.other` cells.
    public var others: [Value] = []
    /// The values of `.instant` cells.
    public var instants: [DateTimeOffsetValue] = []
    /// The values of `.decimal` cells.
    public var decimals: [DecimalValue] = []
    /// Each entity's `@odata.etag`.
    public var etags: [String?] = []
    /// Each entity's `@odata.editLink`.
    public var editLinks: [String?] = []
    /// Where each entity's object is in the bytes the page was read from.
    public var elementRanges: [Range<Int>] = []
    /// The entity type of every row.
    public var entityType: String
    /// The page's `@odata.context`.
    public var context: String?
    /// The page's `@odata.count` (all matching entities, not only this page's).
    public var count: Int64?
    /// The URL of the next page; nil on the last one.
    public var nextLink: String?
    /// The delta link, on the last page of a read that tracks changes.
    public var deltaLink: String?

    /// How many entities the page holds.
    public var entityCount: Int { etags.count }

    /// The value of property `property` (an index into ``propertyNames``) of entity `row`
    /// (`.null` where the payload has null or leaves the property out).
    public subscript(row: Int, property: Int) -> Value { value(ofCell: row * propertyNames.count + property) }

    /// Entity `row` as an ``Entity`` (for the few rows a caller handles one by one).
    public func entity(at row: Int) -> Entity {
        var entity = Entity(
            typeName: entityType,
            properties: propertyNames.indices.map { NamedValue(name: propertyNames[$0], value: self[row, $0]) })
        entity.control.etag = etags[row]
        entity.control.editLink = editLinks[row]
        return entity
    }

    /// A collection page of only the entities `rows` (indexes into this page), cut as they
    /// are from `source`, the bytes this page was read from, with this page's delta link: what
    /// a download stages of a page when only some of its entities changed. It reads back as
    /// those entities.
    public func page(ofRows rows: [Int], from source: [UInt8]) -> [UInt8] {
        var bytes = Array(#"{"value":["#.utf8)
        for (offset, row) in rows.enumerated() where elementRanges.indices.contains(row) {
            if offset > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes.append(contentsOf: source[elementRanges[row]])
        }
        bytes.append(UInt8(ascii: "]"))
        if let deltaLink {
            bytes.append(contentsOf: Array(#","@odata.deltaLink":"#.utf8))
            bytes.append(contentsOf: Array(JSONValue.string(deltaLink).serialized.utf8))
        }
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }

    /// Every cell's value, row after row.
    public var values: [Value] { cells.indices.map(value(ofCell:)) }

    /// Nil when every cell points inside its arrays (text ranges inside ``text``, indexes into
    /// ``instants``, ``decimals`` and ``others``) and the page has a cell per property and row,
    /// and an ETag and edit link slot per row; else a sentence that names the first cell that
    /// does not (a page from the reader always does; one built or changed by hand may not).
    public var layoutProblem: String? {
        let width = propertyNames.count
        guard propertyTypes.count == width else {
            return "The page has \(propertyTypes.count) property types for \(width) properties"
        }
        guard cells.count == entityCount * width, editLinks.count == entityCount else {
            return "The page has \(cells.count) cells and \(editLinks.count) edit links for \(entityCount) rows "
                + "of \(width) properties"
        }
        let textCount = text.count, instantCount = instants.count
        let decimalCount = decimals.count, otherCount = others.count
        for (index, cell) in cells.enumerated() {
            let fits: Bool
            switch cell {
            case .null, .integer, .double: continue
            case .text(let start, let count): fits = start >= 0 && count >= 0 && count <= textCount - start
            case .instant(let item): fits = item >= 0 && item < instantCount
            case .decimal(let item): fits = item >= 0 && item < decimalCount
            case .other(let item): fits = item >= 0 && item < otherCount
            }
            if !fits {
                let row = index / max(1, width), property = propertyNames[index % max(1, width)]
                return "Row \(row), property \(property): the cell \(cell) points outside the page's arrays"
            }
        }
        return nil
    }

    /// The string of a `.text` cell.
    public func string(start: Int, count: Int) -> String { String(decoding: text[start..<(start + count)], as: UTF8.self) }

    func value(ofCell index: Int) -> Value {
        let type = propertyTypes[index % max(1, propertyNames.count)]
        switch cells[index] {
        case .null: return .null
        case .other(let other): return others[other]
        case .instant(let instant): return .primitive(.dateTimeOffset(instants[instant]))
        case .decimal(let decimal): return .primitive(.decimal(decimals[decimal]))
        case .double(let number): return .primitive(.double(number))
        case .text(let start, let count):
            if type == .guid, let guid = GuidValue(string(start: start, count: count)) { return .primitive(.guid(guid)) }
            return .primitive(.string(string(start: start, count: count)))
        case .integer(let number):
            switch type {
            case .boolean?: return .primitive(.boolean(number != 0))
            case .int32?: return .primitive(.int32(Int32(truncatingIfNeeded: number)))
            case .int16?: return .primitive(.int16(Int16(truncatingIfNeeded: number)))
            case .byte?: return .primitive(.byte(UInt8(truncatingIfNeeded: number)))
            case .sbyte?: return .primitive(.sbyte(Int8(truncatingIfNeeded: number)))
            default: return .primitive(.int64(number))
            }
        }
    }
}

/// One value of a flat row. The common kinds are held without a ``Value`` (so that a page
/// of rows is a few flat arrays): integers and Booleans (1 or 0) of the property's type,
/// doubles, strings and GUIDs as UTF-8 in ``FlatCollection/text`` (GUIDs in lowercase
/// `8-4-4-4-12` form); DateTimeOffsets and decimals in arrays of their own (a store writes
/// them without taking a ``Value`` apart). Everything else is a ``FlatCollection/others``
/// value.
public enum FlatCell: Sendable, Hashable {
    case null
    case integer(Int64)
    case double(Double)
    case text(start: Int, count: Int)
    case other(Int)
    /// A DateTimeOffset: an index into ``FlatCollection/instants``.
    case instant(Int)
    /// A decimal: an index into ``FlatCollection/decimals``.
    case decimal(Int)
}

extension V4JSONReader {
    /// Reads a collection page whose entities are all flat, straight into rows: what a store
    /// filling a table from a large download needs. The values are the ones
    /// ``readCollection(_:entityType:)`` gives.
    ///
    /// Returns nil, having read nothing into rows, when the page needs the general reader:
    /// when the type has complex or collection properties, or an entity carries inline
    /// (expanded) entities, another type, media or custom annotations, annotated properties,
    /// properties the model does not declare, or when the page holds delta entries or
    /// references. Malformed JSON and wrongly typed values are errors as in `readCollection`.
    public func readFlatCollection(_ bytes: [UInt8], entityType: String) throws(PayloadError) -> FlatCollection? {
        try withPathOnFailure { (trackPath) throws(PayloadError) in try readFlatCollection(bytes, entityType: entityType, trackPath: trackPath) }
    }

    private func readFlatCollection(_ bytes: [UInt8], entityType: String, trackPath: Bool) throws(PayloadError) -> FlatCollection? {
        guard let model, model.entityType(entityType) != nil else { return nil }
        var context = Context(model: model)
        let members = context.members(of: entityType)
        // Every structural property must be a single primitive or enum value; navigation
        // properties may be declared (they must not be inline).
        var kinds: [Kind?] = []
        var names: [String] = []
        var slots: [Int] = []
        for entry in members.entries {
            switch entry.member {
            case .property(let kind):
                switch kind {
                case .primitive(_, false), .enumeration(_, false):
                    slots.append(names.count)
                    names.append(entry.name)
                    kinds.append(kind)
                default:
                    return nil
                }
            case .navigation:
                slots.append(-1)
            }
        }
        guard members.entries.count <= 64 else { return nil }
        let width = names.count
        let types: [PrimitiveType?] = kinds.map { kind in
            if case .primitive(let type, _)? = kind { return type }
            return nil
        }
        var page = FlatCollection(propertyNames: names, propertyTypes: types, entityType: entityType)
        var reader = JSONReader(bytes)
        reader.trackPath = trackPath
        guard reader.peek() == UInt8(ascii: "{") else { throw reader.error("A collection response must be a JSON object", .unexpectedValue) }
        var flat = true
        var sawValue = false
        var links = EntityCollection()
        try reader.readObject { (r, name) throws(PayloadError) in
            guard name == "value" else {
                // Context, count and links; any other annotation of the page needs the general reader.
                try readCollectionAnnotation(&r, name, into: &links)
                return
            }
            sawValue = true
            r.enter("value")
            defer { r.leave() }
            try r.readArray { (r, index) throws(PayloadError) in
                r.enter("[\(index)]")
                defer { r.leave() }
                guard flat else {
                    try r.skipValue()
                    return
                }
                guard r.peek() == UInt8(ascii: "{") else { throw r.error("A collection element must be an object", .unexpectedValue) }
                let start = r.i
                let base = page.cells.count
                // Properties usually come in the type's order: each is appended, with nulls
                // only for the ones left out; one out of order overwrites its null.
                var filled = 0
                var etag: String?
                var editLink: String?
                var seen: UInt64 = 0
                var properties = 0
                try r.readObjectKeys { (r, key) throws(PayloadError) in
                    if key.decoded == nil, let index = members.index(of: key.range, in: r.bytes) {
                        let entry = members.entries[index]
                        guard seen & (1 << UInt64(index)) == 0 else { throw r.error("'\(entry.name)' appears twice", .unexpectedValue) }
                        seen |= 1 << UInt64(index)
                        r.enter(entry.name)
                        defer { r.leave() }
                        let slot = slots[index]
                        guard slot >= 0 else {
                            // Inline entities: the general reader stores them.
                            flat = false
                            try r.skipValue()
                            return
                        }
                        let cell = try readCell(&r, types[slot], kinds[slot], &context, into: &page)
                        if slot < filled {
                            page.cells[base + slot] = cell
                        } else {
                            while filled < slot {
                                page.cells.append(.null)
                                filled += 1
                            }
                            page.cells.append(cell)
                            filled += 1
                        }
                        properties += 1
                        return
                    }
                    let name = key.string(r.bytes)
                    r.enter(name)
                    defer { r.leave() }
                    if name.hasPrefix("@") || name.hasPrefix("odata.") {
                        switch Self.controlName(name) {
                        case "etag"?:
                            guard r.peek() == 0x22 else { throw r.error("@odata.etag must be a string", .wrongType) }
                            etag = try r.readString()
                        case "editLink"?:
                            guard r.peek() == 0x22 else { throw r.error("@odata.editLink must be a string", .wrongType) }
                            editLink = try r.readString()
                        case "id"?, "readLink"?:
                            // Not kept: checked as a string, without building one when it
                            // has no escapes (most servers send an id per entity).
                            _ = try r.readKey()
                        case "type"?:
                            let type = Self.typeName(try r.readString())
                            if type?.name != entityType || type?.isCollection == true { flat = false }
                        default:
                            flat = false
                            try r.skipValue()
                        }
                        return
                    }
                    // Links to related entities are not stored; anything else needs the
                    // general reader.
                    if !(name.hasSuffix("@odata.navigationLink") || name.hasSuffix("@odata.associationLink")) { flat = false }
                    try r.skipValue()
                }
                while filled < width {
                    page.cells.append(.null)
                    filled += 1
                }
                // An element without properties is a reference (or a deleted entity).
                if properties == 0 { flat = false }
                page.etags.append(etag)
                page.editLinks.append(editLink)
                page.elementRanges.append(start..<r.i)
                if index == 0 {
                    // Room for as many more elements as the first one's size suggests (one
                    // allocation instead of a dozen, for pages of similar entities).
                    let estimate = min((r.bytes.count - r.i) / max(r.i - start, 16) + 1, 1_000_000)
                    page.cells.reserveCapacity(width * (estimate + 1))
                    page.text.reserveCapacity(page.text.count * (estimate + 1))
                    page.etags.reserveCapacity(estimate + 1)
                    page.editLinks.reserveCapacity(estimate + 1)
                    page.elementRanges.reserveCapacity(estimate + 1)
                }
            }
        }
        try reader.expectEnd()
        guard sawValue else { throw reader.error("A collection response needs a 'value' array", .missingValue, at: 0) }
        guard flat, links.annotations.isEmpty else { return nil }
        page.context = links.context
        page.count = links.count
        page.nextLink = links.nextLink
        page.deltaLink = links.deltaLink
        return page
    }

    /// Reads one property value into a cell: strings, GUIDs, integers and Booleans straight
    /// from the bytes where they are plain, anything else (and every error) as
    /// ``readTyped(_:_:_:)`` reads it.
    private func readCell(_ r: inout JSONReader, _ type: PrimitiveType?, _ kind: Kind?, _ context: inout Context,
                          into page: inout FlatCollection) throws(PayloadError) -> FlatCell {
        let mark = r.i
        if let type, let c = r.peek() {
            switch type {
            case .string where c == 0x22:
                // ASCII without escapes: the bytes are the string's UTF-8. Otherwise the
                // string as `readString` decodes it (invalid UTF-8 repaired).
                let key = try r.readKey()
                let start = page.text.count
                if let decoded = key.decoded {
                    page.text.append(contentsOf: decoded.utf8)
                } else if r.bytes[key.range].allSatisfy({ $0 < 0x80 }) {
                    page.text.append(contentsOf: r.bytes[key.range])
                } else {
                    page.text.append(contentsOf: String(decoding: r.bytes[key.range], as: UTF8.self).utf8)
                }
                return .text(start: start, count: page.text.count - start)
            case .boolean where c == UInt8(ascii: "t") || c == UInt8(ascii: "f"):
                if r.matches("true") {
                    r.i += 4
                    return .integer(1)
                }
                if r.matches("false") {
                    r.i += 5
                    return .integer(0)
                }
            case .int64, .int32, .int16, .byte, .sbyte:
                if c == UInt8(ascii: "-") || isDigit(c) {
                    let range = try r.readNumberRange()
                    if let number = Self.number(r.bytes, range, as: type), let cell = Self.integerCell(number) { return cell }
                    r.i = mark
                }
            default:
                break
            }
        }
        let value = try readTyped(&r, kind, &context)
        switch value {
        case .null: return .null
        case .primitive(.string(let s)):
            let start = page.text.count
            page.text.append(contentsOf: s.utf8)
            return .text(start: start, count: page.text.count - start)
        case .primitive(.guid(let g)):
            let start = page.text.count
            g.appendText(to: &page.text)
            return .text(start: start, count: page.text.count - start)
        case .primitive(.double(let d)): return .double(d)
        case .primitive(.dateTimeOffset(let instant)):
            page.instants.append(instant)
            return .instant(page.instants.count - 1)
        case .primitive(.decimal(let decimal)):
            page.decimals.append(decimal)
            return .decimal(page.decimals.count - 1)
        case .primitive(let p): if let cell = Self.integerCell(p) { return cell }
        default: break
        }
        page.others.append(value)
        return .other(page.others.count - 1)
    }

    /// The cell of an integer or Boolean value; nil for other values.
    @inline(__always) static func integerCell(_ value: PrimitiveValue) -> FlatCell? {
        switch value {
        case .boolean(let b): .integer(b ? 1 : 0)
        case .int64(let v): .integer(v)
        case .int32(let v): .integer(Int64(v))
        case .int16(let v): .integer(Int64(v))
        case .byte(let v): .integer(Int64(v))
        case .sbyte(let v): .integer(Int64(v))
        default: nil
        }
    }
}
