// Byte-level scanners for the primitive value forms of OData ABNF §"Primitive literals".
// Each takes the bytes and a start index and returns the value with the index after it, or nil
// when the form does not match there. They never read past `bytes.endIndex`.

extension Literal {
    static func digits(_ b: [UInt8], _ i: Int, min: Int, max: Int) -> (Int, Int)? {
        var value = 0
        var j = i
        while j < b.count, j - i < max, isDigit(b[j]) {
            value = value &* 10 &+ Int(b[j] - 48)
            j += 1
        }
        return j - i >= min ? (value, j) : nil
    }

    /// `year "-" month "-" day` with ABNF's ranges, for a day that exists in the calendar
    /// (`checkCalendar` false: any day 01–31, for diagnostics).
    static func scanDate(_ b: [UInt8], _ start: Int, checkCalendar: Bool = true) -> (DateValue, Int)? {
        var i = start
        var negative = false
        if i < b.count, b[i] == UInt8(ascii: "-") {
            negative = true
            i += 1
        }
        // year = "0" 3DIGIT / oneToNine 3*DIGIT
        guard i < b.count, isDigit(b[i]) else { return nil }
        let yearStart = i
        guard let (year, afterYear) = digits(b, i, min: 4, max: 12) else { return nil }
        if b[yearStart] == UInt8(ascii: "0") && afterYear - yearStart != 4 { return nil }
        i = afterYear
        guard i < b.count, b[i] == UInt8(ascii: "-") else { return nil }
        guard let (month, afterMonth) = digits(b, i + 1, min: 2, max: 2), (1...12).contains(month) else { return nil }
        guard afterMonth < b.count, b[afterMonth] == UInt8(ascii: "-") else { return nil }
        guard let (day, afterDay) = digits(b, afterMonth + 1, min: 2, max: 2), (1...31).contains(day) else { return nil }
        let date = DateValue(year: negative ? -year : year, month: month, day: day)
        if checkCalendar, day > 28, date.calendarProblem != nil { return nil }
        return (date, afterDay)
    }

    /// Why a date or date-time at `start` (bare or inside a prefixed literal such as
    /// `datetime'…'`) is not a value although it has the right shape: a day the calendar does not
    /// have. Nil when there is no such problem there.
    package static func temporalProblem(_ b: [UInt8], _ start: Int) -> String? {
        var i = start
        // A prefixed form: skip the prefix and the quote.
        while i < b.count, isIdentifierByte(b[i]), !isDigit(b[i]) { i += 1 }
        if i > start {
            guard i < b.count, b[i] == UInt8(ascii: "'") else { return nil }
            let prefix = String(decoding: b[start..<i], as: UTF8.self).lowercased()
            i += 1
            // `duration'…'` (V4) and `time'…'` (V2) hold an ISO 8601 duration.
            if prefix == "duration" || prefix == "time", scanDuration(b, i) == nil {
                let end = b[i...].firstIndex(of: UInt8(ascii: "'")) ?? b.count
                let text = String(decoding: b[i..<min(end, i + 40)], as: UTF8.self)
                return "'\(text)' is not a duration (the form is P[n]DT[n]H[n]M[n]S, as in P1DT2H30M)"
            }
        }
        if let problem = dateShapeProblem(b, i) { return problem }
        if let (date, _) = scanDate(b, i, checkCalendar: false), let problem = date.calendarProblem {
            return "\(problem): \(date) is not a date"
        }
        return i == start ? malformedTemporal(b, start) : nil
    }

    /// A bare token that starts like a date (`2020-`) but is neither a date nor a date-time
    /// (`2020-1-01`, `2020-01-01T10:00` without an offset): which form it misses.
    static func malformedTemporal(_ b: [UInt8], _ start: Int) -> String? {
        var i = start
        if i < b.count, b[i] == UInt8(ascii: "-") { i += 1 }
        var digitsEnd = i
        while digitsEnd < b.count, isDigit(b[digitsEnd]) { digitsEnd += 1 }
        guard digitsEnd < b.count else { return nil }
        // Dates only: a number before `:` may be a `case` branch (`case(I32 eq 42:10:00:00,…)`).
        guard digitsEnd - i >= 4, b[digitsEnd] == UInt8(ascii: "-") else { return nil }
        // A valid date or date-time is no problem here, only perhaps of another type.
        if let (_, end) = scanDateTimeOffset(b, start), !continuesIdentifier(b, end) { return nil }
        if let (_, end) = scanDate(b, start), end == b.count || !continuesIdentifier(b, end) { return nil }
        var end = digitsEnd
        let allowed = Set("0123456789-+:.TtZz".utf8)
        while end < b.count, allowed.contains(b[end]), end - start < 40 { end += 1 }
        let text = String(decoding: b[start..<end], as: UTF8.self)
        if text.contains("T") || text.contains("t") {
            return "\(text) is not a date-time: the form is YYYY-MM-DDThh:mm[:ss[.fraction]] followed by Z or ±hh:mm"
        }
        return "\(text) is not a date: the form is YYYY-MM-DD, with a two-digit month and day"
    }

    /// A date of the shape `YYYY-MM-DD[Thh:mm[:ss]]` with a month, day, hour, minute or second
    /// that does not exist (`2023-13-01`, `2023-01-01T25:00Z`): which part, in words.
    static func dateShapeProblem(_ b: [UInt8], _ start: Int) -> String? {
        var i = start
        if i < b.count, b[i] == UInt8(ascii: "-") { i += 1 }
        guard let (_, afterYear) = digits(b, i, min: 4, max: 4), afterYear < b.count, b[afterYear] == UInt8(ascii: "-"),
              let (month, afterMonth) = digits(b, afterYear + 1, min: 2, max: 2), afterMonth < b.count,
              b[afterMonth] == UInt8(ascii: "-"), let (day, afterDay) = digits(b, afterMonth + 1, min: 2, max: 2),
              afterDay == b.count || !isDigit(b[afterDay]) else { return nil }
        var end = afterDay
        var problem: String?
        if !(1...12).contains(month) {
            problem = "month \(month) does not exist"
        } else if !(1...31).contains(day) {
            problem = "day \(day) does not exist"
        }
        var kind = "date"
        if end < b.count, b[end] == UInt8(ascii: "T") || b[end] == UInt8(ascii: "t"),
           let (hour, afterHour) = digits(b, end + 1, min: 2, max: 2), afterHour < b.count, b[afterHour] == UInt8(ascii: ":"),
           let (minute, afterMinute) = digits(b, afterHour + 1, min: 2, max: 2) {
            kind = "date-time"
            end = afterMinute
            var second = 0
            if end < b.count, b[end] == UInt8(ascii: ":"), let (s, afterSecond) = digits(b, end + 1, min: 2, max: 2) {
                second = s
                end = afterSecond
            }
            if problem == nil {
                if hour > 23 {
                    problem = "hour \(hour) does not exist"
                } else if minute > 59 {
                    problem = "minute \(minute) does not exist"
                } else if second > 60 {
                    problem = "second \(second) does not exist"
                }
            }
        }
        guard let problem else { return nil }
        return "\(problem): \(String(decoding: b[start..<end], as: UTF8.self)) is not a \(kind)"
    }

    /// `hour ":" minute [ ":" second [ "." fractionalSeconds ] ]`. Second 60 (a leap second) is
    /// accepted in times of day and date-times alike, as the ABNF's `second` rule says.
    static func scanTimeOfDay(_ b: [UInt8], _ start: Int) -> (TimeOfDayValue, Int)? {
        guard let (hour, afterHour) = digits(b, start, min: 2, max: 2), hour <= 23 else { return nil }
        guard afterHour < b.count, b[afterHour] == UInt8(ascii: ":") else { return nil }
        guard let (minute, afterMinute) = digits(b, afterHour + 1, min: 2, max: 2), minute <= 59 else { return nil }
        var i = afterMinute
        guard i < b.count, b[i] == UInt8(ascii: ":") else {
            return (TimeOfDayValue(hour: hour, minute: minute, hasSeconds: false), i)
        }
        guard let (second, afterSecond) = digits(b, i + 1, min: 2, max: 2),
              second <= 60 else { return nil }
        i = afterSecond
        var fraction = ""
        if i < b.count, b[i] == UInt8(ascii: ".") {
            var j = i + 1
            while j < b.count, isDigit(b[j]), j - i - 1 < 12 { j += 1 }
            guard j > i + 1 else { return nil }
            fraction = String(decoding: b[(i + 1)..<j], as: UTF8.self)
            i = j
        }
        return (TimeOfDayValue(hour: hour, minute: minute, second: second, fraction: fraction), i)
    }

    /// `date "T" timeOfDay ( "Z" / SIGN hour ":" minute )`; with `requireOffset` false the
    /// offset may be absent (V2 `DateTime`).
    static func scanDateTimeOffset(_ b: [UInt8], _ start: Int, requireOffset: Bool = true) -> (DateTimeOffsetValue, Int)? {
        guard let (date, afterDate) = scanDate(b, start) else { return nil }
        guard afterDate < b.count, b[afterDate] == UInt8(ascii: "T") || b[afterDate] == UInt8(ascii: "t") else { return nil }
        guard let (time, afterTime) = scanTimeOfDay(b, afterDate + 1) else { return nil }
        var i = afterTime
        if i < b.count, b[i] == UInt8(ascii: "Z") || b[i] == UInt8(ascii: "z") {
            return (DateTimeOffsetValue(date: date, time: time, offsetMinutes: 0, usesZ: true), i + 1)
        }
        if i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            let sign = b[i] == UInt8(ascii: "-") ? -1 : 1
            i += 1
            guard let (oh, afterOH) = digits(b, i, min: 2, max: 2), oh <= 23,
                  afterOH < b.count, b[afterOH] == UInt8(ascii: ":"),
                  let (om, afterOM) = digits(b, afterOH + 1, min: 2, max: 2), om <= 59 else { return nil }
            return (DateTimeOffsetValue(date: date, time: time, offsetMinutes: sign * (oh * 60 + om), usesZ: false), afterOM)
        }
        if requireOffset { return nil }
        return (DateTimeOffsetValue(date: date, time: time, offsetMinutes: nil, usesZ: false), i)
    }

    /// `[ "-" ] "P" [ n "D" ] [ "T" [ n "H" ] [ n "M" ] [ n [ "." n ] "S" ] ]`.
    static func scanDuration(_ b: [UInt8], _ start: Int) -> (DurationValue, Int)? {
        var i = start
        var value = DurationValue()
        if i < b.count, b[i] == UInt8(ascii: "-") {
            value.negative = true
            i += 1
        }
        guard i < b.count, b[i] == UInt8(ascii: "P") || b[i] == UInt8(ascii: "p") else { return nil }
        i += 1
        var any = false
        if let (days, afterDays) = digits(b, i, min: 1, max: 12), afterDays < b.count,
           b[afterDays] == UInt8(ascii: "D") || b[afterDays] == UInt8(ascii: "d") {
            value.days = days
            i = afterDays + 1
            any = true
        }
        if i < b.count, b[i] == UInt8(ascii: "T") || b[i] == UInt8(ascii: "t") {
            i += 1
            var anyTime = false
            if let (h, after) = digits(b, i, min: 1, max: 12), after < b.count, b[after] == UInt8(ascii: "H") || b[after] == UInt8(ascii: "h") {
                value.hours = h
                i = after + 1
                anyTime = true
            }
            if let (m, after) = digits(b, i, min: 1, max: 12), after < b.count, b[after] == UInt8(ascii: "M") || b[after] == UInt8(ascii: "m") {
                value.minutes = m
                i = after + 1
                anyTime = true
            }
            if let (s, after) = digits(b, i, min: 1, max: 12) {
                var j = after
                var fraction = ""
                if j < b.count, b[j] == UInt8(ascii: ".") {
                    var k = j + 1
                    while k < b.count, isDigit(b[k]) { k += 1 }
                    guard k > j + 1 else { return nil }
                    fraction = String(decoding: b[(j + 1)..<k], as: UTF8.self)
                    j = k
                }
                guard j < b.count, b[j] == UInt8(ascii: "S") || b[j] == UInt8(ascii: "s") else { return nil }
                value.seconds = s
                value.fraction = fraction
                i = j + 1
                anyTime = true
            }
            guard anyTime else { return nil }
            any = true
        }
        return any ? (value, i) : nil
    }

    /// A GUID: 8-4-4-4-12 hex digits.
    static func scanGuid(_ b: [UInt8], _ start: Int) -> (GuidValue, Int)? {
        guard start + 36 <= b.count else { return nil }
        let text = String(decoding: b[start..<(start + 36)], as: UTF8.self)
        guard let guid = GuidValue(text) else { return nil }
        return (guid, start + 36)
    }

    /// The shape of a number: sign, integer digits, fraction digits, exponent.
    struct NumberShape {
        var text: String
        var hasFraction: Bool
        var hasExponent: Bool
        var end: Int
    }

    /// `[ SIGN ] 1*DIGIT [ "." 1*DIGIT ] [ "e" [ SIGN ] 1*DIGIT ]`.
    static func scanNumber(_ b: [UInt8], _ start: Int, allowPlus: Bool = true) -> NumberShape? {
        var i = start
        if i < b.count, b[i] == UInt8(ascii: "-") || (allowPlus && b[i] == UInt8(ascii: "+")) { i += 1 }
        let intStart = i
        while i < b.count, isDigit(b[i]) { i += 1 }
        guard i > intStart else { return nil }
        var hasFraction = false
        if i + 1 < b.count, b[i] == UInt8(ascii: "."), isDigit(b[i + 1]) {
            i += 1
            while i < b.count, isDigit(b[i]) { i += 1 }
            hasFraction = true
        }
        var hasExponent = false
        if i < b.count, b[i] == UInt8(ascii: "e") || b[i] == UInt8(ascii: "E") {
            var j = i + 1
            if j < b.count, b[j] == UInt8(ascii: "-") || b[j] == UInt8(ascii: "+") { j += 1 }
            let expStart = j
            while j < b.count, isDigit(b[j]) { j += 1 }
            if j > expStart {
                i = j
                hasExponent = true
            }
        }
        return NumberShape(text: String(decoding: b[start..<i], as: UTF8.self), hasFraction: hasFraction, hasExponent: hasExponent, end: i)
    }

    /// A quoted string `'…'` with `''` for a quote; returns the unescaped content.
    static func scanQuoted(_ b: [UInt8], _ start: Int) -> (String, Int)? {
        guard start < b.count, b[start] == UInt8(ascii: "'") else { return nil }
        var out: [UInt8] = []
        var i = start + 1
        while i < b.count {
            if b[i] == UInt8(ascii: "'") {
                if i + 1 < b.count, b[i + 1] == UInt8(ascii: "'") {
                    out.append(b[i])
                    i += 2
                    continue
                }
                return (String(decoding: out, as: UTF8.self), i + 1)
            }
            out.append(b[i])
            i += 1
        }
        return nil
    }

    /// Base64url (or base64) text to bytes; padding optional. Nil on a bad character or length.
    static func decodeBase64URL(_ text: String) -> [UInt8]? {
        var values: [UInt8] = []
        var sawPad = false
        for c in text.utf8 {
            let v: UInt8
            switch c {
            case 65...90: v = c - 65
            case 97...122: v = c - 71
            case 48...57: v = c + 4
            case UInt8(ascii: "-"), UInt8(ascii: "+"): v = 62
            case UInt8(ascii: "_"), UInt8(ascii: "/"): v = 63
            case UInt8(ascii: "="):
                sawPad = true
                continue
            default: return nil
            }
            if sawPad { return nil }
            values.append(v)
        }
        if values.count % 4 == 1 { return nil }
        var out: [UInt8] = []
        var index = 0
        while index < values.count {
            let chunk = values[index..<min(index + 4, values.count)]
            let a = chunk[chunk.startIndex], b2 = chunk.count > 1 ? chunk[chunk.startIndex + 1] : 0
            out.append(a << 2 | b2 >> 4)
            if chunk.count > 2 {
                let c = chunk[chunk.startIndex + 2]
                out.append((b2 & 0x0F) << 4 | c >> 2)
                if chunk.count > 3 {
                    out.append((c & 0x03) << 6 | chunk[chunk.startIndex + 3])
                }
            }
            index += 4
        }
        return out
    }

    static func encodeBase64URL(_ bytes: [UInt8]) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var out: [UInt8] = []
        var i = 0
        while i < bytes.count {
            let b0 = bytes[i], b1 = i + 1 < bytes.count ? bytes[i + 1] : 0, b2 = i + 2 < bytes.count ? bytes[i + 2] : 0
            out.append(alphabet[Int(b0 >> 2)])
            out.append(alphabet[Int((b0 & 0x03) << 4 | b1 >> 4)])
            out.append(i + 1 < bytes.count ? alphabet[Int((b1 & 0x0F) << 2 | b2 >> 6)] : UInt8(ascii: "="))
            out.append(i + 2 < bytes.count ? alphabet[Int(b2 & 0x3F)] : UInt8(ascii: "="))
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func decodeHex(_ text: String) -> [UInt8]? {
        let b = Array(text.utf8)
        guard b.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        var i = 0
        while i < b.count {
            guard let hi = hexValue(b[i]), let lo = hexValue(b[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }

    static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: c - 48
        case 65...70: c - 55
        case 97...102: c - 87
        default: nil
        }
    }

    /// Well-known text for a spatial literal body after `SRID=n;`: `Point(1 2)` etc.
    static func parseSpatial(_ text: String, isGeography: Bool) -> SpatialValue? {
        var body = Substring(text)
        var srid: Int?
        if body.lowercased().hasPrefix("srid=") {
            guard let semicolon = body.firstIndex(of: ";") else { return nil }
            let number = body[body.index(body.startIndex, offsetBy: 5)..<semicolon]
            guard let value = Int(number), value >= 0, number.count <= 5 else { return nil }
            srid = value
            body = body[body.index(after: semicolon)...]
        }
        let kinds = ["MultiLineString", "MultiPolygon", "MultiPoint", "LineString", "Polygon", "Point", "GeometryCollection", "Collection"]
        guard let written = kinds.first(where: { body.lowercased().hasPrefix($0.lowercased() + "(") }) else { return nil }
        let inner = body.dropFirst(written.count)
        // WKT spells collections `GeometryCollection` for geography values too.
        let kind = written == "GeometryCollection" ? "Collection" : written
        guard validSpatialBody(kind: kind, Array(inner.utf8)) else { return nil }
        var point: SpatialValue.Point?
        if kind == "Point" {
            let numbers = inner.dropFirst().dropLast().split(separator: " ").compactMap { Double($0) }
            guard numbers.count >= 2 else { return nil }
            point = SpatialValue.Point(x: numbers[0], y: numbers[1], z: numbers.count > 2 ? numbers[2] : nil, m: numbers.count > 3 ? numbers[3] : nil)
        }
        return SpatialValue(kind: kind, isGeography: isGeography, srid: srid, point: point, wellKnownText: String(body))
    }

    /// Checks a `( … )` body: balanced parentheses, positions of 2–4 numbers separated by
    /// single spaces, positions separated by commas; collections may nest typed items.
    private static func validSpatialBody(kind: String, _ b: [UInt8]) -> Bool {
        guard b.first == UInt8(ascii: "("), b.last == UInt8(ascii: ")") else { return false }
        var depth = 0
        for (index, c) in b.enumerated() {
            if c == UInt8(ascii: "(") { depth += 1 }
            if c == UInt8(ascii: ")") {
                depth -= 1
                if depth == 0 && index != b.count - 1 { return false }
                if depth < 0 { return false }
            }
            let allowed = isDigit(c) || isAlpha(c) || c == UInt8(ascii: " ") || c == UInt8(ascii: ",") || c == UInt8(ascii: ".")
                || c == UInt8(ascii: "-") || c == UInt8(ascii: "(") || c == UInt8(ascii: ")") || c == UInt8(ascii: "+")
            if !allowed { return false }
        }
        if depth != 0 { return false }
        if kind == "Collection" { return true }
        // Positions: every run between separators holds numbers separated by one space.
        var current: [UInt8] = []
        func checkPosition(_ run: [UInt8]) -> Bool {
            if run.isEmpty { return true }
            let parts = run.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
            guard (2...4).contains(parts.count) else { return false }
            return parts.allSatisfy { part in
                Double(String(decoding: part, as: UTF8.self)) != nil
            }
        }
        for c in b {
            if c == UInt8(ascii: "(") || c == UInt8(ascii: ")") || c == UInt8(ascii: ",") {
                guard checkPosition(current) else { return false }
                current = []
            } else if isAlpha(c) && c != UInt8(ascii: "e") && c != UInt8(ascii: "E") {
                return false
            } else {
                current.append(c)
            }
        }
        return true
    }
}
