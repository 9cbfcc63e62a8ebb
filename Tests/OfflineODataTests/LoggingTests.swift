import Foundation
import InteropSupport
import Logging
import ODataCore
import ODataServer
import Testing
@testable import OfflineOData

/// What the offline provider logs through the app's `Logger`: summaries at `info`, credential
/// and CSRF refreshes at `notice`, ErrorArchive requests at `warning`, failed operations at
/// `error`; keys, bodies and query values never above `trace`.
@Suite struct LoggingTests {
    @Test(arguments: [false, true])
    func operationsLogSummariesRefreshesAndFailures(v2: Bool) async throws {
        let csrf = CSRFProtection()
        let fixture = try await Fixture.start {
            $0.csrf = csrf
            $0.requiredCredentials = .bearer(["fresh-token"])
        }
        let records = LogCapture()
        var parameters = fixture.parameters()
        parameters.logger = records.logger(level: .trace)
        parameters.authenticator = ClosureAuthenticator { _, refresh in .bearer(refresh ? "fresh-token" : "stale-token")
        }
        let provider = try await fixture.provider(v2: v2, parameters: parameters)
        try await provider.open()
        let opened = try #require(records.all.first { $0.message == "Offline operation finished" })
        #expect(opened.level == .info)
        #expect(opened.metadata["operation"] == "open" && opened.metadata["store"] == "created", "\(opened)")
        #expect(opened.metadata["defining-queries"] == "3")
        #expect(Int(opened.metadata["bytes-received"] ?? "") ?? 0 > 1000, "\(opened)")
        let refreshed = try #require(records.all.first { $0.message.hasPrefix("Backend answered 401") })
        #expect(refreshed.level == .notice)
        // Each exchange went through the default transport's log.
        #expect(
            records.all.contains {
                $0.message == "HTTP exchange finished" && $0.metadata["url"]?.hasSuffix("$metadata") == true
            })

        // One change the backend accepts, one it refuses; the CSRF session ends before the upload.
        await fixture.server.service.faults.set([
            FaultRule(
                urlContains: "BusinessPartners", bodyContains: "REFUSED", status: 400,
                code: "PartnerRefused", message: "Not this phone")
        ])
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"REFUSED"}"#.utf8))
        _ = try await provider.execute(
            method: "POST", url: "Contacts",
            body: Array(#"{"FirstName":"Log","LastName":"Secret","PartnerID":"BP2"}"#.utf8))
        csrf.invalidateAll()
        try await provider.upload()
        let csrfAgain = try #require(records.all.first { $0.message.hasPrefix("CSRF token required again") })
        #expect(csrfAgain.level == .notice && csrfAgain.metadata["url"]?.hasSuffix("$batch") == true, "\(csrfAgain)")
        let archived = try #require(records.all.first { $0.message == "Request went to the ErrorArchive" })
        #expect(archived.level == .warning)
        #expect(
            archived.metadata["status"] == "400" && archived.metadata["error-code"] == "PartnerRefused", "\(archived)")
        #expect(archived.metadata["url"]?.hasSuffix("BusinessPartners(…)") == true, "\(archived)")
        let uploaded = try #require(records.all.last { $0.message == "Offline operation finished" })
        #expect(uploaded.level == .info && uploaded.metadata["operation"] == "upload")
        #expect(
            uploaded.metadata["requests-applied"] == "1" && uploaded.metadata["requests-failed"] == "1", "\(uploaded)")
        #expect(uploaded.metadata["batches"] == "1" && uploaded.metadata["change-sets"] == "2", "\(uploaded)")

        try await provider.download()
        let downloaded = try #require(records.all.last { $0.message == "Offline operation finished" })
        #expect(downloaded.metadata["operation"] == "download" && downloaded.metadata["defining-queries"] == "3")
        #expect(downloaded.metadata["result"]?.contains("entities inserted or updated") == true, "\(downloaded)")

        // A download against a stopped backend: an error record with the code, no message.
        await fixture.server.stop()
        await #expect(throws: OfflineODataError.self) { try await provider.download() }
        let failed = try #require(records.all.last { $0.message == "Offline operation failed" })
        #expect(failed.level == .error)
        #expect(failed.metadata["operation"] == "download" && failed.metadata["error-code"] == "transport", "\(failed)")

        // Keys, bodies, tokens and query values only at trace.
        for record in records.all where record.level > .trace {
            for secret in ["BP1", "BP2", "REFUSED", "Secret", "fresh-token", "stale-token", "Not this phone"] {
                #expect(!record.text.contains(secret), "\(secret) in \(record)")
            }
        }
        #expect(records.all.contains { $0.level == .trace && $0.text.contains("BusinessPartners('BP1')") })
        await provider.close()
        try? FileManager.default.removeItem(at: fixture.directory)
    }
}
