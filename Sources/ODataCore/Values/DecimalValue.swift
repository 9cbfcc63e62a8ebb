/// An exact decimal number of any precision: `Edm.Decimal` values never pass through `Double`.
///
/// Stored as sign, a digit string without leading zeros, and a base-10 exponent:
/// `-12.50` is `negative`, digits `"1250"`, exponent `-2`. Equality and ordering are numeric
/// (`1.50 == 1.5`), while `description` keeps the scale that was written.
public struct DecimalValue: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public private(set) var negative: Bool
    /// Significant digits, no leading zeros; `"0"` for zero.
    public private(set) var digits: String
    public private(set) var exponent: Int

    /// Parses `[+-]digits[.digits][e[+-]digits]`; nil if the text is not a decimal number.
    public init?(_ text: String) {
        self.init(bytes: Array(text.utf8)[...])
    }

    /// Parses the same syntax from UTF-8 bytes.
    public init?(bytes source: ArraySlice<UInt8>) {
        var bytes = source
        var negative = false
        if let first = bytes.first, first == UInt8(ascii: "-") || first == UInt8(ascii: "+") {
            negative = first == UInt8(ascii: "-")
            bytes = bytes.dropFirst()
        }
        var digits: [UInt8] = []
        digits.reserveCapacity(bytes.count)
        var exponent = 0
        var sawDigit = false
        while let c = bytes.first, isDigit(c) {
            digits.append(c)
            sawDigit = true
            bytes = bytes.dropFirst()
        }
        if bytes.first == UInt8(ascii: ".") {
            bytes = bytes.dropFirst()
            var fractionDigits = 0
            while let c = bytes.first, isDigit(c) {
                digits.append(c)
                fractionDigits += 1
                bytes = bytes.dropFirst()
            }
            guard fractionDigits > 0 else { return nil }
            sawDigit = true
            exponent = -fractionDigits
        }
        guard sawDigit else { return nil }
        if let c = bytes.first, c == UInt8(ascii: "e") || c == UInt8(ascii: "E") {
            bytes = bytes.dropFirst()
            var expNegative = false
            if let s = bytes.first, s == UInt8(ascii: "-") || s == UInt8(ascii: "+") {
                expNegative = s == UInt8(ascii: "-")
                bytes = bytes.dropFirst()
            }
            var value = 0
            var any = false
            while let d = bytes.first, isDigit(d) {
                value = value * 10 + Int(d - 48)
                // Beyond any Edm type's range, and its plain text would take that many bytes.
                guard value <= Self.maximumExponent else { return nil }
                any = true
                bytes = bytes.dropFirst()
            }
            guard any else { return nil }
            exponent += expNegative ? -value : value
        }
        guard bytes.isEmpty else { return nil }
        self.init(negative: negative, digitBytes: digits, exponent: exponent)
    }

    /// The largest exponent written after `e` that is accepted (IEEE 754 decimal128's): a
    /// larger one fits no Edm type, and expanding `1e99999999` would take 100 MB.
    public static let maximumExponent = 6144

    /// A decimal from an integer.
    public init(_ value: Int64) {
        let magnitude = value.magnitude
        self.init(negative: value < 0, digitBytes: Array(String(magnitude).utf8), exponent: 0)
    }

    private init(negative: Bool, digitBytes: [UInt8], exponent: Int) {
        var slice = digitBytes[...]
        while slice.count > 1, slice.first == UInt8(ascii: "0") { slice = slice.dropFirst() }
        if slice.isEmpty { slice = [UInt8(ascii: "0")][...] }
        self.digits = String(decoding: slice, as: UTF8.self)
        self.exponent = exponent
        self.negative = negative && slice != [UInt8(ascii: "0")][...]
    }

    public var isZero: Bool { digits == "0" }

    /// The plain decimal notation, keeping the written scale (`12.50`).
    public var description: String {
        var text = negative ? "-" : ""
        if exponent >= 0 {
            text += digits
            if exponent > 0 && !isZero { text += String(repeating: "0", count: exponent) }
            return text
        }
        let scale = -exponent
        if digits.count > scale {
            let split = digits.index(digits.endIndex, offsetBy: -scale)
            text += digits[..<split] + "." + digits[split...]
        } else {
            text += "0." + String(repeating: "0", count: scale - digits.count) + digits
        }
        return text
    }

    /// The number of digits after the decimal point as written.
    public var scale: Int { max(0, -exponent) }

    /// Normalized digits and exponent with trailing zeros stripped.
    private var normalized: (digits: [UInt8], exponent: Int) {
        var bytes = Array(digits.utf8)
        var exp = exponent
        if bytes == [UInt8(ascii: "0")] { return (bytes, 0) }
        while bytes.count > 1, bytes.last == UInt8(ascii: "0") {
            bytes.removeLast()
            exp += 1
        }
        return (bytes, exp)
    }

    public static func == (a: DecimalValue, b: DecimalValue) -> Bool {
        let x = a.normalized, y = b.normalized
        return a.negative == b.negative && x.digits == y.digits && x.exponent == y.exponent
    }

    public func hash(into hasher: inout Hasher) {
        let x = normalized
        hasher.combine(negative)
        hasher.combine(x.digits)
        hasher.combine(x.exponent)
    }

    public static func < (a: DecimalValue, b: DecimalValue) -> Bool {
        if a.negative != b.negative { return a.negative }
        let magnitudeLess = compareMagnitude(a, b) < 0
        let magnitudeGreater = compareMagnitude(a, b) > 0
        return a.negative ? magnitudeGreater : magnitudeLess
    }

    /// -1, 0, 1 comparing |a| and |b|.
    private static func compareMagnitude(_ a: DecimalValue, _ b: DecimalValue) -> Int {
        let x = a.normalized, y = b.normalized
        let xZero = x.digits == [UInt8(ascii: "0")], yZero = y.digits == [UInt8(ascii: "0")]
        if xZero || yZero { return xZero && yZero ? 0 : (xZero ? -1 : 1) }
        // Magnitude order: position of the most significant digit.
        let xTop = x.digits.count + x.exponent, yTop = y.digits.count + y.exponent
        if xTop != yTop { return xTop < yTop ? -1 : 1 }
        let length = max(x.digits.count, y.digits.count)
        for i in 0..<length {
            let dx = i < x.digits.count ? x.digits[i] : UInt8(ascii: "0")
            let dy = i < y.digits.count ? y.digits[i] : UInt8(ascii: "0")
            if dx != dy { return dx < dy ? -1 : 1 }
        }
        return 0
    }

    /// The nearest `Double` (for arithmetic with floating types only).
    public var doubleValue: Double { Double(description) ?? .nan }
}

@inline(__always) func isDigit(_ c: UInt8) -> Bool { c >= 48 && c <= 57 }
@inline(__always) func isHexDigit(_ c: UInt8) -> Bool {
    isDigit(c) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102)
}
@inline(__always) func isAlpha(_ c: UInt8) -> Bool { (c >= 65 && c <= 90) || (c >= 97 && c <= 122) }
