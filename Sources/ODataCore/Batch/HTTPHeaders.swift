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
            fields.first { Self.sameName($0.name, name) }?.value
        }
        set {
            if let newValue {
                if let index = fields.firstIndex(where: { Self.sameName($0.name, name) }) {
                    fields[index].value = newValue
                    fields.removeAll { Self.sameName($0.name, name) && $0.value != newValue }
                } else {
                    fields.append((name: name, value: newValue))
                }
            } else {
                fields.removeAll { Self.sameName($0.name, name) }
            }
        }
    }

    /// Appends a header, keeping any with the same name.
    public mutating func add(_ name: String, _ value: String) { fields.append((name: name, value: value)) }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> { fields.makeIterator() }

    public static func == (a: HTTPHeaders, b: HTTPHeaders) -> Bool {
        a.fields.count == b.fields.count
            && zip(a.fields, b.fields).allSatisfy {
                $0.name.lowercased() == $1.name.lowercased() && $0.value == $1.value
            }
    }

    public func hash(into hasher: inout Hasher) {
        for field in fields {
            hasher.combine(field.name.lowercased())
            hasher.combine(field.value)
        }
    }

    /// Whether two header names are the same, ignoring case. Compared byte by byte without
    /// allocating (names are ASCII tokens; others are compared in lower case).
    static func sameName(_ a: String, _ b: String) -> Bool {
        var left = a.utf8.makeIterator()
        var right = b.utf8.makeIterator()
        while true {
            switch (left.next(), right.next()) {
            case (nil, nil): return true
            case (let x?, let y?):
                if x == y { continue }
                guard x < 0x80, y < 0x80 else { return a.lowercased() == b.lowercased() }
                let foldedX = x >= 0x41 && x <= 0x5A ? x | 0x20 : x
                let foldedY = y >= 0x41 && y <= 0x5A ? y | 0x20 : y
                if foldedX != foldedY { return false }
            default: return false
            }
        }
    }

    /// A parameter of a header value: `boundary` in `multipart/mixed; boundary=b`.
    public static func parameter(_ name: String, in value: String) -> String? {
        // On the UTF-8 bytes: the generic trimming of Characters this replaced was an eighth of
        // a large upload's time.
        let bytes = Array(value.utf8)
        func trimmed(_ range: Range<Int>) -> Range<Int> { bytes[range].withoutOuterBlanks.indices }
        // The next `;` outside a quoted string (RFC 9110 §5.6.4: `\` escapes the next byte).
        func end(from start: Int) -> Int {
            var quoted = false
            var index = start
            while index < bytes.count {
                switch bytes[index] {
                case 0x22: quoted.toggle()
                case 0x5C where quoted: index += 1
                case UInt8(ascii: ";") where !quoted: return index
                default: break
                }
                index += 1
            }
            return bytes.count
        }
        var start = 0
        var first = true
        while start <= bytes.count {
            let end = end(from: start)
            defer { start = end + 1 }
            if first {
                first = false
                continue
            }
            guard let equals = bytes[start..<end].firstIndex(of: UInt8(ascii: "=")) else { continue }
            let key = trimmed(start..<equals)
            guard sameName(String(decoding: bytes[key], as: UTF8.self), name) else { continue }
            var parameter = trimmed((equals + 1)..<end)
            // An empty value counts as absent (a later parameter of the name may still give one).
            guard !parameter.isEmpty else { continue }
            guard parameter.count >= 2, bytes[parameter.lowerBound] == 0x22, bytes[parameter.upperBound - 1] == 0x22
            else { return String(decoding: bytes[parameter], as: UTF8.self) }
            parameter = (parameter.lowerBound + 1)..<(parameter.upperBound - 1)
            var unquoted: [UInt8] = []
            var index = parameter.lowerBound
            while index < parameter.upperBound {
                if bytes[index] == 0x5C, index + 1 < parameter.upperBound { index += 1 }
                unquoted.append(bytes[index])
                index += 1
            }
            return String(decoding: unquoted, as: UTF8.self)
        }
        return nil
    }
}
