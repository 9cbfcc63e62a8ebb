/// Writes a V4 JSON collection one entity at a time from flat values, without building
/// ``Entity`` values first: for servers and stores that read rows.
///
/// For entities whose properties are all primitive or enum values, the bytes are the ones
/// ``V4JSONWriter`` writes for the same collection: same member order, same number and date
/// forms, same `@odata.type` annotations at `full` metadata.
public struct V4RowWriter: Sendable {
    private let formatter: V4JSONWriter
    private var writer = JSONWriter()
    private let names: [String]
    /// `"name":` of each property, escaped once.
    private let keys: [[UInt8]]
    private var finished = false

    /// Starts the collection: `@odata.context` (unless metadata is `none`), `@odata.count`,
    /// then the `value` array. `propertyNames` are the members that ``value(_:at:)`` and
    /// ``enumValue(_:at:)`` write, by index.
    public init(format: JSONFormat = JSONFormat(), context: String?, count: Int64?, propertyNames: [String]) {
        formatter = V4JSONWriter(format: format)
        names = propertyNames
        keys = propertyNames.map(JSONWriter.escapedKey)
        writer.bytes.reserveCapacity(64 * 1024)
        writer.objectStart()
        if format.metadata != .none, let context {
            writer.key("@odata.context")
            writer.string(context)
        }
        if let count {
            writer.key("@odata.count")
            if format.ieee754Compatible { writer.string(String(count)) } else { writer.raw(String(count)) }
        }
        writer.key("value")
        writer.arrayStart()
    }

    /// Opens the next entity with its control information (left out at metadata `none`).
    public mutating func beginEntity(typeName: String?, etag: String?, editLink: String?) {
        writer.objectStart()
        guard formatter.format.metadata != .none else { return }
        writer.member("@odata.type", typeName.map { "#" + $0 })
        writer.member("@odata.etag", etag)
        writer.member("@odata.editLink", editLink)
    }

    /// Whether values carry `@odata.type` annotations (metadata `full`): then only
    /// ``value(_:at:)`` writes them.
    public var annotatesTypes: Bool { formatter.format.metadata == .full }

    /// Writes the property `propertyNames[index]` with an integer of an Int16, Int32 or Int64
    /// (`int64`: a string when IEEE754Compatible) property, or a Byte or SByte one. Not for
    /// ``annotatesTypes``.
    public mutating func integer(_ value: Int64, int64: Bool, at index: Int) {
        writer.key(escaped: keys[index])
        if int64 && formatter.format.ieee754Compatible { writer.string(String(value)) } else { writer.integer(Int(value)) }
    }

    /// Writes the property `propertyNames[index]` with a Boolean. Not for ``annotatesTypes``.
    public mutating func boolean(_ value: Bool, at index: Int) {
        writer.key(escaped: keys[index])
        writer.bool(value)
    }

    /// Writes the property `propertyNames[index]` with a String given as UTF-8; false (and
    /// nothing written) when it is not plain ASCII, which ``value(_:at:)`` then writes. Not
    /// for ``annotatesTypes``.
    public mutating func asciiString(_ utf8: UnsafeBufferPointer<UInt8>, at index: Int) -> Bool {
        var clean = true
        for c in utf8 {
            if c >= 0x80 { return false }
            if c < 0x20 || c == 0x22 || c == 0x5C { clean = false }
        }
        writer.key(escaped: keys[index])
        writer.asciiString(utf8, clean: clean)
        return true
    }

    /// Writes the property `propertyNames[index]` with a Decimal whose plain notation
    /// (``DecimalValue/description``) `append` writes: a JSON number, or a string when
    /// IEEE754Compatible. Not for ``annotatesTypes``.
    public mutating func decimal(at index: Int, _ append: (inout [UInt8]) -> Void) {
        writer.key(escaped: keys[index])
        if formatter.format.ieee754Compatible { writer.plainString(append) } else { writer.rawBytes(append) }
    }

    /// Writes the property `propertyNames[index]` with a date, time or duration whose text
    /// (digits and separators only, nothing to escape) `append` writes. Not for
    /// ``annotatesTypes``.
    public mutating func temporal(at index: Int, _ append: (inout [UInt8]) -> Void) {
        writer.key(escaped: keys[index])
        writer.plainString(append)
    }

    /// Writes the property `propertyNames[index]` with a primitive value (nil: JSON null).
    public mutating func value(_ value: PrimitiveValue?, at index: Int) {
        guard let value else {
            writer.key(escaped: keys[index])
            writer.null()
            return
        }
        let wrapped = Value.primitive(value)
        if formatter.format.metadata == .full, let type = formatter.annotationType(wrapped) {
            writer.key(names[index] + "@odata.type")
            writer.string("#" + type)
        }
        writer.key(escaped: keys[index])
        if case .spatial = value {
            formatter.writeValue(wrapped, &writer)
        } else {
            formatter.writePrimitive(value, &writer)
        }
    }

    /// Writes the property `propertyNames[index]` with enum members (`"Red,Blue"`; nil: null).
    public mutating func enumValue(_ members: String?, at index: Int) {
        writer.key(escaped: keys[index])
        if let members { writer.string(members) } else { writer.null() }
    }

    /// Closes the current entity.
    public mutating func endEntity() { writer.endObject() }

    /// Closes the collection with its next and delta links and returns the payload.
    public mutating func finish(nextLink: String?, deltaLink: String?) -> [UInt8] {
        guard !finished else { return writer.bytes }
        finished = true
        writer.endArray()
        writer.member("@odata.nextLink", nextLink)
        writer.member("@odata.deltaLink", deltaLink)
        writer.endObject()
        return writer.bytes
    }
}
