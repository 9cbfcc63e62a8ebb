import Foundation
import Logging
import Testing

@testable import ODataGateway

/// The masking of `/api/log` and `oodata gateway diagnose`: every form of credential a log
/// line can carry is masked, and words that merely sit near one are not.
struct GatewayRecentLogTests {
    @Test(arguments: [
        ("Authorization: Basic ZGV2aWNlOmRldmljZS1wdw==", "Authorization: Basic •••"),
        ("authorization=Negotiate YIIGhgYJKoZIhvcSAQICAQBuggZ1", "authorization=Negotiate •••"),
        ("Authorization: Token 9f8e7d6c5b4a", "Authorization: Token •••"),
        ("Authorization:  Bearer\tabc.def-ghi", "Authorization:  Bearer\t•••"),
        ("sent Bearer  abcdefghij to the backend", "sent Bearer ••• to the backend"),
        ("Proxy-Authorization: Basic dXNlcjpwdw==", "Proxy-Authorization: Basic •••"),
        ("Cookie: MYSAPSSO2=AjQxMDMBABhTAEEAUAA; SAP_SESSIONID_X=abc", "Cookie: •••"),
        ("set-cookie=\"SAP_SESSIONID=ZZZ; Path=/\"", "set-cookie=\"•••\""),
        (
            "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXBhcnQ rejected",
            "token ••• rejected"
        ),
        ("password=hunter2&user=x", "password=•••&user=x"),
        ("\"client_secret\": \"s3cr3t-value\"", "\"client_secret\": \"•••\""),
        ("jwt_hs_secret=hunter2-hunter2 is too short", "jwt_hs_secret=••• is too short"),
        ("api-key: 0123456789", "api-key: •••"),
        (
            "Digest username=\"a\", nonce=\"abc123\", response=\"6629fae4\"",
            "Digest username=\"a\", nonce=\"•••\", response=\"•••\""
        ),
        ("postgres://oodata:choose-one@127.0.0.1:5432/oodata", "postgres://•••@127.0.0.1:5432/oodata"),
        ("token refresh failed after 3 tries", "token refresh failed after 3 tries"),
        ("the backend answered 401 for Contacts", "the backend answered 401 for Contacts"),
    ])
    func credentialsAreMasked(line: String, expected: String) {
        #expect(GatewayRecentLog.masked(line) == expected)
    }

    /// The ring keeps the newest lines, oldest first; warnings are kept even when the log level
    /// set is `error`, and what is below that level does not reach the wrapped handler.
    @Test func theRingKeepsTheLastWarnings() {
        let recent = GatewayRecentLog(capacity: 3)
        let seen = Seen()
        var logger = Logger(label: "test") { _ in SeenHandler(seen: seen) }
        logger.logLevel = .error
        logger.handler = RecordingLogHandler(inner: logger.handler, recent: recent)
        logger.info("not kept")
        for index in 1...5 { logger.warning("warning \(index)", metadata: ["password": "pw\(index)"]) }
        logger.error("an error")
        #expect(
            recent.entries.map(\.message) == ["warning 4 password=•••", "warning 5 password=•••", "an error"])
        #expect(recent.entries.map(\.level) == ["warning", "warning", "error"])
        #expect(seen.messages == ["an error"])
    }
}

private final class Seen: @unchecked Sendable {
    private let lock = NSLock()
    private var kept: [String] = []
    var messages: [String] { lock.withLock { kept } }
    func add(_ message: String) { lock.withLock { kept.append(message) } }
}

private struct SeenHandler: LogHandler {
    let seen: Seen
    var logLevel: Logger.Level = .trace
    var metadata: Logger.Metadata = [:]
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
    func log(event: LogEvent) { seen.add("\(event.message)") }
}
