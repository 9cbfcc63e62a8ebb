/// A JSON value as read from a payload. Numbers keep their text so that no precision is lost.
public indirect enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    /// A number, as written.
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([Member])

    /// One member of an object, in document order.
    public struct Member: Sendable, Hashable {
        public var name: String
        public var value: JSONValue
        /// Creates a value from its parts.
        public init(_ name: String, _ value: JSONValue) {
            self.name = name
            self.value = value
        }
    }

    /// The value of the first member named `name`, for objects.
    public subscript(name: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.name == name }?.value
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var objectMembers: [Member]? {
        if case .object(let members) = self { return members }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let items) = self { return items }
        return nil
    }

    /// Parses a whole JSON document.
    public static func parse(_ bytes: [UInt8]) throws(PayloadError) -> JSONValue {
        var reader = JSONReader(bytes)
        let value = try reader.readValue()
        try reader.expectEnd()
        return value
    }

    /// Compact JSON text.
    public var serialized: String {
        var writer = JSONWriter()
        writer.value(self)
        return writer.text
    }
}
