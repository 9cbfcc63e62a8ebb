import Foundation
import Testing

@testable import ODataGateway

/// The first sending of a repeat, as the gateway reads it to refuse one past its retention:
/// every HTTP date form, and the ISO 8601 instant some senders put in `RepeatabilityCreation`.
@Suite struct GatewayFirstSentTests {
    @Test func everyFormOfTheFirstSendingIsRead() {
        let expected = Date(timeIntervalSince1970: 784_111_777)
        for text in [
            "Sun, 06 Nov 1994 08:49:37 GMT", " Sun, 06 Nov 1994 08:49:37 GMT ", "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994", "1994-11-06T08:49:37Z", "1994-11-06T09:49:37+01:00",
        ] {
            #expect(Gateway.httpDate(text) == expected, "\(text)")
        }
        let refused = [
            "", "yesterday", "1994-11-06", "Sun, 06 Nov 1994 08:49:37 CET", "1994-11-06T08:49:37",
            "'1994-11-06T08:49:37Z'",
        ]
        for text in refused {
            #expect(Gateway.httpDate(text) == nil, "\(text)")
        }
    }
}
