import Foundation
public import ODataCore

/// How each Edm primitive type is stored so that the stored value is exact, decodes back to an
/// equal value, and compares and sorts in SQLite (with `=`, `<`, `ORDER BY`) the way OData
/// compares the values:
///
/// | Edm type | SQLite storage |
/// |---|---|
/// | Boolean, Byte, SByte, Int16/32/64 | INTEGER |
/// | Single, Double | REAL (NaN cannot be stored: SQLite turns it into NULL) |
/// | Decimal | BLOB: sign, exponent, digits — order-preserving and exact (canonical, so 1.50 = 1.5) |
/// | DateTimeOffset, DateTime | TEXT: UTC instant, fixed width, year biased by 100000, then the original offset |
/// | Date | TEXT `YYYYYY-MM-DD` with the year biased by 100000 |
/// | TimeOfDay | TEXT `HH:MM:SS.ffffffffffff` |
/// | Duration, Time | BLOB: biased seconds and picoseconds, big-endian |
/// | Guid | TEXT, lowercase |
/// | String, spatial (literal text) | TEXT |
/// | Binary, Stream | BLOB |
public enum ValueStorage {
    /// The SQLite column type for a primitive type.
    public static func columnType(_ type: PrimitiveType) -> String {
        switch type {
        case .boolean, .byte, .sbyte, .int16, .int32, .int64: "INTEGER"
        case .single, .double: "REAL"
        case .decimal, .duration, .time, .binary, .stream: "BLOB"
        default: "TEXT"
        }
    }

    // MARK: Encoding

    /// The stored form of a value.
    public static func encode(_ value: PrimitiveValue) -> DatabaseValue {
        switch value {
        case .boolean(let b): return .integer(b ? 1 : 0)
        case .byte(let v): return .integer(Int64(v))
        case .sbyte(let v): return .integer(Int64(v))
        case .int16(let v): return .integer(Int64(v))
        case .int32(let v): return .integer(Int64(v))
        case .int64(let v): return .integer(v)
        case .single(let v): return .real(Double(v))
        case .double(let v): return .real(v)
        case .decimal(let d): return .blob(encodeDecimal(d))
        case .string(let s): return .text(s)
        case .guid(let g): return .text(g.description)
        case .date(let d): return .text(dateText(d))
        case .timeOfDay(let t): return .text(timeText(t))
        case .dateTimeOffset(let d): return .text(instantAndOffsetText(d))
        case .dateTime(let d): return .text(instantText(d))
        case .duration(let d), .time(let d): return .blob(encodeDuration(d))
        case .binary(let data): return .blob(Array(data))
        case .spatial(let s): return .text(Literal.format(.primitive(.spatial(s))))
        }
    }

    /// Binds the stored form of `value` (what ``encode(_:)`` gives) at `position`. GUIDs,
    /// DateTimeOffsets and decimals are written into `scratch`, a buffer the caller reuses
    /// from value to value, instead of a new string or array each.
    public static func bind(_ value: PrimitiveValue, to statement: Statement, at position: Int32, scratch: inout [UInt8]) throws(DatabaseError) {
        scratch.removeAll(keepingCapacity: true)
        switch value {
        case .guid(let g):
            g.appendText(to: &scratch)
            try statement.bind(bytes: scratch, at: position)
        case .dateTimeOffset(let d):
            appendInstantAndOffset(d, to: &scratch)
            try statement.bind(bytes: scratch, at: position)
        case .decimal(let d):
            appendDecimal(d, to: &scratch)
            try statement.bind(bytes: scratch, asBlob: true, at: position)
        default:
            try statement.bind(encode(value), at: position)
        }
    }

    /// The order key of a DateTimeOffset: its UTC instant only (what `=` and `<` compare).
    public static func instantKey(_ value: DateTimeOffsetValue) -> String { instantText(value) }

    /// Length of the instant part of a stored DateTimeOffset.
    public static let instantLength = 34

    static func dateText(_ d: DateValue) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(12)
        appendDate(d, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    static func appendDate<Sink: ByteSink>(_ d: DateValue, to bytes: inout Sink) {
        bytes.appendDigits(d.year + 100_000, width: 6)
        bytes.append(UInt8(ascii: "-"))
        bytes.appendDigits(d.month, width: 2)
        bytes.append(UInt8(ascii: "-"))
        bytes.appendDigits(d.day, width: 2)
    }

    static func timeText(_ t: TimeOfDayValue) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(21)
        bytes.appendDigits(t.hour, width: 2)
        bytes.append(UInt8(ascii: ":"))
        bytes.appendDigits(t.minute, width: 2)
        bytes.append(UInt8(ascii: ":"))
        bytes.appendDigits(t.second, width: 2)
        bytes.append(UInt8(ascii: "."))
        let fraction = t.fraction.utf8
        bytes.append(contentsOf: fraction.prefix(12))
        if fraction.count < 12 { bytes.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: 12 - fraction.count)) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `YYYYYY-MM-DDTHH:MM:SS.ffffffffffff` in UTC (34 characters).
    static func instantText(_ d: DateTimeOffsetValue) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(instantLength + 6)
        appendInstant(d, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The stored DateTimeOffset: the UTC instant, then the original offset.
    static func instantAndOffsetText(_ d: DateTimeOffsetValue) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(instantLength + 6)
        appendInstantAndOffset(d, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    static func appendInstantAndOffset<Sink: ByteSink>(_ d: DateTimeOffsetValue, to bytes: inout Sink) {
        let offsetLength: Int
        switch d.offsetMinutes {
        case nil: offsetLength = 0
        case 0 where d.usesZ: offsetLength = 1
        case let minutes?: offsetLength = abs(minutes) < 6_000 ? 6 : -1
        }
        let utc = utcFields(d)
        guard offsetLength >= 0, isFixedWidth(utc) else {
            appendInstant(d, to: &bytes)
            Digits.appendOffset(d.offsetMinutes, usesZ: d.usesZ, to: &bytes)
            return
        }
        bytes.appendBytes(count: instantLength + offsetLength) { start in
            writeInstant(utc, to: start)
            guard let minutes = d.offsetMinutes, offsetLength > 0 else { return }
            let offset = start + instantLength
            if offsetLength == 1 {
                offset[0] = UInt8(ascii: "Z")
                return
            }
            offset[0] = minutes < 0 ? UInt8(ascii: "-") : UInt8(ascii: "+")
            writeTwoDigits(abs(minutes) / 60, to: offset + 1)
            offset[3] = UInt8(ascii: ":")
            writeTwoDigits(abs(minutes) % 60, to: offset + 4)
        }
    }

    static func appendInstant<Sink: ByteSink>(_ d: DateTimeOffsetValue, to bytes: inout Sink) {
        let utc = utcFields(d)
        if isFixedWidth(utc) {
            bytes.appendBytes(count: instantLength) { writeInstant(utc, to: $0) }
            return
        }
        // Years of more than six digits once biased, or before year -100000.
        appendDate(utc.date, to: &bytes)
        bytes.append(UInt8(ascii: "T"))
        bytes.appendDigits(utc.secondOfDay / 3600, width: 2)
        bytes.append(UInt8(ascii: ":"))
        bytes.appendDigits(utc.secondOfDay / 60 % 60, width: 2)
        bytes.append(UInt8(ascii: ":"))
        bytes.appendDigits(utc.secondOfDay % 60, width: 2)
        bytes.append(UInt8(ascii: "."))
        bytes.appendDigits(Int(utc.picoseconds), width: 12)
    }

    /// Whether the stored instant of `utc` has its usual ``instantLength`` characters.
    private static func isFixedWidth(_ utc: (date: DateValue, secondOfDay: Int, picoseconds: Int64)) -> Bool {
        (0...999_999).contains(utc.date.year + 100_000) && (1...12).contains(utc.date.month)
            && (1...31).contains(utc.date.day) && (0..<86_400).contains(utc.secondOfDay)
            && (0..<1_000_000_000_000).contains(utc.picoseconds)
    }

    /// Writes the ``instantLength`` characters of a fixed-width instant (see ``isFixedWidth(_:)``).
    private static func writeInstant(_ utc: (date: DateValue, secondOfDay: Int, picoseconds: Int64),
                                     to start: UnsafeMutablePointer<UInt8>) {
        let year = utc.date.year + 100_000
        writeTwoDigits(year / 10_000, to: start)
        writeTwoDigits(year / 100 % 100, to: start + 2)
        writeTwoDigits(year % 100, to: start + 4)
        start[6] = UInt8(ascii: "-")
        writeTwoDigits(utc.date.month, to: start + 7)
        start[9] = UInt8(ascii: "-")
        writeTwoDigits(utc.date.day, to: start + 10)
        start[12] = UInt8(ascii: "T")
        writeTwoDigits(utc.secondOfDay / 3600, to: start + 13)
        start[15] = UInt8(ascii: ":")
        writeTwoDigits(utc.secondOfDay / 60 % 60, to: start + 16)
        start[18] = UInt8(ascii: ":")
        writeTwoDigits(utc.secondOfDay % 60, to: start + 19)
        start[21] = UInt8(ascii: ".")
        // Twelve digits as six pairs, from the two halves of six.
        let high = Int(utc.picoseconds / 1_000_000), low = Int(utc.picoseconds % 1_000_000)
        writeTwoDigits(high / 10_000, to: start + 22)
        writeTwoDigits(high / 100 % 100, to: start + 24)
        writeTwoDigits(high % 100, to: start + 26)
        writeTwoDigits(low / 10_000, to: start + 28)
        writeTwoDigits(low / 100 % 100, to: start + 30)
        writeTwoDigits(low % 100, to: start + 32)
    }

    /// Writes `value` (0–99) as two digits.
    @inline(__always)
    private static func writeTwoDigits(_ value: Int, to start: UnsafeMutablePointer<UInt8>) {
        let pair = UInt8(truncatingIfNeeded: value)
        start[0] = UInt8(ascii: "0") &+ pair / 10
        start[1] = UInt8(ascii: "0") &+ pair % 10
    }

    /// The UTC date, second of the day and picoseconds of `d`'s instant.
    static func utcFields(_ d: DateTimeOffsetValue) -> (date: DateValue, secondOfDay: Int, picoseconds: Int64) {
        let date = d.date, time = d.time
        if d.offsetMinutes ?? 0 == 0, (0..<24).contains(time.hour), (0..<60).contains(time.minute),
            (0..<60).contains(time.second), (1...12).contains(date.month), date.day >= 1,
            date.day <= DateValue.daysInMonth(date.month, year: date.year)
        {
            // Already UTC, and every field in range: the instant's fields are the value's own
            // (what the arithmetic below gives, without the round trip through a day number).
            return (date, time.hour * 3600 + time.minute * 60 + time.second, Digits.picoseconds(time.fraction))
        }
        let (seconds, picos) = d.instant
        let days = Int((seconds >= 0 ? seconds : seconds - 86_399) / 86_400)
        return (DateValue(daysSinceEpoch: days), Int(seconds - Int64(days) * 86_400), picos)
    }

    static func offsetText(_ minutes: Int?, usesZ: Bool) -> String {
        var bytes: [UInt8] = []
        Digits.appendOffset(minutes, usesZ: usesZ, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    static func pad12(_ picos: Int64) -> String {
        var bytes: [UInt8] = []
        bytes.appendDigits(Int(picos), width: 12)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Sign byte (1 negative, 2 zero, 3 positive), then for positives the exponent biased by
    /// 2^31 (big-endian) and the significant digits; for negatives everything complemented and a
    /// terminator, so that byte order is numeric order.
    static func encodeDecimal(_ d: DecimalValue) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(d.digits.utf8.count + 6)
        appendDecimal(d, to: &bytes)
        return bytes
    }

    static func appendDecimal<Sink: ByteSink>(_ d: DecimalValue, to bytes: inout Sink) {
        if d.isZero {
            bytes.append(2)
            return
        }
        var text = d.digits
        text.withUTF8 { digits in
            var count = digits.count
            var exponent = d.exponent
            // Trailing zeros go into the exponent (canonical form: 1.50 = 1.5).
            while count > 1, digits[count - 1] == UInt8(ascii: "0") {
                count -= 1
                exponent += 1
            }
            // value = 0.d1d2… × 10^e with e = exponent + count
            let e = Int64(exponent + count)
            let negative = d.negative
            // Sign, exponent, digits, and for negatives a terminator.
            bytes.appendBytes(count: 5 + count + (negative ? 1 : 0)) { start in
                let bias = Int64(Int32.max) + 1
                let exponent = negative ? UInt32(clamping: bias - e) : UInt32(clamping: e + bias)
                start[0] = negative ? 1 : 3
                start[1] = UInt8(exponent >> 24)
                start[2] = UInt8(exponent >> 16 & 0xFF)
                start[3] = UInt8(exponent >> 8 & 0xFF)
                start[4] = UInt8(exponent & 0xFF)
                guard negative else {
                    for index in 0..<count { start[5 + index] = digits[index] }
                    return
                }
                for index in 0..<count {
                    // The same complement the decoder undoes (153 − digit: '0' → 105 … '9' → 96).
                    start[5 + index] = UInt8(ascii: "9") - (digits[index] - UInt8(ascii: "0")) + UInt8(ascii: "0")
                }
                start[5 + count] = 0xFF
            }
        }
    }

    static func bigEndian64(_ value: UInt64) -> [UInt8] {
        (0..<8).map { UInt8(value >> (56 - 8 * UInt64($0)) & 0xFF) }
    }

    /// Seconds biased by 2^63 then picoseconds in [0, 10^12), both big-endian.
    static func encodeDuration(_ d: DurationValue) -> [UInt8] {
        var (whole, picos) = d.totalPicoseconds
        if picos < 0 {
            whole -= 1
            picos += 1_000_000_000_000
        }
        return bigEndian64(UInt64(bitPattern: whole) ^ (1 << 63)) + bigEndian64(UInt64(picos))
    }

    // MARK: Decoding

    /// Decodes a stored value as `type`.
    public static func decode(_ stored: DatabaseValue, as type: PrimitiveType) throws(DatabaseError) -> PrimitiveValue? {
        func fail() -> DatabaseError {
            DatabaseError(.corrupt, message: "A stored \(type.rawValue) value cannot be read: \(stored)")
        }
        switch (type, stored) {
        case (_, .null): return nil
        case (.boolean, .integer(let v)): return .boolean(v != 0)
        case (.byte, .integer(let v)): return UInt8(exactly: v).map { .byte($0) }
        case (.sbyte, .integer(let v)): return Int8(exactly: v).map { .sbyte($0) }
        case (.int16, .integer(let v)): return Int16(exactly: v).map { .int16($0) }
        case (.int32, .integer(let v)): return Int32(exactly: v).map { .int32($0) }
        case (.int64, .integer(let v)): return .int64(v)
        case (.single, .real(let v)): return .single(Float(v))
        case (.single, .integer(let v)): return .single(Float(v))
        case (.double, .real(let v)): return .double(v)
        case (.double, .integer(let v)): return .double(Double(v))
        case (.decimal, .blob(let bytes)):
            guard let decimal = decodeDecimal(bytes) else { throw fail() }
            return .decimal(decimal)
        case (.string, .text(let s)): return .string(s)
        case (.guid, .text(let s)):
            guard let guid = GuidValue(s) else { throw fail() }
            return .guid(guid)
        case (.date, .text(let s)):
            guard let date = decodeDate(s) else { throw fail() }
            return .date(date)
        case (.timeOfDay, .text(let s)):
            guard let time = try? Literal.parsePayloadValue(s, as: .timeOfDay), case .timeOfDay(var t) = time else { throw fail() }
            t.fraction = String(t.fraction.reversed().drop { $0 == "0" }.reversed())
            return .timeOfDay(t)
        case (.dateTimeOffset, .text(let s)), (.dateTime, .text(let s)):
            guard let value = decodeInstant(s) else { throw fail() }
            return type == .dateTime ? .dateTime(value) : .dateTimeOffset(value)
        case (.duration, .blob(let bytes)), (.time, .blob(let bytes)):
            guard let value = decodeDuration(bytes) else { throw fail() }
            return type == .time ? .time(value) : .duration(value)
        case (.binary, .blob(let bytes)), (.stream, .blob(let bytes)): return .binary(Data(bytes))
        case (_, .text(let s)) where type.isSpatial:
            guard case .primitive(let value) = try? Literal.parse(s) else { throw fail() }
            return value
        default:
            throw fail()
        }
    }

    static func decodeDecimal(_ bytes: [UInt8]) -> DecimalValue? {
        guard let sign = bytes.first else { return nil }
        if sign == 2 { return DecimalValue("0") }
        guard bytes.count >= 6 else { return nil }
        let biased = Int64(bytes[1]) << 24 | Int64(bytes[2]) << 16 | Int64(bytes[3]) << 8 | Int64(bytes[4])
        var digits = Array(bytes[5...])
        let e: Int64
        if sign == 3 {
            e = biased - Int64(Int32.max) - 1
        } else {
            guard digits.last == 0xFF else { return nil }
            digits.removeLast()
            e = Int64(Int32.max) + 1 - biased
            digits = digits.map { UInt8(ascii: "9") - ($0 - UInt8(ascii: "0")) + UInt8(ascii: "0") }
        }
        guard digits.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        let text = (sign == 1 ? "-0." : "0.") + String(decoding: digits, as: UTF8.self) + "e\(e)"
        return DecimalValue(text)
    }

    static func decodeDate(_ s: String) -> DateValue? {
        var text = s
        return text.withUTF8 { bytes in
            // The stored form: `YYYYYY-MM-DD`, year biased by 100000.
            if bytes.count == 12, bytes[6] == UInt8(ascii: "-"), bytes[9] == UInt8(ascii: "-"),
               let year = number(bytes, 0, 6), let month = number(bytes, 7, 2), let day = number(bytes, 10, 2) {
                return DateValue(year: year - 100_000, month: month, day: day)
            }
            let parts = s.split(separator: "-")
            guard parts.count == 3, let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]) else { return nil }
            return DateValue(year: year - 100_000, month: month, day: day)
        }
    }

    /// The decimal number in `bytes[start..<start + count]`, or nil when one of them is not a digit.
    @inline(__always)
    static func number(_ bytes: UnsafeBufferPointer<UInt8>, _ start: Int, _ count: Int) -> Int? {
        var value = 0
        for index in start..<(start + count) {
            let digit = bytes[index] &- UInt8(ascii: "0")
            guard digit < 10 else { return nil }
            value = value * 10 + Int(digit)
        }
        return value
    }

    static func decodeInstant(_ s: String) -> DateTimeOffsetValue? {
        var text = s
        return text.withUTF8 { bytes -> DateTimeOffsetValue? in
            // `YYYYYY-MM-DDTHH:MM:SS.ffffffffffff` then nothing, `Z` or `±HH:MM`.
            guard bytes.count >= instantLength,
                  bytes[6] == UInt8(ascii: "-"), bytes[9] == UInt8(ascii: "-"), bytes[12] == UInt8(ascii: "T"),
                  bytes[15] == UInt8(ascii: ":"), bytes[18] == UInt8(ascii: ":"), bytes[21] == UInt8(ascii: "."),
                  let year = number(bytes, 0, 6), let month = number(bytes, 7, 2), let day = number(bytes, 10, 2),
                  let hour = number(bytes, 13, 2), let minute = number(bytes, 16, 2), let second = number(bytes, 19, 2),
                  number(bytes, 22, 12) != nil, (1...12).contains(month), (1...31).contains(day),
                  hour < 24, minute < 60, second < 60 else { return nil }
            let offset: Int?
            var usesZ = false
            switch bytes.count - instantLength {
            case 0: offset = nil
            case 1:
                guard bytes[instantLength] == UInt8(ascii: "Z") else { return nil }
                offset = 0
                usesZ = true
            case 6:
                let sign = bytes[instantLength]
                guard sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-"), bytes[instantLength + 3] == UInt8(ascii: ":"),
                      let hours = number(bytes, instantLength + 1, 2), let minutes = number(bytes, instantLength + 4, 2) else { return nil }
                offset = (sign == UInt8(ascii: "-") ? -1 : 1) * (hours * 60 + minutes)
            default:
                return nil
            }
            // Shift the UTC time into the stored offset.
            let date = DateValue(year: year - 100_000, month: month, day: day)
            let utcSeconds = Int64(date.daysSinceEpoch) * 86_400 + Int64(hour * 3600 + minute * 60 + second)
            let local = utcSeconds + Int64((offset ?? 0) * 60)
            let days = Int((local >= 0 ? local : local - 86_399) / 86_400)
            let secondOfDay = Int(local - Int64(days) * 86_400)
            // Fractional digits without the trailing zeros the fixed width added.
            var end = instantLength
            while end > 22, bytes[end - 1] == UInt8(ascii: "0") { end -= 1 }
            let fraction = String(decoding: UnsafeBufferPointer(rebasing: bytes[22..<end]), as: UTF8.self)
            let time = TimeOfDayValue(hour: secondOfDay / 3600, minute: secondOfDay / 60 % 60, second: secondOfDay % 60, fraction: fraction)
            return DateTimeOffsetValue(date: DateValue(daysSinceEpoch: days), time: time, offsetMinutes: offset, usesZ: usesZ)
        }
    }

    static func decodeDuration(_ bytes: [UInt8]) -> DurationValue? {
        guard bytes.count == 16 else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        for k in 0..<8 {
            high = high << 8 | UInt64(bytes[k])
            low = low << 8 | UInt64(bytes[8 + k])
        }
        var whole = Int64(bitPattern: high ^ (1 << 63))
        var picos = Int64(low)
        guard picos < 1_000_000_000_000 else { return nil }
        let negative = whole < 0
        if negative && picos > 0 {
            whole += 1
            picos = 1_000_000_000_000 - picos
        }
        let magnitude = whole.magnitude
        let fraction = String(pad12(picos).reversed().drop { $0 == "0" }.reversed())
        return DurationValue(negative: negative, days: Int(magnitude / 86_400), hours: Int(magnitude / 3600 % 24),
                             minutes: Int(magnitude / 60 % 60), seconds: Int(magnitude % 60), fraction: fraction)
    }
}

// MARK: Stored forms as payload text

extension ValueStorage {
    /// A stored Decimal read in place, for writing its plain notation without a
    /// ``DecimalValue``: the text is the one `decode` then `DecimalValue.description` give.
    /// Only the canonical stored form is taken (nil otherwise, and the general decoding reads it).
    struct StoredDecimal {
        let blob: UnsafeBufferPointer<UInt8>
        let negative: Bool
        /// Where the significant digits are in `blob` (complemented when negative).
        let digits: Range<Int>
        /// value = digits × 10^exponent
        let exponent: Int

        init?(_ blob: UnsafeBufferPointer<UInt8>) {
            self.blob = blob
            guard let sign = blob.first else { return nil }
            if sign == 2 {
                guard blob.count == 1 else { return nil }
                negative = false
                digits = 0..<0
                exponent = 0
                return
            }
            guard sign == 1 || sign == 3, blob.count >= 6 else { return nil }
            negative = sign == 1
            let end = negative ? blob.count - 1 : blob.count
            guard end > 5, !negative || blob[end] == 0xFF else { return nil }
            for index in 5..<end {
                let digit = negative ? 153 &- blob[index] : blob[index]
                guard digit >= UInt8(ascii: "0"), digit <= UInt8(ascii: "9") else { return nil }
            }
            // No leading zero (the stored form never has one).
            guard (negative ? 153 &- blob[5] : blob[5]) != UInt8(ascii: "0") else { return nil }
            let biased = Int64(blob[1]) << 24 | Int64(blob[2]) << 16 | Int64(blob[3]) << 8 | Int64(blob[4])
            let e = negative ? Int64(Int32.max) + 1 - biased : biased - Int64(Int32.max) - 1
            guard abs(e) <= 1_000 else { return nil }
            digits = 5..<end
            exponent = Int(e) - (end - 5)
        }

        /// Appends the plain notation (`-12.5`, `0.001`, `1200`).
        func append(to bytes: inout [UInt8]) {
            guard !digits.isEmpty else {
                bytes.append(UInt8(ascii: "0"))
                return
            }
            if negative { bytes.append(UInt8(ascii: "-")) }
            let count = digits.count
            func appendDigits(_ range: Range<Int>) {
                for index in range { bytes.append(negative ? 153 &- blob[index] : blob[index]) }
            }
            if exponent >= 0 {
                appendDigits(digits)
                for _ in 0..<exponent { bytes.append(UInt8(ascii: "0")) }
                return
            }
            let scale = -exponent
            if count > scale {
                appendDigits(digits.lowerBound..<(digits.upperBound - scale))
                bytes.append(UInt8(ascii: "."))
                appendDigits((digits.upperBound - scale)..<digits.upperBound)
            } else {
                bytes.append(UInt8(ascii: "0"))
                bytes.append(UInt8(ascii: "."))
                for _ in 0..<(scale - count) { bytes.append(UInt8(ascii: "0")) }
                appendDigits(digits)
            }
        }
    }

    /// Whether a stored DateTimeOffset or DateTime can be written as payload text by
    /// ``appendPlainInstant(_:to:)``: a valid stored value of a year from 0 to 9999 whose
    /// offset is none, `Z` or `+00:00` (its local time is the stored UTC time). Others go
    /// through `decode`.
    static func isPlainInstant(_ text: UnsafeBufferPointer<UInt8>) -> Bool {
        switch text.count {
        case instantLength: break
        case instantLength + 1: guard text[instantLength] == UInt8(ascii: "Z") else { return false }
        case instantLength + 6:
            guard text[instantLength] == UInt8(ascii: "+"), text[instantLength + 1] == UInt8(ascii: "0"), text[instantLength + 2] == UInt8(ascii: "0"),
                  text[instantLength + 3] == UInt8(ascii: ":"), text[instantLength + 4] == UInt8(ascii: "0"),
                  text[instantLength + 5] == UInt8(ascii: "0") else { return false }
        default: return false
        }
        guard text[6] == UInt8(ascii: "-"), text[9] == UInt8(ascii: "-"), text[12] == UInt8(ascii: "T"),
              text[15] == UInt8(ascii: ":"), text[18] == UInt8(ascii: ":"), text[21] == UInt8(ascii: "."),
              let biasedYear = number(text, 0, 6), let month = number(text, 7, 2), let day = number(text, 10, 2),
              let hour = number(text, 13, 2), let minute = number(text, 16, 2), let second = number(text, 19, 2),
              number(text, 22, 12) != nil else { return false }
        let year = biasedYear - 100_000
        guard (0...9999).contains(year), (1...12).contains(month), hour < 24, minute < 60, second < 60 else { return false }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let days = month == 2 ? (leap ? 29 : 28) : (month == 4 || month == 6 || month == 9 || month == 11 ? 30 : 31)
        return (1...days).contains(day)
    }

    /// Appends the payload text of a stored value that ``isPlainInstant(_:)`` accepted: the
    /// text `decode` then `DateTimeOffsetValue` write (`2024-01-31T08:00:00.5Z`).
    static func appendPlainInstant(_ text: UnsafeBufferPointer<UInt8>, to bytes: inout [UInt8]) {
        // `YYYY-MM-DDTHH:MM:SS` (the year without its bias of 100000).
        for index in 2..<21 { bytes.append(text[index]) }
        var end = instantLength
        while end > 22, text[end - 1] == UInt8(ascii: "0") { end -= 1 }
        if end > 22 {
            for index in 21..<end { bytes.append(text[index]) }
        }
        for index in instantLength..<text.count { bytes.append(text[index]) }
    }
}
