import Foundation
import ODataCore
import Testing
@testable import OfflineOData

/// `BackendSession` as a unit, over a recording transport: which requests carry credentials,
/// and how many times concurrent requests ask the authenticator.
@Suite struct BackendSessionTests {
    /// Answers 401 unless the request carries `Bearer fresh`; records what it was sent.
    final class Recording: Transport, @unchecked Sendable {
        // `@unchecked Sendable`: `sent` is only touched under `lock`.
        private let lock = NSLock()
        private var sent: [TransportRequest] = []
        var requests: [TransportRequest] { lock.withLock { sent } }

        func send(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
            lock.withLock { sent.append(request) }
            try await Task.sleep(nanoseconds: 20_000_000)
            var headers = ODataCore.HTTPHeaders()
            headers.add("Set-Cookie", "session=\(request.url.contains("other") ? "foreign" : "ours"); Path=/")
            return TransportResponse(status: request.headers["Authorization"] == "Bearer fresh" ? 200 : 401, headers: headers)
        }
    }

    final class Counting: ODataAuthenticator, @unchecked Sendable {
        // `@unchecked Sendable`: `asked` is only touched under `lock`.
        private let lock = NSLock()
        private var asked: [Bool] = []
        var calls: [Bool] { lock.withLock { asked } }
        func credentials(for serviceRoot: String, refresh: Bool) async throws -> ODataCredentials? {
            lock.withLock { asked.append(refresh) }
            try await Task.sleep(nanoseconds: 50_000_000)
            return .bearer(refresh ? "fresh" : "stale")
        }
    }

    @Test func concurrentRequestsShareOneAskAndOneRefresh() async throws {
        let transport = Recording()
        let authenticator = Counting()
        let session = BackendSession(transport: transport, serviceRoot: "http://backend.example/odata/", authenticator: authenticator,
                                     csrfProtection: false)
        let token = TransportRequest(method: "GET", url: "http://backend.example/odata/")
        try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<6 {
                group.addTask {
                    try await session.send(TransportRequest(method: "GET", url: "http://backend.example/odata/Set(\(index))"), timeout: 5,
                                           tokenRequest: token).status
                }
            }
            for try await status in group { #expect(status == 200) }
        }
        #expect(authenticator.calls == [false, true], "one first ask, one refresh for six requests")
        // A request with its own Authorization header is sent as it is: no ask, no refresh.
        let own = Counting()
        let plain = BackendSession(transport: transport, serviceRoot: "http://backend.example/odata/", authenticator: own, csrfProtection: false)
        var request = TransportRequest(method: "GET", url: "http://backend.example/odata/Own")
        request.headers["Authorization"] = "Bearer fresh"
        #expect(try await plain.send(request, timeout: 5, tokenRequest: token).status == 200)
        request.headers["Authorization"] = "Bearer wrong"
        await #expect(throws: OfflineODataError.self) { try await plain.send(request, timeout: 5, tokenRequest: token) }
        #expect(own.calls.isEmpty)
    }

    @Test func credentialsAndCookiesStayWithTheServiceOrigin() async throws {
        let transport = Recording()
        let session = BackendSession(transport: transport, serviceRoot: "http://backend.example/odata/",
                                     authenticator: StaticCredentials(.bearer("fresh")), csrfProtection: true)
        let token = TransportRequest(method: "GET", url: "http://backend.example/odata/")
        _ = try await session.send(TransportRequest(method: "GET", url: "http://backend.example/odata/A"), timeout: 5, tokenRequest: token)
        // Another host (a next link, a support server), another port or scheme: nothing of the session.
        for url in ["http://other.example/odata/B", "http://backend.example:8080/odata/B", "https://backend.example/odata/B"] {
            _ = try await session.send(TransportRequest(method: "POST", url: url), timeout: 5, tokenRequest: token)
        }
        _ = try await session.send(TransportRequest(method: "GET", url: "http://BACKEND.example:80/odata/C"), timeout: 5, tokenRequest: token)
        let requests = transport.requests
        #expect(requests.map(\.url) == ["http://backend.example/odata/A", "http://other.example/odata/B", "http://backend.example:8080/odata/B",
                                        "https://backend.example/odata/B", "http://BACKEND.example:80/odata/C"])
        #expect(requests[0].headers["Authorization"] == "Bearer fresh" && requests[0].headers["X-CSRF-Token"] == "Fetch")
        for foreign in requests[1...3] {
            #expect(foreign.headers["Authorization"] == nil && foreign.headers["Cookie"] == nil && foreign.headers["X-CSRF-Token"] == nil)
        }
        // The same origin again: its own cookie, not the foreign host's.
        #expect(requests[4].headers["Authorization"] == "Bearer fresh")
        #expect(requests[4].headers["Cookie"] == "session=ours")
        #expect("\(ODataCredentials.basic(user: "alice", password: "secret"))" == "basic(alice, ***)")
    }
}

/// Issue 56: `Retry-After` as RFC 9110 gives it: seconds, or an HTTP date.
@Suite struct RetryAfterTests {
    @Test func retryAfterIsSecondsOrADate() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        #expect(BackendSession.retryAfter("5", now: now) == 5)
        #expect(BackendSession.retryAfter(" 0 ", now: now) == 0)
        #expect(BackendSession.retryAfter("-3", now: now) == nil)
        #expect(BackendSession.retryAfter("soon", now: now) == nil)
        #expect(BackendSession.retryAfter(nil, now: now) == nil)
        // 2023-11-14T22:13:20Z is 1_700_000_000; ten seconds later:
        #expect(BackendSession.retryAfter("Tue, 14 Nov 2023 22:13:30 GMT", now: now) == 10)
        #expect(BackendSession.retryAfter("Tue, 14 Nov 2023 22:13:00 GMT", now: now) == 0, "a date past is now")
    }
}
