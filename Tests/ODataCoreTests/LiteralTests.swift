import Foundation
import Testing
@testable import ODataCore

@Suite struct LiteralTests {
    static let v4Samples: [(String, PrimitiveValue)] = [
        ("true", .boolean(true)),
        ("42", .int32(42)),
        ("-9223372036854775808", .int64(.min)),
        ("12.50", .decimal(DecimalValue("12.50")!)),
        ("1.5E0", .double(1.5)),
        ("'it''s'", .string("it's")),
        ("01234567-89ab-cdef-0123-456789abcdef", .guid(GuidValue("01234567-89ab-cdef-0123-456789abcdef")!)),
        ("2012-09-03", .date(DateValue(year: 2012, month: 9, day: 3))),
        ("13:20:00.5", .timeOfDay(TimeOfDayValue(hour: 13, minute: 20, second: 0, fraction: "5"))),
        ("2012-09-03T13:52:10.123+02:00", .dateTimeOffset(DateTimeOffsetValue(date: DateValue(year: 2012, month: 9, day: 3),
                                                                               time: TimeOfDayValue(hour: 13, minute: 52, second: 10, fraction: "123"),
                                                                               offsetMinutes: 120, usesZ: false))),
        ("duration'P1DT2H3M4.5S'", .duration(DurationValue(days: 1, hours: 2, minutes: 3, seconds: 4, fraction: "5"))),
        ("binary'Zm9vYmFy'", .binary(Data("foobar".utf8))),
    ]

    /// Malformed dates, times and durations say what is wrong, in `$filter`, in keys and in
    /// V2's prefixed forms (issue 34, item 8); good ones still parse.
    @Test func malformedTemporalLiteralsSayWhatIsWrong() throws {
        func message(_ url: String, _ version: ODataVersion = .v401) -> String {
            do {
                _ = try URLParser(version: version).parse(url)
                return ""
            } catch {
                return String(describing: error)
            }
        }
        let cases: [(String, ODataVersion, String)] = [
            ("People?$filter=Birthday eq 2023-13-01", .v401, "month 13 does not exist: 2023-13-01 is not a date"),
            ("People?$filter=Birthday eq 2023-02-30", .v401, "February 2023 has 28 days"),
            ("People?$filter=Birthday eq 2023-00-10", .v401, "month 0 does not exist"),
            ("People?$filter=Birthday eq 2023-01-32", .v401, "day 32 does not exist"),
            ("People?$filter=At eq 2023-02-01T25:00:00Z", .v401, "hour 25 does not exist: 2023-02-01T25:00:00 is not a date-time"),
            ("People?$filter=At eq 2023-02-01T10:61Z", .v401, "minute 61 does not exist"),
            ("People?$filter=D eq duration'P1X'", .v401, "'P1X' is not a duration"),
            ("Orders(2023-13-01)", .v401, "month 13 does not exist"),
            ("Orders(OrderDate=2023-02-30)", .v401, "February 2023 has 28 days"),
            ("F(d=2023-13-01)", .v401, "month 13 does not exist"),
            ("Orders(datetime'2023-13-01T00:00')", .v2, "month 13 does not exist"),
            ("Orders(time'PT25X')", .v2, "'PT25X' is not a duration"),
            ("Orders?$filter=At eq datetime'2023-01-01T24:30'", .v2, "hour 24 does not exist"),
            // Issue 55, item 8: malformed shapes name the form, not "Unexpected text after the expression".
            ("People?$filter=Birthday eq 2023-1-01", .v401, "2023-1-01 is not a date: the form is YYYY-MM-DD"),
            ("People?$filter=Birthday eq 2023-01-01Z", .v401, "2023-01-01Z is not a date"),
            ("People?$filter=At eq 2023-02-01T10:00:00", .v401, "is not a date-time: the form is YYYY-MM-DDThh:mm"),
            ("People?$filter=At eq 2023-02-01T10:00:00.Z", .v401, "2023-02-01T10:00:00.Z is not a date-time"),
            ("People?$filter=At eq 2023-02-01T", .v401, "2023-02-01T is not a date-time"),
            ("Orders(2023-1-01)", .v401, "2023-1-01 is not a date"),
            ("Orders?$filter=Amount eq 2023-1-01", .v2, "2023-1-01 is not a date"),
        ]
        for (url, version, expected) in cases {
            let text = message(url, version)
            #expect(text.contains(expected), "\(url): \(text)")
        }
        // A number before a time in a `case` branch is no malformed time (the reviewer's case).
        #expect(message("People?$filter=case(Age eq 42:10:00:00,true:12:00:00) eq T") == "")
        for good in ["People?$filter=Birthday eq 2024-02-29", "People?$filter=At eq 2023-02-01T23:59:60Z",
                     "People?$filter=D eq duration'P1DT2H'", "Orders(2023-12-31)"] {
            #expect(message(good) == "", "\(good)")
        }
        #expect(message("Orders(datetime'2023-12-31T23:00')", .v2) == "")
    }

    @Test func v4LiteralsParseToTheirValues() throws {
        for (text, expected) in Self.v4Samples {
            let value = try Literal.parse(text)
            #expect(value == .primitive(expected), "\(text)")
        }
    }

    @Test func v4LiteralsRoundTrip() throws {
        for (_, value) in Self.v4Samples {
            let text = Literal.format(.primitive(value))
            #expect(try Literal.parse(text, as: value.type) == .primitive(value), "\(text)")
        }
    }

    @Test func v2LiteralsParseAndRoundTrip() throws {
        let samples: [(String, PrimitiveValue)] = [
            ("datetime'2000-12-12T12:00'", .dateTime(DateTimeOffsetValue(date: DateValue(year: 2000, month: 12, day: 12),
                                                                           time: TimeOfDayValue(hour: 12, minute: 0, hasSeconds: false), offsetMinutes: nil))),
            ("datetimeoffset'2002-10-10T17:00:00Z'", .dateTimeOffset(DateTimeOffsetValue(date: DateValue(year: 2002, month: 10, day: 10),
                                                                                           time: TimeOfDayValue(hour: 17, minute: 0, second: 0), offsetMinutes: 0))),
            ("guid'12345678-aaaa-bbbb-cccc-ddddeeeeffff'", .guid(GuidValue("12345678-aaaa-bbbb-cccc-ddddeeeeffff")!)),
            ("12M", .decimal(DecimalValue("12")!)),
            ("12.5m", .decimal(DecimalValue("12.5")!)),
            ("1L", .int64(1)),
            ("2.5d", .double(2.5)),
            ("2.5f", .single(2.5)),
            ("X'0aFF'", .binary(Data([0x0A, 0xFF]))),
            ("binary'0aff'", .binary(Data([0x0A, 0xFF]))),
            ("time'PT13H20M'", .time(DurationValue(hours: 13, minutes: 20))),
            ("'O''Neil'", .string("O'Neil")),
        ]
        for (text, expected) in samples {
            #expect(try Literal.parse(text, version: .v2) == .primitive(expected), "\(text)")
            let printed = Literal.format(.primitive(expected), version: .v2)
            #expect(try Literal.parse(printed, version: .v2, as: expected.type) == .primitive(expected), "\(printed)")
        }
    }

    @Test func enumAndSpatialLiterals() throws {
        #expect(try Literal.parse("Ns.Color'Red'") == .enumeration(EnumValue(typeName: "Ns.Color", members: ["Red"])))
        #expect(try Literal.parse("Ns.Color'Red,Blue'") == .enumeration(EnumValue(typeName: "Ns.Color", members: ["Red", "Blue"])))
        guard case .primitive(.spatial(let point)) = try Literal.parse("geography'SRID=4326;Point(-122.1 47.6)'") else {
            Issue.record("not spatial")
            return
        }
        #expect(point.kind == "Point")
        #expect(point.srid == 4326)
        #expect(point.point == SpatialValue.Point(x: -122.1, y: 47.6))
        #expect(Literal.format(.primitive(.spatial(point))) == "geography'SRID=4326;Point(-122.1 47.6)'")
        guard case .primitive(.spatial(let line)) = try Literal.parse("geometry'LineString(1 2,3 4)'") else {
            Issue.record("not spatial")
            return
        }
        #expect(line.kind == "LineString")
        #expect(line.point == nil)
    }

    @Test func decimalIsExactAndNumericallyOrdered() throws {
        let big = try #require(DecimalValue("123456789012345678901234567890.123456789"))
        #expect(big.description == "123456789012345678901234567890.123456789")
        #expect(DecimalValue("1.50") == DecimalValue("1.5"))
        #expect(DecimalValue("1.50")?.description == "1.50")
        #expect(DecimalValue("-2")! < DecimalValue("-1.5")!)
        #expect(DecimalValue("0.1")! < DecimalValue("0.10000000000000000001")!)
        #expect(DecimalValue("9")! < DecimalValue("10")!)
        #expect(DecimalValue("1e3") == DecimalValue("1000"))
        #expect(DecimalValue("-0") == DecimalValue("0"))
        // 0.1 + 0.2 style values survive a literal round trip exactly.
        let parsed = try Literal.parse("0.30000000000000000000000001")
        #expect(Literal.format(parsed) == "0.30000000000000000000000001")
    }

    @Test func dateTimeOffsetComparesByInstant() throws {
        let a = try Literal.parsePayloadValue("2012-09-03T12:00:00+02:00", as: .dateTimeOffset)
        let b = try Literal.parsePayloadValue("2012-09-03T10:00:00Z", as: .dateTimeOffset)
        let c = try Literal.parsePayloadValue("2012-09-03T10:00:01Z", as: .dateTimeOffset)
        guard case .dateTimeOffset(let x) = a, case .dateTimeOffset(let y) = b, case .dateTimeOffset(let z) = c else {
            Issue.record("wrong types")
            return
        }
        #expect(x == y)
        #expect(x.description == "2012-09-03T12:00:00+02:00")
        #expect(y < z)
        #expect(DateValue(daysSinceEpoch: DateValue(year: -44, month: 3, day: 15).daysSinceEpoch) == DateValue(year: -44, month: 3, day: 15))
    }

    @Test func invalidLiteralsAreRejectedWithAPosition() {
        for text in ["'unterminated", "2012-13-01", "25:00", "12X", "binary'!!'", "duration'P'", "Ns.Color'Red Blue'", "geography'Point(1)'"] {
            #expect(throws: SyntaxError.self, "\(text)") { try Literal.parse(text) }
        }
        do {
            _ = try Literal.parse("42abc")
            Issue.record("expected an error")
        } catch {
            #expect(error.code == .invalidLiteral)
        }
        #expect(throws: SyntaxError.self) { try Literal.parse("300", as: .byte) }
        #expect(throws: SyntaxError.self) { try Literal.parsePayloadValue("tRUe", as: .boolean) }
    }

    @Test func conversionsToDeclaredTypes() throws {
        #expect(try Literal.parse("12", as: .int64) == .primitive(.int64(12)))
        #expect(try Literal.parse("12", as: .decimal) == .primitive(.decimal(DecimalValue("12")!)))
        #expect(try Literal.parse("1.5", as: .double) == .primitive(.double(1.5)))
        #expect(try Literal.parse("'P1D'", as: .duration) == .primitive(.duration(DurationValue(days: 1))))
        #expect(try Literal.parse("null", as: .string) == .null)
    }

    /// GUIDs, dates and times are formatted byte by byte (not through Foundation): the texts must
    /// be the canonical ones.
    @Test func guidsAndTemporalValuesHaveTheirCanonicalText() throws {
        let guid = try #require(GuidValue("01234567-89AB-cdef-0123-456789abcdef"))
        #expect(guid.description == "01234567-89ab-cdef-0123-456789abcdef")
        #expect(GuidValue("01234567-89ab-cdef-0123-456789abcde") == nil)
        #expect(GuidValue("01234567_89ab-cdef-0123-456789abcdef") == nil)
        let randoms = (0..<200).map { _ in GuidValue.random().description }
        #expect(Set(randoms).count == 200)
        for text in randoms {
            let bytes = Array(text.utf8)
            #expect(bytes.count == 36 && bytes[14] == UInt8(ascii: "4") && "89ab".utf8.contains(bytes[19]), "\(text)")
            #expect(GuidValue(text)?.description == text)
        }
        #expect(DateValue(year: -44, month: 3, day: 15).description == "-0044-03-15")
        #expect(DateValue(year: 12345, month: 12, day: 31).description == "12345-12-31")
        #expect(TimeOfDayValue(hour: 7, minute: 5, second: 0, fraction: "05").description == "07:05:00.05")
        #expect(TimeOfDayValue(hour: 23, minute: 59, second: 0, hasSeconds: false).description == "23:59")
        let offset = DateTimeOffsetValue(date: DateValue(year: 2024, month: 2, day: 29), time: TimeOfDayValue(hour: 1, minute: 2, second: 3),
                                         offsetMinutes: -330, usesZ: false)
        #expect(offset.description == "2024-02-29T01:02:03-05:30")
        #expect(TimeOfDayValue(hour: 0, minute: 0, second: 1, fraction: "5").picosecondsSinceMidnight == 1_500_000_000_000)
        #expect(DurationValue(seconds: 2, fraction: "000000000001").totalPicoseconds.picos == 1)
    }
}
