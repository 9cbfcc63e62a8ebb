import Foundation
import Testing
import ODataCore
@testable import ODataStore

@Suite struct ValueStorageTests {
    static func randomDecimal(_ g: inout some RandomNumberGenerator) -> DecimalValue {
        let digits = (0..<Int.random(in: 1...30, using: &g)).map { _ in String(Int.random(in: 0...9, using: &g)) }.joined()
        let scale = Int.random(in: 0...12, using: &g)
        let sign = Bool.random(using: &g) ? "-" : ""
        var text = digits
        if scale > 0 && scale < digits.count { text.insert(".", at: text.index(text.endIndex, offsetBy: -scale)) }
        return DecimalValue(sign + text) ?? DecimalValue(0)
    }

    static func randomDateTimeOffset(_ g: inout some RandomNumberGenerator) -> DateTimeOffsetValue {
        DateTimeOffsetValue(date: DateValue(year: Int.random(in: -50...9999, using: &g), month: Int.random(in: 1...12, using: &g), day: Int.random(in: 1...28, using: &g)),
                            time: TimeOfDayValue(hour: Int.random(in: 0...23, using: &g), minute: Int.random(in: 0...59, using: &g), second: Int.random(in: 0...59, using: &g),
                                                 fraction: Bool.random(using: &g) ? String(Int.random(in: 1...999, using: &g)) : ""),
                            offsetMinutes: Int.random(in: -14...14, using: &g) * 60 + [0, 30, 45].randomElement(using: &g)!, usesZ: false)
    }

    static func randomDuration(_ g: inout some RandomNumberGenerator) -> DurationValue {
        DurationValue(negative: Bool.random(using: &g), days: Int.random(in: 0...400_000, using: &g), hours: Int.random(in: 0...23, using: &g),
                      minutes: Int.random(in: 0...59, using: &g), seconds: Int.random(in: 0...59, using: &g),
                      fraction: Bool.random(using: &g) ? String(Int.random(in: 1...999_999, using: &g)) : "")
    }

    /// Stores the values, reads them back in SQLite's ORDER BY, and checks order and equality.
    func checkOrder(_ values: [PrimitiveValue], type: PrimitiveType, by less: (PrimitiveValue, PrimitiveValue) -> Bool) throws {
        let dir = TemporaryDirectory()
        let db = try Connection(path: dir.path("v.sqlite"), options: .init(key: "k"))
        try db.execute("CREATE TABLE v (x \(ValueStorage.columnType(type)))")
        for value in values { try db.execute("INSERT INTO v VALUES (?)", [ValueStorage.encode(value)]) }
        let stored = try db.query("SELECT x FROM v ORDER BY x").map { row in try ValueStorage.decode(row[0], as: type) }
        let expected = values.sorted(by: less)
        #expect(stored.count == values.count)
        for (a, b) in zip(stored, expected) {
            #expect(a == b, "\(type.rawValue): \(String(describing: a)) vs \(b)")
            if a != b { break }
        }
    }

    @Test func decimalsAreExactAndNumericallyOrdered() throws {
        var g = SystemRandomNumberGenerator()
        var values = (0..<400).map { _ in PrimitiveValue.decimal(Self.randomDecimal(&g)) }
        values += ["0", "-0.001", "0.001", "1", "10", "9.99999999999999999999", "-1e30", "1e-20", "123456789012345678901234567890"].map { .decimal(DecimalValue($0)!) }
        try checkOrder(values, type: .decimal) { a, b in
            guard case .decimal(let x) = a, case .decimal(let y) = b else { return false }
            return x < y
        }
        // Canonical storage: 1.50 and 1.5 are the same stored value.
        #expect(ValueStorage.encode(.decimal(DecimalValue("1.50")!)) == ValueStorage.encode(.decimal(DecimalValue("1.5")!)))
    }

    /// The stored forms are part of the file format: stores written by earlier versions must
    /// still read and compare the same way.
    /// The row path writes stored decimals and dates as text without decoding them: the text
    /// must be what decoding and formatting give, and damaged stored forms must go the
    /// general way (or give the same text), never crash.
    @Test func storedDecimalsAndInstantsWrittenInPlaceMatchTheirDecodedText() throws {
        var g = SystemRandomNumberGenerator()
        var decimals = (0..<2_000).map { _ in Self.randomDecimal(&g) }
        decimals += ["0", "0.00", "1200", "-1200", "0.001", "-0.001", "1e40", "-123.4500"].compactMap(DecimalValue.init)
        for decimal in decimals {
            guard case .blob(let blob) = ValueStorage.encode(.decimal(decimal)),
                  case .decimal(let decoded)? = try ValueStorage.decode(.blob(blob), as: .decimal) else {
                Issue.record("\(decimal)")
                continue
            }
            let text = blob.withUnsafeBufferPointer { buffer -> String? in
                guard let stored = ValueStorage.StoredDecimal(buffer) else { return nil }
                var bytes: [UInt8] = []
                stored.append(to: &bytes)
                return String(decoding: bytes, as: UTF8.self)
            }
            #expect(text == decoded.description, "\(decimal)")
        }
        var instants = (0..<2_000).map { _ in Self.randomDateTimeOffset(&g) }
        instants += (0..<500).map { _ in
            var value = Self.randomDateTimeOffset(&g)
            value.offsetMinutes = [0, nil].randomElement(using: &g) ?? 0
            value.usesZ = Bool.random(using: &g)
            return value
        }
        var plain = 0
        for instant in instants {
            guard case .text(let text) = ValueStorage.encode(.dateTimeOffset(instant)),
                  case .dateTimeOffset(let decoded)? = try ValueStorage.decode(.text(text), as: .dateTimeOffset) else {
                Issue.record("\(instant)")
                continue
            }
            var expected: [UInt8] = []
            decoded.append(to: &expected)
            var stored = Array(text.utf8)
            let written = stored.withUnsafeMutableBufferPointer { buffer -> [UInt8]? in
                let text = UnsafeBufferPointer(buffer)
                guard ValueStorage.isPlainInstant(text) else { return nil }
                var bytes: [UInt8] = []
                ValueStorage.appendPlainInstant(text, to: &bytes)
                return bytes
            }
            if let written {
                plain += 1
                #expect(written == expected, "\(text)")
            } else {
                #expect(instant.offsetMinutes != 0 && instant.offsetMinutes != nil || instant.date.year < 0, "\(text) should be written in place")
            }
            // A damaged byte: in place only when decoding gives the same text.
            stored[Int.random(in: 0..<stored.count, using: &g)] = UInt8.random(in: 0...255, using: &g)
            let damaged = stored.withUnsafeBufferPointer { text -> [UInt8]? in
                guard ValueStorage.isPlainInstant(text) else { return nil }
                var bytes: [UInt8] = []
                ValueStorage.appendPlainInstant(text, to: &bytes)
                return bytes
            }
            if let damaged {
                var again: [UInt8] = []
                guard let text = String(validating: stored, as: UTF8.self),
                      case .dateTimeOffset(let decoded)? = try? ValueStorage.decode(.text(text), as: .dateTimeOffset) else {
                    Issue.record("a damaged instant was written in place but does not decode")
                    continue
                }
                decoded.append(to: &again)
                #expect(damaged == again)
            }
        }
        #expect(plain > 400)
        for _ in 0..<3_000 {
            let blob = (0..<Int.random(in: 0...12, using: &g)).map { _ in [1, 2, 3, 0xFF, 48, 57, 100, 105, 0x80, 0].randomElement(using: &g) ?? 0 } as [UInt8]
            blob.withUnsafeBufferPointer { buffer in
                guard let stored = ValueStorage.StoredDecimal(buffer) else { return }
                var bytes: [UInt8] = []
                stored.append(to: &bytes)
                let decoded = try? ValueStorage.decode(.blob(blob), as: .decimal)
                guard case .decimal(let value)? = decoded else {
                    Issue.record("\(blob) was written in place but does not decode")
                    return
                }
                #expect(String(decoding: bytes, as: UTF8.self) == value.description, "\(blob)")
            }
        }
    }

    /// The stored instant, written from the value's own fields when it is already UTC, against
    /// one computed here from the instant (seconds since the epoch) for every kind of value.
    @Test func storedInstantsMatchTheirSecondsSinceTheEpoch() throws {
        var g = SystemRandomNumberGenerator()
        var values = (0..<3_000).map { _ in Self.randomDateTimeOffset(&g) }
        for index in values.indices where index % 2 == 0 {
            values[index].offsetMinutes = [0, nil, 0, 60].randomElement(using: &g) ?? 0
            values[index].usesZ = Bool.random(using: &g)
        }
        // Fields out of their usual range, which only the arithmetic normalises.
        values += [
            DateTimeOffsetValue(date: DateValue(year: 2023, month: 2, day: 29), time: TimeOfDayValue(hour: 1, minute: 2, second: 3, fraction: ""), offsetMinutes: 0),
            DateTimeOffsetValue(date: DateValue(year: 2024, month: 12, day: 31), time: TimeOfDayValue(hour: 23, minute: 59, second: 60, fraction: "5"), offsetMinutes: nil),
            DateTimeOffsetValue(date: DateValue(year: -1, month: 1, day: 1), time: TimeOfDayValue(hour: 0, minute: 0, second: 0, fraction: "000000000001"), offsetMinutes: 0),
            DateTimeOffsetValue(date: DateValue(year: 9999, month: 12, day: 31), time: TimeOfDayValue(hour: 23, minute: 59, second: 59, fraction: "9999999"), offsetMinutes: -840),
            // Years wider than six digits once biased, and an offset of more than 99 hours.
            DateTimeOffsetValue(date: DateValue(year: 950_000, month: 6, day: 1), time: TimeOfDayValue(hour: 12, minute: 0), offsetMinutes: 0),
            DateTimeOffsetValue(date: DateValue(year: -150_000, month: 6, day: 1), time: TimeOfDayValue(hour: 12, minute: 0), offsetMinutes: 90),
            DateTimeOffsetValue(date: DateValue(year: 2024, month: 6, day: 1), time: TimeOfDayValue(hour: 12, minute: 0), offsetMinutes: -6_001),
        ]
        for value in values {
            let (seconds, picos) = value.instant
            let days = Int((seconds >= 0 ? seconds : seconds - 86_399) / 86_400)
            let second = Int(seconds - Int64(days) * 86_400)
            let date = DateValue(daysSinceEpoch: days)
            let expected = String(format: "%06d-%02d-%02dT%02d:%02d:%02d.%012lld", date.year + 100_000, date.month, date.day,
                                  second / 3600, second / 60 % 60, second % 60, picos)
            #expect(ValueStorage.instantText(value) == expected, "\(value)")
            let offset = ValueStorage.offsetText(value.offsetMinutes, usesZ: value.usesZ)
            #expect(ValueStorage.instantAndOffsetText(value) == expected + offset, "\(value)")
        }
    }

    /// Digits written into an array and into a slot, against `String(format:)`; a slot too
    /// small for a number takes none of it and says so.
    @Test func digitsAreWrittenAsFormattingWritesThem() {
        let numbers = [0, 1, 9, 10, 99, 100, 12_345, -1, -9, -10, -12_345, Int.max, Int.min, Int.max - 1, Int.min + 1]
        for number in numbers {
            for width in 0...24 {
                var bytes: [UInt8] = []
                Digits.append(number, width: width, to: &bytes)
                let expected = number < 0
                    ? "-" + String(repeating: "0", count: max(0, width - 1 - String(number.magnitude).count)) + String(number.magnitude)
                    : String(repeating: "0", count: max(0, width - String(number).count)) + String(number)
                #expect(String(decoding: bytes, as: UTF8.self) == expected, "\(number) width \(width)")
                withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 30) { buffer in
                    guard let base = buffer.baseAddress else { return }
                    var slot = ByteSlot(base: base, capacity: 30)
                    slot.append(UInt8(ascii: "x"))
                    slot.appendDigits(number, width: width)
                    #expect(!slot.overflowed)
                    #expect(String(decoding: slot.bytes, as: UTF8.self) == "x" + expected)
                    var small = ByteSlot(base: base, capacity: expected.utf8.count - 1)
                    small.appendDigits(number, width: width)
                    #expect(small.overflowed && small.count == 0, "\(number) width \(width)")
                }
            }
        }
        var unsigned: [UInt8] = []
        Digits.append(UInt.max, width: 22, to: &unsigned)
        #expect(String(decoding: unsigned, as: UTF8.self) == "00" + String(UInt.max))
    }

    @Test func storedFormsAreStable() throws {
        #expect(ValueStorage.encode(.decimal(DecimalValue("1.50")!)) == .blob([3, 0x80, 0, 0, 1, 49, 53]))
        #expect(ValueStorage.encode(.decimal(DecimalValue("-1.5")!)) == .blob([1, 0x7F, 0xFF, 0xFF, 0xFF, 104, 100, 0xFF]))
        #expect(ValueStorage.encode(.decimal(DecimalValue("0")!)) == .blob([2]))
        let offset = try Literal.parsePayloadValue("2012-09-03T01:30:00.25+02:00", as: .dateTimeOffset)
        #expect(ValueStorage.encode(offset) == .text("102012-09-02T23:30:00.250000000000+02:00"))
        let utc = try Literal.parsePayloadValue("-0044-03-15T12:00:00Z", as: .dateTimeOffset)
        #expect(ValueStorage.encode(utc) == .text("099956-03-15T12:00:00.000000000000Z"))
        #expect(ValueStorage.encode(.date(DateValue(year: 2024, month: 2, day: 29))) == .text("102024-02-29"))
        #expect(ValueStorage.encode(.timeOfDay(TimeOfDayValue(hour: 7, minute: 5, second: 3, fraction: "5"))) == .text("07:05:03.500000000000"))
        #expect(ValueStorage.encode(.guid(GuidValue("0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0")!)) == .text("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"))
        // And back, with the written offset and fraction.
        guard case .dateTimeOffset(let back)? = try ValueStorage.decode(.text("102012-09-02T23:30:00.250000000000+02:00"), as: .dateTimeOffset) else {
            Issue.record("not a DateTimeOffset")
            return
        }
        #expect(back.description == "2012-09-03T01:30:00.25+02:00")
        #expect(try ValueStorage.decode(.text("102024-02-29"), as: .date) == .date(DateValue(year: 2024, month: 2, day: 29)))
        // Damaged text is an error, not a made-up value.
        for damaged in ["102012-09-02T23:30:00.2500000000", "102012-13-02T23:30:00.250000000000", "102012-09-02T23:30:00.25000000000x",
                        "102012-09-02T23:30:00.250000000000+2:00", "102012-09-02 23:30:00.250000000000Z", "102012-09-02T24:00:00.000000000000"] {
            #expect(throws: DatabaseError.self, "\(damaged)") { try ValueStorage.decode(.text(damaged), as: .dateTimeOffset) }
        }
        #expect(GuidValue("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fg") == nil)
        #expect(GuidValue("0f1e2d3c-4b5a-6978-8796+a5b4c3d2e1f0") == nil)
    }

    @Test func dateTimeOffsetsSortByInstantAndKeepTheirOffset() throws {
        var g = SystemRandomNumberGenerator()
        let values = (0..<400).map { _ in PrimitiveValue.dateTimeOffset(Self.randomDateTimeOffset(&g)) }
        try checkOrder(values, type: .dateTimeOffset) { a, b in
            guard case .dateTimeOffset(let x) = a, case .dateTimeOffset(let y) = b else { return false }
            return x < y
        }
        let value = try Literal.parsePayloadValue("2012-09-03T12:00:00.25+02:00", as: .dateTimeOffset)
        let decoded = try ValueStorage.decode(ValueStorage.encode(value), as: .dateTimeOffset)
        guard case .dateTimeOffset(let back)? = decoded else {
            Issue.record("not a DateTimeOffset")
            return
        }
        #expect(back.description == "2012-09-03T12:00:00.25+02:00")
        // Same instant, other offset: equal by instant key.
        guard case .dateTimeOffset(let utc) = try Literal.parsePayloadValue("2012-09-03T10:00:00.25Z", as: .dateTimeOffset) else { return }
        #expect(ValueStorage.instantKey(back) == ValueStorage.instantKey(utc))
    }

    @Test func durationsDatesTimesAndOthersRoundTripInOrder() throws {
        var g = SystemRandomNumberGenerator()
        try checkOrder((0..<300).map { _ in .duration(Self.randomDuration(&g)) }, type: .duration) { a, b in
            guard case .duration(let x) = a, case .duration(let y) = b else { return false }
            return x < y
        }
        try checkOrder((0..<300).map { _ in .date(DateValue(year: Int.random(in: -500...9999, using: &g), month: Int.random(in: 1...12, using: &g), day: Int.random(in: 1...28, using: &g))) },
                       type: .date) { a, b in
            guard case .date(let x) = a, case .date(let y) = b else { return false }
            return x < y
        }
        try checkOrder((0..<300).map { _ in .timeOfDay(TimeOfDayValue(hour: Int.random(in: 0...23, using: &g), minute: Int.random(in: 0...59, using: &g),
                                                                      second: Int.random(in: 0...59, using: &g), fraction: String(Int.random(in: 1...9, using: &g)))) },
                       type: .timeOfDay) { a, b in
            guard case .timeOfDay(let x) = a, case .timeOfDay(let y) = b else { return false }
            return x < y
        }
        let samples: [PrimitiveValue] = [
            .boolean(true), .byte(255), .sbyte(-128), .int16(-32768), .int32(.max), .int64(.min), .double(-2.5e-300), .single(1.5),
            .string("naïve 'quoted' \u{1F600}"), .guid(GuidValue("01234567-89ab-cdef-0123-456789abcdef")!), .binary(Data([0, 255, 7])),
            .time(DurationValue(hours: 13, minutes: 20)), .dateTime(DateTimeOffsetValue(date: DateValue(year: 2000, month: 1, day: 2), time: TimeOfDayValue(hour: 3, minute: 4), offsetMinutes: nil)),
        ]
        for value in samples {
            #expect(try ValueStorage.decode(ValueStorage.encode(value), as: value.type) == value, "\(value)")
        }
        if case .primitive(let point) = try Literal.parse("geography'SRID=4326;Point(1 2)'") {
            #expect(try ValueStorage.decode(ValueStorage.encode(point), as: .geographyPoint) == point)
        }
        #expect(throws: DatabaseError.self) { try ValueStorage.decode(.text("not a date"), as: .date) }
        #expect(throws: DatabaseError.self) { try ValueStorage.decode(.blob([9, 9]), as: .decimal) }
    }
}
