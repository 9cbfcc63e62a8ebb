/// HTTP or MIME headers in order, with names matched case-insensitively.
///
/// Kept exactly as they were read or set, byte for byte, whatever they hold. That is why this
/// type exists beside swift-http-types' `HTTPFields`, which turns invalid bytes of a value into
/// spaces and cannot hold a name that is not an RFC 9110 token: a `$batch` part or a backend
/// answer with such a header is reported as it is, never silently changed, and `ODataCore`
/// keeps no dependency but Foundation.
public struct HTTPHeaders: Sendable, Hashable, Sequence {
    public private(set) var fields: [(name: String, value: String)]

    /// Creates a value from its parts.
    public init(_ fields: [(String, String)] = []) {
        self.fields = fields.map { (name: $0.0, value: $0.1) }
    }

    /// The first value of a header (case-insensitive name).
    public subscript(name: String) -> String? {
        get {
            let key = name.lowercased()
            return fields.first { $0.name.lowercased() == key }?.value
        }
        set {
            let key = name.lowercased()
            if let newValue {
                if let index = fields.firstIndex(where: { $0.name.lowercased() == key }) {
                    fields[index].value = newValue
                    fields.removeAll { $0.name.lowercased() == key && $0.value != newValue }
                } else {
                    fields.append((name: name, value: newValue))
                }
            } else {
                fields.removeAll { $0.name.lowercased() == key }
            }
        }
    }

    /// Appends a header, keeping any with the same name.
    public mutating func add(_ name: String, _ value: String) { fields.append((name: name, value: value)) }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> { fields.makeIterator() }

    public static func == (a: HTTPHeaders, b: HTTPHeaders) -> Bool {
        a.fields.count == b.fields.count && zip(a.fields, b.fields).allSatisfy { $0.name.lowercased() == $1.name.lowercased() && $0.value == $1.value }
    }

    public func hash(into hasher: inout Hasher) {
        for field in fields {
            hasher.combine(field.name.lowercased())
            hasher.combine(field.value)
        }
    }

    /// A parameter of a header value: `boundary` in `multipart/mixed; boundary=b`.
    public static func parameter(_ name: String, in value: String) -> String? {
        // Trimmed without Foundation (its trimming showed in the profile of a large upload).
        func trimmed(_ text: Substring) -> String {
            String(text.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
        }
        for part in value.split(separator: ";").dropFirst() {
            let pair = part.split(separator: "=", maxSplits: 1).map(trimmed)
            guard pair.count == 2, pair[0].lowercased() == name.lowercased() else { continue }
            var parameter = pair[1]
            if parameter.hasPrefix("\"") && parameter.hasSuffix("\"") && parameter.count >= 2 {
                parameter = String(parameter.dropFirst().dropLast())
            }
            return parameter
        }
        return nil
    }
}
