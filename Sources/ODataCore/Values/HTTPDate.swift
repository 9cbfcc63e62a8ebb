/// HTTP dates in the preferred form of RFC 9110 §5.6.7 (IMF-fixdate, `Sun, 06 Nov 1994
/// 08:49:37 GMT`), the form of `Repeatability-First-Sent`, written and read without Foundation's
/// formatters: a `DateFormatter` costs its creation and loads ICU's locale and calendar data,
/// which an upload paid for every batch and the gateway for every request it received.
package enum HTTPDate {
    private static let dayNames = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]
    private static let monthNames = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// The IMF-fixdate of `seconds` since 1970-01-01 00:00:00 UTC (fractions are not written).
    package static func format(secondsSince1970 seconds: Int64) -> String {
        let (quotient, remainder) = seconds.quotientAndRemainder(dividingBy: 86_400)
        let days = Int(remainder < 0 ? quotient - 1 : quotient)
        let second = Int(remainder < 0 ? remainder + 86_400 : remainder)
        let date = DateValue(daysSinceEpoch: days)
        // 1970-01-01 was a Thursday.
        let weekday = ((days % 7) + 7) % 7
        var bytes: [UInt8] = []
        bytes.reserveCapacity(29)
        bytes.append(contentsOf: dayNames[weekday].utf8)
        bytes.append(contentsOf: ", ".utf8)
        Digits.append(date.day, width: 2, to: &bytes)
        bytes.append(UInt8(ascii: " "))
        bytes.append(contentsOf: monthNames[date.month - 1].utf8)
        bytes.append(UInt8(ascii: " "))
        Digits.append(date.year, width: 4, to: &bytes)
        bytes.append(UInt8(ascii: " "))
        Digits.append(second / 3600, width: 2, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        Digits.append(second / 60 % 60, width: 2, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        Digits.append(second % 60, width: 2, to: &bytes)
        bytes.append(contentsOf: " GMT".utf8)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Seconds since 1970-01-01 00:00:00 UTC of an IMF-fixdate; nil when `text` is not one: a
    /// wrong length or separator, an unknown day or month name, a day the month lacks, a time
    /// out of range, or a zone other than `GMT` (also taken as `UTC`, which some senders write).
    /// The day name is not checked against the date (RFC 9110 makes it redundant).
    package static func parse(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count == 29, bytes[3] == UInt8(ascii: ","), bytes[4] == UInt8(ascii: " "),
            bytes[7] == UInt8(ascii: " "), bytes[11] == UInt8(ascii: " "), bytes[16] == UInt8(ascii: " "),
            bytes[19] == UInt8(ascii: ":"), bytes[22] == UInt8(ascii: ":"), bytes[25] == UInt8(ascii: " ")
        else { return nil }
        func word(_ start: Int, _ length: Int) -> String { String(decoding: bytes[start..<start + length], as: UTF8.self) }
        func number(_ start: Int, _ length: Int) -> Int? {
            var value = 0
            for byte in bytes[start..<start + length] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        let zone = word(26, 3)
        guard dayNames.contains(word(0, 3)), let monthIndex = monthNames.firstIndex(of: word(8, 3)),
            zone == "GMT" || zone == "UTC", let day = number(5, 2), let year = number(12, 4),
            let hour = number(17, 2), let minute = number(20, 2), let second = number(23, 2),
            hour < 24, minute < 60, second < 61
        else { return nil }
        let date = DateValue(year: year, month: monthIndex + 1, day: day)
        guard date.calendarProblem == nil else { return nil }
        // A leap second (60) is read as the next second, as RFC 9110 lets a recipient do.
        return Int64(date.daysSinceEpoch) * 86_400 + Int64(hour * 3600 + minute * 60 + second)
    }
}
