import Foundation

/// Parsing and printing of OData literals: the URL forms (V4 and V2 syntax) and the plain
/// value forms used in payloads and `DefaultValue`.
public enum Literal {
    // MARK: URL literals

    /// Parses one complete URL literal (already percent-decoded), e.g. `'it''s'`, `12M`,
    /// `datetime'2000-12-12T12:00'`, `Ns.Color'Red'`, `2012-09-03`, `binary'Zm9v'`.
    ///
    /// With `type`, a literal that fits that type is converted to it (for example `12` as
    /// `Edm.Int64`, `1.5` as `Edm.Double`, `'P1D'` as `Edm.Duration`).
    public static func parse(_ text: String, version: ODataVersion = .v4, as type: PrimitiveType? = nil) throws(SyntaxError) -> Value {
        let bytes = Array(text.utf8)
        guard let (value, end) = scan(bytes, 0, version: version) else {
            throw SyntaxError(.invalidLiteral, "Not a valid \(version.isLegacy ? "V2" : "V4") literal", input: text, offset: 0)
        }
        guard end == bytes.count else {
            throw SyntaxError(.invalidLiteral, "Unexpected text after the literal", input: text, offset: end)
        }
        guard let type else { return value }
        guard let converted = convert(value, to: type) else {
            throw SyntaxError(.invalidLiteral, "The literal is not a valid \(type.rawValue)", input: text, offset: 0)
        }
        return converted
    }

    /// Prints a value as a URL literal in the syntax of `version`; the result parses back to an
    /// equal value when parsed `as` the value's type.
    public static func format(_ value: Value, version: ODataVersion = .v4) -> String {
        let legacy = version.isLegacy
        switch value {
        case .null:
            return "null"
        case .enumeration(let e):
            let members = e.members.joined(separator: ",")
            return (e.typeName ?? "") + "'" + members + "'"
        case .primitive(let p):
            return format(p, legacy: legacy)
        case .collection(let items):
            return "[" + items.map { jsonInURL($0) }.joined(separator: ",") + "]"
        case .complex, .entity:
            return jsonInURL(value)
        }
    }

    private static func format(_ p: PrimitiveValue, legacy: Bool) -> String {
        switch p {
        case .binary(let data):
            return legacy ? "X'" + data.map { String(format: "%02X", $0) }.joined() + "'" : "binary'" + encodeBase64URL(Array(data)) + "'"
        case .boolean(let b): return b ? "true" : "false"
        case .byte(let v): return String(v)
        case .sbyte(let v): return String(v)
        case .int16(let v): return String(v)
        case .int32(let v): return String(v)
        case .int64(let v): return legacy ? "\(v)L" : String(v)
        case .single(let v): return formatFloating(Double(v), legacy: legacy, suffix: "f", description: "\(v)")
        case .double(let v): return formatFloating(v, legacy: legacy, suffix: "d", description: "\(v)")
        case .decimal(let d): return legacy ? d.description + "M" : d.description
        case .string(let s): return "'" + s.replacingOccurrences(of: "'", with: "''") + "'"
        case .guid(let g): return legacy ? "guid'\(g)'" : g.description
        case .date(let d): return legacy ? "datetime'\(d)T00:00'" : d.description
        case .timeOfDay(let t): return legacy ? "time'PT\(t.hour)H\(t.minute)M\(t.second)S'" : t.description
        case .dateTimeOffset(let d): return legacy ? "datetimeoffset'\(d)'" : d.description
        case .duration(let d): return legacy ? "time'\(d)'" : "duration'\(d)'"
        case .dateTime(let d): return "datetime'\(d)'"
        case .time(let d): return legacy ? "time'\(d)'" : "duration'\(d)'"
        case .spatial(let s): return (s.isGeography ? "geography'" : "geometry'") + s.description + "'"
        }
    }

    private static func formatFloating(_ v: Double, legacy: Bool, suffix: String, description: String) -> String {
        if v.isNaN { return "NaN" }
        if v.isInfinite { return v < 0 ? "-INF" : "INF" }
        var text = description
        if text.hasSuffix(".0") { text.removeLast(2) }
        // Without a V2 suffix a plain `1.5` would read back as a decimal: mark floating values
        // with an exponent so the type survives a round trip.
        if legacy { return text + suffix }
        if !text.contains("e") && !text.contains("E") { text += "E0" }
        return text
    }

    private static func jsonInURL(_ value: Value) -> String {
        switch value {
        case .null: return "null"
        case .primitive(let p):
            switch p {
            case .boolean(let b): return b ? "true" : "false"
            case .byte, .sbyte, .int16, .int32, .int64, .decimal: return format(p, legacy: false)
            case .single(let v): return v.isFinite ? "\(v)" : "\"\(format(p, legacy: false))\""
            case .double(let v): return v.isFinite ? "\(v)" : "\"\(format(p, legacy: false))\""
            case .string(let s): return jsonString(s)
            default: return jsonString(payloadText(p))
            }
        case .enumeration(let e): return jsonString(e.members.joined(separator: ","))
        case .collection(let items): return "[" + items.map(jsonInURL).joined(separator: ",") + "]"
        case .complex(let s), .entity(let s):
            var parts: [String] = []
            if let type = s.typeName { parts.append("\"@odata.type\":" + jsonString("#" + type)) }
            parts += s.properties.map { jsonString($0.name) + ":" + jsonInURL($0.value) }
            return "{" + parts.joined(separator: ",") + "}"
        }
    }

    static func jsonString(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    out += String(format: "\\u%04x", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    /// Scans one literal at `start` of decoded URL text. Returns nil when no literal starts
    /// there (an identifier, an operator, …).
    static func scan(_ b: [UInt8], _ start: Int, version: ODataVersion) -> (Value, Int)? {
        guard start < b.count else { return nil }
        let c = b[start]
        let legacy = version.isLegacy
        if c == UInt8(ascii: "'") {
            guard let (text, end) = scanQuoted(b, start) else { return nil }
            return (.primitive(.string(text)), end)
        }
        // Words: keywords, prefixed literals, enum literals.
        if isAlpha(c) || c == UInt8(ascii: "_") {
            // A GUID can start with a hex letter.
            if let (guid, end) = scanGuid(b, start), !continuesIdentifier(b, end) {
                return (.primitive(.guid(guid)), end)
            }
            var i = start
            while i < b.count, isIdentifierByte(b[i]) || (b[i] == UInt8(ascii: ".") && i + 1 < b.count && isIdentifierStart(b[i + 1])) {
                i += 1
            }
            let word = String(decoding: b[start..<i], as: UTF8.self)
            if i < b.count, b[i] == UInt8(ascii: "'") {
                guard let (body, end) = scanQuoted(b, i) else { return nil }
                guard let value = prefixed(word, body, version: version) else { return nil }
                return (value, end)
            }
            switch word {
            case "null": return (.null, i)
            case "INF": return (.primitive(.double(.infinity)), i)
            case "NaN": return (.primitive(.double(.nan)), i)
            default: break
            }
            switch word.lowercased() {
            case "true": return (.primitive(.boolean(true)), i)
            case "false": return (.primitive(.boolean(false)), i)
            default: return nil
            }
        }
        guard isDigit(c) || c == UInt8(ascii: "-") || c == UInt8(ascii: "+") else { return nil }
        if b[start...].starts(with: "-INF".utf8), !continuesIdentifier(b, start + 4) {
            return (.primitive(.double(-.infinity)), start + 4)
        }
        if !legacy {
            if let (guid, end) = scanGuid(b, start), !continuesIdentifier(b, end) { return (.primitive(.guid(guid)), end) }
            if let (dto, end) = scanDateTimeOffset(b, start), !continuesIdentifier(b, end) { return (.primitive(.dateTimeOffset(dto)), end) }
            if let (date, end) = scanDate(b, start), !continuesIdentifier(b, end) { return (.primitive(.date(date)), end) }
            if let (time, end) = scanTimeOfDay(b, start), !continuesIdentifier(b, end), end > start + 3 {
                return (.primitive(.timeOfDay(time)), end)
            }
        }
        // A date or time of the right shape that the calendar does not have is no number either.
        if !legacy || malformedTemporal(b, start) != nil, temporalProblem(b, start) != nil { return nil }
        guard let number = scanNumber(b, start) else { return nil }
        var end = number.end
        if legacy, end < b.count {
            let suffix = b[end] | 0x20
            if [UInt8(ascii: "m"), UInt8(ascii: "d"), UInt8(ascii: "f"), UInt8(ascii: "l")].contains(suffix), !continuesIdentifier(b, end + 1) {
                end += 1
                switch suffix {
                case UInt8(ascii: "m"):
                    guard let d = DecimalValue(number.text) else { return nil }
                    return (.primitive(.decimal(d)), end)
                case UInt8(ascii: "d"):
                    guard let d = Double(number.text) else { return nil }
                    return (.primitive(.double(d)), end)
                case UInt8(ascii: "f"):
                    guard let f = Float(number.text) else { return nil }
                    return (.primitive(.single(f)), end)
                default:
                    guard !number.hasFraction, !number.hasExponent, let v = Int64(number.text) else { return nil }
                    return (.primitive(.int64(v)), end)
                }
            }
        }
        if continuesIdentifier(b, end) { return nil }
        return (numberValue(number), end)
    }

    private static func numberValue(_ number: NumberShape) -> Value {
        if number.hasExponent, let d = Double(number.text) {
            // Past Double's range (`1e309`, up to decimal128's `1e6144`) the literal is still an
            // exact Edm.Decimal, never an infinity or a zero that it is not.
            let decimal = DecimalValue(number.text)
            if !d.isFinite || (d == 0 && decimal?.isZero == false), let decimal { return .primitive(.decimal(decimal)) }
            return .primitive(.double(d))
        }
        if !number.hasFraction {
            if let v = Int32(number.text) { return .primitive(.int32(v)) }
            if let v = Int64(number.text) { return .primitive(.int64(v)) }
        }
        if let d = DecimalValue(number.text) { return .primitive(.decimal(d)) }
        return .primitive(.double(Double(number.text) ?? .nan))
    }

    private static func prefixed(_ word: String, _ body: String, version: ODataVersion) -> Value? {
        let bodyBytes = Array(body.utf8)
        func whole<T>(_ scanned: (T, Int)?) -> T? {
            guard let (value, end) = scanned, end == bodyBytes.count else { return nil }
            return value
        }
        switch word.lowercased() {
        case "binary":
            if version.isLegacy {
                return decodeHex(body).map { .primitive(.binary(Data($0))) }
            }
            return decodeBase64URL(body).map { .primitive(.binary(Data($0))) }
        case "x" where word == "X" || version.isLegacy:
            guard version.isLegacy else { return nil }
            return decodeHex(body).map { .primitive(.binary(Data($0))) }
        case "duration":
            return whole(scanDuration(bodyBytes, 0)).map { .primitive(.duration($0)) }
        case "geography":
            return parseSpatial(body, isGeography: true).map { .primitive(.spatial($0)) }
        case "geometry":
            return parseSpatial(body, isGeography: false).map { .primitive(.spatial($0)) }
        case "datetime" where version.isLegacy:
            return whole(scanDateTimeOffset(bodyBytes, 0, requireOffset: false)).map { .primitive(.dateTime($0)) }
        case "datetimeoffset" where version.isLegacy:
            return whole(scanDateTimeOffset(bodyBytes, 0)).map { .primitive(.dateTimeOffset($0)) }
        case "guid" where version.isLegacy:
            return GuidValue(body).map { .primitive(.guid($0)) }
        case "time" where version.isLegacy:
            return whole(scanDuration(bodyBytes, 0)).map { .primitive(.time($0)) }
        default:
            // Enum literal: a qualified type name with member names or numbers.
            guard word.contains("."), !word.hasPrefix("Edm.") else { return nil }
            let members = body.split(separator: ",", omittingEmptySubsequences: false).map { String($0) }
            guard !members.isEmpty, members.allSatisfy({ isEnumMember($0) }) else { return nil }
            return .enumeration(EnumValue(typeName: word, members: members))
        }
    }

    static func isEnumMember(_ text: String) -> Bool {
        let b = Array(text.utf8)
        guard let first = b.first else { return false }
        if isIdentifierStart(first) { return b.allSatisfy(isIdentifierByte) }
        var digitsPart = b[...]
        if first == UInt8(ascii: "-") || first == UInt8(ascii: "+") { digitsPart = digitsPart.dropFirst() }
        return !digitsPart.isEmpty && digitsPart.allSatisfy(isDigit)
    }

    // MARK: Conversion

    /// Converts a parsed literal to `type` when the value fits (numeric widening, V4 literal
    /// forms of V2 types, strings holding a typed value). Nil when it does not fit.
    public static func convert(_ value: Value, to type: PrimitiveType) -> Value? {
        guard case .primitive(let p) = value else {
            return value == .null ? .null : nil
        }
        if p.type == type { return value }
        if case .string(let s) = p, type != .string {
            return (try? parsePayloadValue(s, as: type)).map { .primitive($0) }
        }
        if type.isNumeric, let converted = convertNumber(p, to: type) { return .primitive(converted) }
        switch (p, type) {
        case (.dateTimeOffset(let d), .dateTime): return .primitive(.dateTime(d))
        case (.dateTime(let d), .dateTimeOffset): return .primitive(.dateTimeOffset(DateTimeOffsetValue(date: d.date, time: d.time, offsetMinutes: 0)))
        case (.dateTime(let d), .date) where d.time.picosecondsSinceMidnight == 0 && (d.offsetMinutes ?? 0) == 0:
            // A V2 `datetime'2020-01-01T00:00:00'` against a V4 Edm.Date (V2 has no date type).
            return .primitive(.date(d.date))
        case (.duration(let d), .time): return .primitive(.time(d))
        case (.time(let d), .duration): return .primitive(.duration(d))
        case (.spatial(let s), _) where type.isSpatial:
            if type == .geography && s.isGeography { return value }
            if type == .geometry && !s.isGeography { return value }
            return nil
        default: return nil
        }
    }

    /// ``convert(_:to:)`` for a literal written in a URL (a key, a function parameter): a quoted
    /// string is a string and nothing else, as in `$filter` (`ItemPosition='10'` is not an
    /// Int32). Payload values, where V2 writes Int64 and Decimal as strings, use `convert`.
    public static func convertURLLiteral(_ value: Value, to type: PrimitiveType) -> Value? {
        if case .primitive(.string) = value, type != .string { return nil }
        return convert(value, to: type)
    }

    static func convertNumber(_ p: PrimitiveValue, to type: PrimitiveType) -> PrimitiveValue? {
        if let d = p.decimalValue, d.exponent >= 0 || type == .decimal || type == .double || type == .single {
            let text = d.description
            switch type {
            case .byte: return UInt8(text).map { .byte($0) }
            case .sbyte: return Int8(text).map { .sbyte($0) }
            case .int16: return Int16(text).map { .int16($0) }
            case .int32: return Int32(text).map { .int32($0) }
            case .int64: return Int64(text).map { .int64($0) }
            case .decimal: return .decimal(d)
            case .double: return Double(text).map { .double($0) }
            case .single: return Float(text).map { .single($0) }
            default: return nil
            }
        }
        switch (p, type) {
        case (.single(let f), .double): return .double(Double(f))
        case (.double(let d), .single): return .single(Float(d))
        case (.double(let d), .decimal):
            return d.isFinite ? DecimalValue("\(d)").map { .decimal($0) } : nil
        case (.single(let f), .decimal):
            return f.isFinite ? DecimalValue("\(f)").map { .decimal($0) } : nil
        default: return nil
        }
    }

    // MARK: Payload values

    /// Parses the plain value form of a primitive type as it appears in payloads and
    /// `DefaultValue` attributes: no quotes, no prefixes, no percent-encoding
    /// (`2012-09-03T13:52Z`, `P1DT2H`, `3.14`, `true`).
    public static func parsePayloadValue(_ text: String, as type: PrimitiveType) throws(SyntaxError) -> PrimitiveValue {
        let b = Array(text.utf8)
        func fail(_ offset: Int = 0) -> SyntaxError {
            SyntaxError(.invalidLiteral, "Not a valid \(type.rawValue) value", input: text, offset: offset)
        }
        func whole<T>(_ scanned: (T, Int)?) throws(SyntaxError) -> T {
            guard let (value, end) = scanned else {
                if let problem = temporalProblem(b, 0) {
                    throw SyntaxError(.invalidLiteral, "Not a valid \(type.rawValue) value: \(problem)", input: text, offset: 0)
                }
                throw fail()
            }
            guard end == b.count else { throw fail(end) }
            return value
        }
        switch type {
        case .string: return .string(text)
        case .boolean:
            if text == "true" { return .boolean(true) }
            if text == "false" { return .boolean(false) }
            throw fail()
        case .byte, .sbyte, .int16, .int32, .int64:
            guard let n = scanNumber(b, 0), n.end == b.count, !n.hasFraction, !n.hasExponent,
                  let converted = convertNumber(.decimal(DecimalValue(n.text) ?? DecimalValue(0)), to: type) else {
                throw fail(scanNumber(b, 0)?.end ?? 0)
            }
            return converted
        case .decimal:
            guard let n = scanNumber(b, 0) else { throw fail() }
            guard n.end == b.count else { throw fail(n.end) }
            guard let d = DecimalValue(n.text) else { throw fail() }
            return .decimal(d)
        case .double, .single:
            switch text {
            case "INF": return type == .double ? .double(.infinity) : .single(.infinity)
            case "-INF": return type == .double ? .double(-.infinity) : .single(-.infinity)
            case "NaN": return type == .double ? .double(.nan) : .single(.nan)
            default: break
            }
            guard let n = scanNumber(b, 0) else { throw fail() }
            guard n.end == b.count else { throw fail(n.end) }
            guard let d = Double(n.text) else { throw fail() }
            return type == .double ? .double(d) : .single(Float(d))
        case .guid:
            guard let (g, end) = scanGuid(b, 0), end == b.count else {
                throw fail(firstNonGuidOffset(b))
            }
            return .guid(g)
        case .date: return .date(try whole(scanDate(b, 0)))
        case .timeOfDay: return .timeOfDay(try whole(scanTimeOfDay(b, 0)))
        case .dateTimeOffset: return .dateTimeOffset(try whole(scanDateTimeOffset(b, 0)))
        case .dateTime: return .dateTime(try whole(scanDateTimeOffset(b, 0, requireOffset: false)))
        case .duration: return .duration(try whole(scanDuration(b, 0)))
        case .time: return .time(try whole(scanDuration(b, 0)))
        case .binary:
            guard let bytes = decodeBase64URL(text) else { throw fail() }
            return .binary(Data(bytes))
        case .stream:
            throw SyntaxError(.invalidLiteral, "Edm.Stream has no literal form", input: text, offset: 0)
        default:
            guard let spatial = parseSpatial(text, isGeography: type.isGeography) else { throw fail() }
            return .spatial(spatial)
        }
    }

    /// The plain payload form of a primitive value (the inverse of `parsePayloadValue`).
    public static func payloadText(_ p: PrimitiveValue) -> String {
        switch p {
        case .binary(let data): return encodeBase64URL(Array(data))
        case .boolean(let b): return b ? "true" : "false"
        case .byte(let v): return String(v)
        case .sbyte(let v): return String(v)
        case .int16(let v): return String(v)
        case .int32(let v): return String(v)
        case .int64(let v): return String(v)
        case .single(let v): return v.isNaN ? "NaN" : v.isInfinite ? (v < 0 ? "-INF" : "INF") : "\(v)"
        case .double(let v): return v.isNaN ? "NaN" : v.isInfinite ? (v < 0 ? "-INF" : "INF") : "\(v)"
        case .decimal(let d): return d.description
        case .string(let s): return s
        case .guid(let g): return g.description
        case .date(let d): return d.description
        case .timeOfDay(let t): return t.description
        case .dateTimeOffset(let d), .dateTime(let d): return d.description
        case .duration(let d), .time(let d): return d.description
        case .spatial(let s): return s.description
        }
    }

    private static func firstNonGuidOffset(_ b: [UInt8]) -> Int {
        for (i, c) in b.enumerated() {
            let dash = [8, 13, 18, 23].contains(i)
            if dash ? c != UInt8(ascii: "-") : !isHexDigit(c) { return i }
        }
        return b.count
    }
}

@inline(__always) func isIdentifierStart(_ c: UInt8) -> Bool { isAlpha(c) || c == UInt8(ascii: "_") || c >= 0x80 }
@inline(__always) func isIdentifierByte(_ c: UInt8) -> Bool { isIdentifierStart(c) || isDigit(c) }
@inline(__always) func continuesIdentifier(_ b: [UInt8], _ i: Int) -> Bool { i < b.count && isIdentifierByte(b[i]) }
