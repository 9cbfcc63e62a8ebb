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
            return TransportResponse(
                status: request.headers["Authorization"] == "Bearer fresh" ? 200 : 401, headers: headers)
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
        let session = BackendSession(
            transport: transport, serviceRoot: "http://backend.example/odata/", authenticator: authenticator,
            csrfProtection: false)
        let token = TransportRequest(method: "GET", url: "http://backend.example/odata/")
        try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<6 {
                group.addTask {
                    try await session.send(
                        TransportRequest(method: "GET", url: "http://backend.example/odata/Set(\(index))"), timeout: 5,
                        tokenRequest: token
                    ).status
                }
            }
            for try await status in group { #expect(status == 200) }
        }
        #expect(authenticator.calls == [false, true], "one first ask, one refresh for six requests")
        // A request with its own Authorization header is sent as it is: no ask, no refresh.
        let own = Counting()
        let plain = BackendSession(
            transport: transport, serviceRoot: "http://backend.example/odata/", authenticator: own,
            csrfProtection: false)
        var request = TransportRequest(method: "GET", url: "http://backend.example/odata/Own")
        request.headers["Authorization"] = "Bearer fresh"
        #expect(try await plain.send(request, timeout: 5, tokenRequest: token).status == 200)
        request.headers["Authorization"] = "Bearer wrong"
        await #expect(throws: OfflineODataError.self) { try await plain.send(request, timeout: 5, tokenRequest: token) }
        #expect(own.calls.isEmpty)
    }

    @Test func credentialsAndCookiesStayWithTheServiceOrigin() async throws {
        let transport = Recording()
        let session = BackendSession(
            transport: transport, serviceRoot: "http://backend.example/odata/",
            authenticator: StaticCredentials(.bearer("fresh")), csrfProtection: true)
        let token = TransportRequest(method: "GET", url: "http://backend.example/odata/")
        _ = try await session.send(
            TransportRequest(method: "GET", url: "http://backend.example/odata/A"), timeout: 5, tokenRequest: token)
        // Another host (a next link, a support server), another port or scheme: nothing of the session.
        for url in [
            "http://other.example/odata/B", "http://backend.example:8080/odata/B", "https://backend.example/odata/B",
        ] {
            _ = try await session.send(TransportRequest(method: "POST", url: url), timeout: 5, tokenRequest: token)
        }
        _ = try await session.send(
            TransportRequest(method: "GET", url: "http://BACKEND.example:80/odata/C"), timeout: 5, tokenRequest: token)
        let requests = transport.requests
        #expect(
            requests.map(\.url) == [
                "http://backend.example/odata/A", "http://other.example/odata/B", "http://backend.example:8080/odata/B",
                "https://backend.example/odata/B", "http://BACKEND.example:80/odata/C",
            ])
        #expect(
            requests[0].headers["Authorization"] == "Bearer fresh" && requests[0].headers["X-CSRF-Token"] == "Fetch")
        for foreign in requests[1...3] {
            #expect(
                foreign.headers["Authorization"] == nil && foreign.headers["Cookie"] == nil
                    && foreign.headers["X-CSRF-Token"] == nil)
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

    /// Answers 429 with the given `Retry-After` a number of times, then 200.
    final class Throttling: Transport, @unchecked Sendable {
        // `@unchecked Sendable`: `count` is only touched under `lock`.
        private let lock = NSLock()
        private var count = 0
        let retryAfter: String
        let refusals: Int
        let fromGateway: Bool
        var sent: Int { lock.withLock { count } }
        init(retryAfter: String, refusals: Int, fromGateway: Bool = false) {
            self.retryAfter = retryAfter
            self.refusals = refusals
            self.fromGateway = fromGateway
        }
        func send(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
            let index = lock.withLock {
                count += 1
                return count
            }
            var headers = ODataCore.HTTPHeaders()
            headers["Retry-After"] = retryAfter
            if fromGateway { headers["OOData-Gateway"] = "1" }
            return TransportResponse(status: index <= refusals ? 429 : 200, headers: headers)
        }
    }

    /// A 429 is sent again after its Retry-After (a quarter of a second at least), three times
    /// at most, only within `maximumRetryAfter`: 0 or less never waits, an infinite one is an
    /// hour (a Retry-After of days reaches the caller instead of a sleep that overflows). A
    /// plain POST is sent again only when a gateway (which throttles before doing anything)
    /// answered, or it carries a Repeatability-Request-ID.
    @Test func throttledRequestsWaitWithinTheirLimit() async throws {
        let token = TransportRequest(method: "GET", url: "http://backend.example/odata/")
        func run(
            _ retryAfter: String, refusals: Int, limit: Double, retry: Bool = true, method: String = "GET",
            repeatable: Bool = false, fromGateway: Bool = false
        ) async throws -> (Int, Int, Double) {
            var headers = ODataCore.HTTPHeaders()
            if repeatable { headers["Repeatability-Request-ID"] = "3f1c" }
            let request = TransportRequest(method: method, url: "http://backend.example/odata/A", headers: headers)
            let transport = Throttling(retryAfter: retryAfter, refusals: refusals, fromGateway: fromGateway)
            let session = BackendSession(
                transport: transport, serviceRoot: "http://backend.example/odata/", authenticator: nil,
                csrfProtection: false, maximumRetryAfter: limit)
            let start = ContinuousClock.now
            let status = try await session.send(request, timeout: 5, tokenRequest: token, retryThrottled: retry).status
            let elapsed = ContinuousClock.now - start
            return (
                status, transport.sent,
                Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            )
        }
        let zero = try await run("0", refusals: 2, limit: 60)
        #expect(zero.0 == 200 && zero.1 == 3)
        #expect(zero.2 >= 0.5, "Retry-After: 0 still waits a quarter of a second each time: \(zero.2)")
        let fourth = try await run("0", refusals: 4, limit: 60)
        #expect(fourth.0 == 429 && fourth.1 == 4, "a fourth 429 reaches the caller")
        let never = try await run("0", refusals: 1, limit: 0)
        #expect(never.0 == 429 && never.1 == 1, "maximumRetryAfter 0 never waits")
        let negative = try await run("0", refusals: 1, limit: -5)
        #expect(negative.0 == 429 && negative.1 == 1)
        let days = try await run("\(Int.max)", refusals: 1, limit: .infinity)
        #expect(days.0 == 429 && days.1 == 1, "longer than an hour: not waited for")
        let nan = try await run("0", refusals: 1, limit: .nan)
        #expect(nan.0 == 429 && nan.1 == 1)
        let unasked = try await run("0", refusals: 1, limit: 60, retry: false)
        #expect(unasked.0 == 429 && unasked.1 == 1)
        let post = try await run("0", refusals: 1, limit: 60, method: "POST")
        #expect(post.0 == 429 && post.1 == 1, "a backend's 429 to a plain POST is not sent again")
        let repeatable = try await run("0", refusals: 1, limit: 60, method: "POST", repeatable: true)
        #expect(repeatable.0 == 200 && repeatable.1 == 2)
        let gateways = try await run("0", refusals: 1, limit: 60, method: "POST", fromGateway: true)
        #expect(gateways.0 == 200 && gateways.1 == 2)
    }
}
