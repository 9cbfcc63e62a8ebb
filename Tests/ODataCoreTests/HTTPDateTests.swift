import Foundation
import Testing

@testable import ODataCore

/// HTTP dates written and read without Foundation's formatters, checked against them.
@Suite struct HTTPDateTests {
    /// 2026-11-29 00:00:00 UTC: "now" for two-digit years.
    static let now: Int64 = 1_795_910_400
    /// RFC 9110 §5.6.7's own example, and the epoch.
    @Test func theRFCExampleAndTheEpoch() {
        #expect(HTTPDate.format(secondsSince1970: 784_111_777) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT", now: Self.now) == 784_111_777)
        #expect(HTTPDate.format(secondsSince1970: 0) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.format(secondsSince1970: -1) == "Wed, 31 Dec 1969 23:59:59 GMT")
        #expect(HTTPDate.format(secondsSince1970: 951_782_400) == "Tue, 29 Feb 2000 00:00:00 GMT")
        #expect(HTTPDate.parse("Tue, 29 Feb 2000 00:00:00 UTC", now: Self.now) == 951_782_400)
    }

    /// Every form written matches Foundation's formatter with the same pattern, over 1900–2200,
    /// and reads back to the same second.
    @Test func itWritesWhatFoundationWritesAndReadsItBack() {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        var generator = SystemRandomNumberGenerator()
        var seconds: [Int64] = [-2_208_988_800, 7_258_118_399, 946_684_799, 946_684_800, 4_107_542_400]
        for _ in 0..<2_000 { seconds.append(Int64.random(in: -2_208_988_800...7_258_118_399, using: &generator)) }
        for second in seconds {
            let text = HTTPDate.format(secondsSince1970: second)
            #expect(text == formatter.string(from: Date(timeIntervalSince1970: Double(second))), "\(second)")
            #expect(HTTPDate.parse(text, now: Self.now) == second, "\(text)")
        }
    }

    /// Anything but an IMF-fixdate is refused rather than read as some other instant.
    @Test func whatIsNotAnIMFFixdateIsRefused() {
        let refused = [
            "", "Sun, 06 Nov 1994 08:49:37", "Sunday, 06-Nov-94 08:49:37", "Sun Nov  6 08:49:37 94",
            "Sun, 06-Nov-94 08:49:37 GMT", "Sunday, 06 Nov 1994 08:49:37 GMT", "Sun Nov 6 08:49:37 1994",
            "Sunday, 06-Nov-94 08:49:37 CET", "Sonntag, 06-Nov-94 08:49:37 GMT", "Sun Nov 31 08:49:37 1994",
            "Sun, 06 Nov 1994 08:49:37 CET", "Sun, 31 Nov 1994 08:49:37 GMT", "Sun, 29 Feb 1900 08:49:37 GMT",
            "Sun, 06 Nvm 1994 08:49:37 GMT", "Sux, 06 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:60:37 GMT", "Sun, 06 Nov 1994 08:49:62 GMT", "Sun, 0x Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT ", "Sun; 06 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08-49-37 GMT",
            "Sun, 00 Nov 1994 08:49:37 GMT", "Sun, 06 Nov +994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 gmt",
        ]
        for text in refused { #expect(HTTPDate.parse(text, now: Self.now) == nil, "\(text)") }
    }

    /// The two obsolete forms RFC 9110 §5.6.7 says a recipient must read, with its own
    /// examples; a two-digit year more than 50 years ahead is in the past century.
    @Test func theObsoleteFormsAreRead() {
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT", now: Self.now) == 784_111_777)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994", now: Self.now) == 784_111_777)
        #expect(HTTPDate.parse("Thu Nov 26 08:49:37 2026", now: Self.now) == 1_795_682_977)
        // 2076 is 50 years after 2026, 2077 more than that.
        #expect(HTTPDate.parse("Wednesday, 01-Jan-76 00:00:00 GMT", now: Self.now) == 3_345_062_400)
        #expect(HTTPDate.parse("Saturday, 01-Jan-77 00:00:00 GMT", now: Self.now) == 220_924_800)
        #expect(HTTPDate.parse("Wednesday, 01-Jan-25 00:00:00 GMT", now: Self.now) == 1_735_689_600)
        // In 2060, "05" is 2105 (45 years ahead), "11" is 2011 (2111 would be 51 years ahead).
        let in2060: Int64 = 2_840_140_800
        #expect(HTTPDate.parse("Thursday, 01-Jan-05 00:00:00 GMT", now: in2060) == 4_260_211_200)
        #expect(HTTPDate.parse("Saturday, 01-Jan-11 00:00:00 GMT", now: in2060) == 1_293_840_000)
    }

    /// A leap second is the next second's start; the day name is not matched against the date.
    @Test func aLeapSecondAndAnyDayName() {
        #expect(HTTPDate.parse("Sat, 31 Dec 2016 23:59:60 GMT", now: Self.now) == 1_483_228_800)
        #expect(HTTPDate.parse("Mon, 06 Nov 1994 08:49:37 GMT", now: Self.now) == 784_111_777)
    }
}
