import Foundation
import Logging
import ODataCore
import ODataServer
import InteropSupport
import Testing
@testable import OfflineOData

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The transports this package ships, as the transport suite runs them: AsyncHTTPClient (where
/// it is built), URLSession with a session of its own, and URLSession through a session the app
/// made (on Linux its answers come through a completion handler, not the transport's delegate).
enum TransportKind: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case asyncHTTPClient, urlSession, appURLSession

    static var available: [TransportKind] {
        #if os(Linux)
            allCases
        #else
            [.urlSession, .appURLSession]
        #endif
    }

    var testDescription: String { rawValue }

    func make(logger: Logger = OfflineODataLogging.disabled) -> any Transport {
        switch self {
        case .asyncHTTPClient:
            #if os(Linux)
                return AsyncHTTPClientTransport(logger: logger)
            #else
                return URLSessionTransport(logger: logger)
            #endif
        case .urlSession:
            return URLSessionTransport(logger: logger)
        case .appURLSession:
            return URLSessionTransport(session: Self.appSession, logger: logger)
        }
    }

    /// The app's session, made once: with a cookie store and a URL cache, as `.default` has.
    static let appSession: URLSession = {
        let configuration = URLSessionConfiguration.default
        configuration.httpAdditionalHeaders = ["X-App-Session": "yes"]
        return URLSession(configuration: configuration)
    }()
}

/// The contracts of every ``Transport`` (idle timeout as network silence, streamed bodies,
/// cancellation, headers and cookies, CSRF and credentials through the providers, fast failure
/// when nothing listens), run against each transport over loopback to the reference server.
@Suite(.serialized) struct TransportSuiteTests {
    @Test(arguments: TransportKind.available)
    func requestsCarryMethodsHeadersAndBodies(kind: TransportKind) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let transport = kind.make()
        let root = fixture.server.v4Root.absoluteString
        var headers = HTTPHeaders()
        headers["Accept"] = "application/json"
        headers["OData-Version"] = "4.0"
        let read = try await transport.send(
            TransportRequest(method: "GET", url: root + "BusinessPartners?$top=2&$orderby=PartnerID", headers: headers),
            timeout: 10)
        #expect(read.status == 200)
        #expect(read.headers["odata-version"] == "4.0", "\(read.headers)")
        let partners = try JSONValue.parse(read.body)["value"]?.arrayValue ?? []
        #expect(partners.compactMap { $0["PartnerID"]?.stringValue } == ["BP0", "BP1"])
        // A create, a PATCH with If-Match, a DELETE: each as the backend's journal saw it.
        headers["Content-Type"] = "application/json"
        let created = try await transport.send(
            TransportRequest(
                method: "POST", url: root + "Contacts", headers: headers,
                body: Array(#"{"FirstName":"Trans","LastName":"Port","PartnerID":"BP1"}"#.utf8)), timeout: 10)
        #expect(created.status == 201, "\(String(decoding: created.body, as: UTF8.self))")
        guard case .number(let id)? = try JSONValue.parse(created.body)["ContactID"] else {
            throw TransportTestFailure("no ContactID in \(String(decoding: created.body, as: UTF8.self))")
        }
        headers["If-Match"] = "*"
        let patched = try await transport.send(
            TransportRequest(
                method: "PATCH", url: root + "Contacts(\(id))", headers: headers,
                body: Array(#"{"LastName":"Ported"}"#.utf8)),
            timeout: 10)
        #expect(patched.status == 204)
        #expect(try await fixture.backend("Contacts(\(id))")["LastName"]?.stringValue == "Ported")
        let deleted = try await transport.send(
            TransportRequest(method: "DELETE", url: root + "Contacts(\(id))", headers: headers), timeout: 10)
        #expect(deleted.status == 204)
        // V2's MERGE is sent as its own method.
        var v2 = HTTPHeaders()
        v2["Content-Type"] = "application/json"
        v2["If-Match"] = "*"
        v2["Accept"] = "application/json"
        let merged = try await transport.send(
            TransportRequest(
                method: "MERGE", url: fixture.server.v2Root.absoluteString + "BusinessPartners('BP2')", headers: v2,
                body: Array(#"{"Phone":"+49 555"}"#.utf8)), timeout: 10)
        #expect(merged.status == 204)
        #expect(try await fixture.backend("BusinessPartners('BP2')")["Phone"]?.stringValue == "+49 555")
        let journal = await fixture.server.service.journal.requests()
        #expect(journal.contains { $0.hasPrefix("MERGE ") }, "\(journal)")
    }

    @Test(arguments: TransportKind.available)
    func aLargeBodyGoesOutAndComesBackWhole(kind: TransportKind) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let transport = kind.make()
        let url = fixture.server.v4Root.absoluteString + "ProductPictures('PIC0')/$value"
        // 3 MiB: sent in parts by AsyncHTTPClient, by URLSession as it likes.
        let body = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/octet-stream"
        headers["If-Match"] = "*"
        let put = try await transport.send(
            TransportRequest(method: "PUT", url: url, headers: headers, body: body), timeout: 10)
        #expect(put.status == 204, "\(String(decoding: put.body.prefix(300), as: UTF8.self))")
        let get = try await transport.send(TransportRequest(method: "GET", url: url), timeout: 10)
        #expect(get.status == 200)
        #expect(get.headers["Content-Type"] == "application/octet-stream")
        #expect(get.body.count == body.count)
        #expect(get.body == body)
    }

    @Test(arguments: TransportKind.available)
    func aStallFailsButASlowAnswerThatKeepsComingDoesNot(kind: TransportKind) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let url = fixture.server.v4Root.absoluteString + "BusinessPartners"
        let transport = kind.make()
        // 8 parts 1.1 s apart: 8.8 s in all, longer than the 8 s timeout, but never 8 s without
        // a byte. The margin is wide in seconds, not only in ratio: the server's pauses run on
        // the two-thread pool that the other suites load (400 ms gaps against a 2 s timeout,
        // then 600 ms against 4 s, each failed once under URLSession in CI).
        await fixture.server.service.faults.set([
            FaultRule(method: "GET", urlContains: "BusinessPartners", trickleMilliseconds: 1_100)
        ])
        let slow = try await transport.send(TransportRequest(method: "GET", url: url), timeout: 8)
        #expect(slow.status == 200)
        #expect(try JSONValue.parse(slow.body)["value"]?.arrayValue?.isEmpty == false)
        // An answer that does not start for 5 s.
        await fixture.server.service.faults.set([
            FaultRule(method: "GET", urlContains: "BusinessPartners", delayMilliseconds: 5000)
        ])
        let clock = ContinuousClock()
        let start = clock.now
        do {
            _ = try await transport.send(TransportRequest(method: "GET", url: url), timeout: 2)
            Issue.record("a stalled request did not time out")
        } catch let error as TransportError {
            #expect(error.message.contains("No data was sent or received"), "\(error.message)")
            #expect(error.message.contains("timeout 2.0 s"), "\(error.message)")
        }
        // No duration is asserted (a busy machine is slow): the answer would have come at 5 s
        // with a 200, so the timeout's error above is what tells the stall from the answer.
        print("stalled request failed after \(clock.now - start)")
        // Through the provider: the open fails with a transport error and leaves no store.
        await fixture.server.service.faults.set([
            FaultRule(method: "GET", urlContains: "$metadata", delayMilliseconds: 5000)
        ])
        var parameters = fixture.parameters()
        parameters.timeoutInterval = 2
        let provider = OfflineODataProvider(
            serviceRoot: fixture.server.v4Root, parameters: parameters, transport: transport)
        for query in Fixture.queries { try await provider.add(definingQuery: query) }
        do {
            try await provider.open()
            Issue.record("the open did not time out")
        } catch let error as OfflineODataError {
            #expect(error.code == .transport && error.message.contains("timeout 2.0 s"), "\(error.message)")
        }
        #expect(!FileManager.default.fileExists(atPath: parameters.storeFile))
        // Without the faults, an open succeeds. Not with the 2 s timeout: the server's pauses
        // above still hold its threads, and under CI's load a page once waited longer.
        await fixture.server.service.faults.set([])
        let again = OfflineODataProvider(
            serviceRoot: fixture.server.v4Root, parameters: fixture.parameters(), transport: transport)
        for query in Fixture.queries { try await again.add(definingQuery: query) }
        try await again.open()
        #expect(count(try await again.read("BusinessPartners")) > 0)
        await again.close()
    }

    @Test(arguments: TransportKind.available)
    func cancellingTheTaskEndsTheRequestAtOnce(kind: TransportKind) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let transport = kind.make()
        await fixture.server.service.faults.set([
            FaultRule(method: "GET", urlContains: "BusinessPartners", delayMilliseconds: 8000)
        ])
        let url = fixture.server.v4Root.absoluteString + "BusinessPartners"
        let clock = ContinuousClock()
        let start = clock.now
        let task = Task { try await transport.send(TransportRequest(method: "GET", url: url), timeout: 30) }
        try await Task.sleep(nanoseconds: 300_000_000)
        task.cancel()
        do {
            _ = try await task.value
            Issue.record("the cancelled request answered")
        } catch {
            #expect(error is CancellationError, "a cancellation, not a network failure: \(error)")
        }
        // Not a duration (a busy machine is slow): a request that went on would have answered
        // 200 after 8 s, which the lines above refuse.
        print("cancelled request ended after \(clock.now - start)")
        // A task cancelled before it sends does not send.
        await fixture.server.service.journal.clear()
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await transport.send(TransportRequest(method: "GET", url: url + "?early"), timeout: 30)
        }
        await #expect(throws: CancellationError.self) { _ = try await early.value }
        try await Task.sleep(nanoseconds: 200_000_000)
        #expect(!(await fixture.server.service.journal.requests()).contains { $0.contains("?early") })
    }

    /// A loopback port bound by a socket that does not listen: connections to it are refused
    /// for as long as the socket is open, and no other test's server can take the port
    /// meanwhile (a port freed by a stopped server could be).
    static func refusingPort() throws -> (port: Int, socket: Int32) {
        #if canImport(Glibc)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
            let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw TransportError("socket() failed", url: "127.0.0.1") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                bind(fd, generic, length) == 0 && getsockname(fd, generic, &length) == 0
            }
        }
        guard bound else {
            close(fd)
            throw TransportError("bind() failed", url: "127.0.0.1")
        }
        return (Int(UInt16(bigEndian: address.sin_port)), fd)
    }

    /// A backend that stopped (or cut its idle connections) between two requests: the second
    /// request finds the kept-alive connection first and gets a reset. A read is sent again on a
    /// new connection and answers; a write is not sent twice by the transport (the upload's
    /// repeatability IDs make its resend safe, not the transport).
    @Test(arguments: TransportKind.available)
    func aReadThatFindsAResetKeptAliveConnectionIsSentAgain(kind: TransportKind) async throws {
        let server = try ResettingServer(resets: [[1, 2]])
        defer { server.stop() }
        let root = "http://127.0.0.1:\(server.port)/"
        let transport = kind.make()
        let first = try await transport.send(TransportRequest(method: "GET", url: root + "a"), timeout: 10)
        #expect(first.status == 200 && first.body == Array("ok".utf8))
        let second = try await transport.send(TransportRequest(method: "GET", url: root + "b"), timeout: 10)
        #expect(second.status == 200 && second.body == Array("ok".utf8))
        // The reset came on the kept-alive connection, and the read went again on a new one.
        #expect(server.requests == ["1: GET /a", "1: GET /b", "2: GET /b"], "\(server.requests)")
        // A write on a reset connection is never sent again by the transport, whichever it is
        // (it may have been applied: the upload resends it itself, with its repeatability ID).
        // AsyncHTTPClient's fails at once, naming the connection; URLSession on Linux (curl)
        // only at the timeout. (Apple platforms' URLSession has not been run here yet.)
        let writes = try ResettingServer(resets: [[1, 2]])
        defer { writes.stop() }
        let target = "http://127.0.0.1:\(writes.port)/"
        _ = try await transport.send(TransportRequest(method: "GET", url: target + "a"), timeout: 10)
        do {
            let answer = try await transport.send(
                TransportRequest(method: "POST", url: target + "w", body: Array("{}".utf8)), timeout: 3)
            Issue.record("a write whose connection was reset answered \(answer.status)")
        } catch let error as TransportError {
            #expect(error.url == target + "w", "\(error)")
            if kind == .asyncHTTPClient {
                #expect(error.message.contains("127.0.0.1:\(writes.port)"), "\(error.message)")
            } else {
                #if os(Linux)
                    #expect(error.message.contains("timeout"), "\(error.message)")
                #endif
            }
        }
        #expect(writes.requests == ["1: GET /a", "1: POST /w"], "\(writes.requests)")
        #if os(Linux)
            guard kind == .asyncHTTPClient else { return }
            // AsyncHTTPClient's transport: the third send answers; a fourth is never made.
            let third = try ResettingServer(resets: [[1, 2], [2, 1]])
            defer { third.stop() }
            let thirdRoot = "http://127.0.0.1:\(third.port)/"
            _ = try await transport.send(TransportRequest(method: "GET", url: thirdRoot + "a"), timeout: 10)
            let answered = try await transport.send(TransportRequest(method: "GET", url: thirdRoot + "b"), timeout: 10)
            #expect(answered.status == 200)
            #expect(third.requests == ["1: GET /a", "1: GET /b", "2: GET /b", "3: GET /b"], "\(third.requests)")
            let never = try ResettingServer(resets: [[1, 2], [2, 1], [3, 1]])
            defer { never.stop() }
            let neverRoot = "http://127.0.0.1:\(never.port)/"
            _ = try await transport.send(TransportRequest(method: "GET", url: neverRoot + "a"), timeout: 10)
            await #expect(throws: TransportError.self) {
                _ = try await transport.send(TransportRequest(method: "GET", url: neverRoot + "b"), timeout: 10)
            }
            #expect(never.requests == ["1: GET /a", "1: GET /b", "2: GET /b", "3: GET /b"], "\(never.requests)")
        #endif
    }

    @Test(arguments: TransportKind.available)
    func nothingListeningFailsAtOnceAndIsNamed(kind: TransportKind) async throws {
        let (port, socket) = try Self.refusingPort()
        defer { close(socket) }
        let root = "http://127.0.0.1:\(port)/odata/v4/"
        let transport = kind.make()
        let clock = ContinuousClock()
        let start = clock.now
        do {
            _ = try await transport.send(TransportRequest(method: "GET", url: root + "Products"), timeout: 30)
            Issue.record("a closed port answered")
        } catch let error as TransportError {
            #expect(error.message.contains("connection refused to 127.0.0.1:\(port)"), "\(error.message)")
        }
        print("refused connection failed after \(clock.now - start)")
        do {
            _ = try await transport.send(
                TransportRequest(method: "GET", url: "http://no-such-host.invalid/odata/"), timeout: 30)
            Issue.record("an unknown host answered")
        } catch let error as TransportError {
            #expect(error.message.contains("unknown host no-such-host.invalid"), "\(error.message)")
        }
        await #expect(throws: TransportError.self) {
            _ = try await transport.send(TransportRequest(method: "GET", url: "not a url"), timeout: 30)
        }
    }

    @Test(arguments: TransportKind.available, [false, true])
    func csrfCookiesAndCredentialsWorkThroughTheProvider(kind: TransportKind, v2: Bool) async throws {
        let csrf = CSRFProtection()
        let fixture = try await Fixture.start {
            $0.csrf = csrf
            $0.requiredCredentials = .bearer(["fresh-token"])
        }
        defer { Task { await fixture.stop() } }
        let asked = Asked()
        var parameters = fixture.parameters()
        parameters.authenticator = ClosureAuthenticator { _, refresh in
            asked.append(refresh)
            return .bearer(refresh ? "fresh-token" : "stale-token")
        }
        parameters.customHeaders = ["X-Custom": "kept"]
        parameters.customCookies = ["app-cookie": "a1"]
        let provider = OfflineODataProvider(
            serviceRoot: v2 ? fixture.server.v2Root : fixture.server.v4Root, parameters: parameters,
            transport: kind.make())
        for query in Fixture.queries { try await provider.add(definingQuery: query) }
        try await provider.open()
        #expect(asked.values == [false, true])
        _ = try await provider.execute(
            method: "POST", url: "Contacts",
            body: Array(#"{"FirstName":"Via","LastName":"One","PartnerID":"BP1"}"#.utf8))
        try await provider.upload()
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        // The session ends: 403 Required, a new token (with the session cookie), the batch again.
        csrf.invalidateAll()
        _ = try await provider.execute(
            method: "POST", url: "Contacts",
            body: Array(#"{"FirstName":"Via","LastName":"Two","PartnerID":"BP1"}"#.utf8))
        await fixture.server.service.journal.clear()
        try await provider.upload()
        #expect(try await provider.isRequestQueueEmpty)
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        let journal = await fixture.server.service.journal.requests()
        #expect(journal.filter { $0.hasPrefix("POST $batch") }.count == 2, "refused, then sent again: \(journal)")
        // Every request carried the custom header and cookie beside the session cookie.
        let heads = await fixture.server.service.journal.requestHeaders()
        #expect(heads.count >= 3)
        for head in heads {
            #expect(head.headers["X-Custom"] == "kept", "\(head.request)")
            #expect(head.headers["Cookie"]?.contains("app-cookie=a1") == true, "\(head.request): \(head.headers)")
        }
        #expect(heads.contains { $0.headers["Cookie"]?.contains("oodata-session=") == true })
        let created = try await OnlineODataProvider(
            serviceRoot: fixture.server.v4Root, transport: kind.make(),
            authenticator: StaticCredentials(.bearer("fresh-token"))
        ).read("Contacts?$filter=FirstName eq 'Via'&$orderby=LastName")
        guard case .collection(let contacts) = created else {
            throw TransportTestFailure("not a collection: \(created)")
        }
        #expect(contacts.entities.map { string($0, "LastName") } == ["One", "Two"])
        await provider.close()
    }

    @Test(arguments: TransportKind.available)
    func eachExchangeIsLoggedWithoutQueryValues(kind: TransportKind) async throws {
        let fixture = try await Fixture.start()
        let records = LogCapture()
        let transport = kind.make(logger: records.logger(level: .trace))
        let root = fixture.server.v4Root.absoluteString
        _ = try await transport.send(
            TransportRequest(method: "GET", url: root + "BusinessPartners('BP1')?$select=Phone&sap-client=100"),
            timeout: 10)
        let port = fixture.server.port
        await fixture.stop()
        await #expect(throws: TransportError.self) {
            _ = try await transport.send(
                TransportRequest(method: "GET", url: root + "Products?$filter=Name eq 'x'"), timeout: 10)
        }
        let finished = try #require(records.all.first { $0.message == "HTTP exchange finished" })
        #expect(finished.level == .debug)
        #expect(finished.metadata["method"] == "GET")
        #expect(finished.metadata["status"] == "200")
        #expect(finished.metadata["url"] == "\(root)BusinessPartners(…)?$select=…&sap-client=…")
        #expect(finished.metadata["duration-ms"] != nil && finished.metadata["request-id"] != nil)
        #expect(finished.metadata["transport"] == (kind == .asyncHTTPClient ? "AsyncHTTPClient" : "URLSession"))
        let failed = try #require(records.all.first { $0.message == "HTTP exchange failed" })
        #expect(failed.level == .warning)
        #expect(failed.metadata["url"] == "\(root)Products?$filter=…")
        // Refused, or (AsyncHTTPClient) a kept-alive connection the stopping server closed.
        #expect(failed.metadata["error"]?.contains("127.0.0.1:\(port)") == true, "\(failed)")
        // Keys and query values only at trace.
        for record in records.all where record.level > .trace {
            #expect(
                !record.text.contains("BP1") && !record.text.contains("=100") && !record.text.contains("'x'"),
                "\(record)")
        }
        #expect(records.all.contains { $0.level == .trace && $0.text.contains("BusinessPartners('BP1')") })
    }

    @Test func aResponseOverTheLimitIsRefusedNotCut() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let url = fixture.server.v4Root.absoluteString + "ProductPictures('PIC0')/$value"
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/octet-stream"
        headers["If-Match"] = "*"
        for size in [(1 << 20) + 1, 3 << 20] {
            let put = try await DefaultTransport.make().send(
                TransportRequest(method: "PUT", url: url, headers: headers, body: [UInt8](repeating: 7, count: size)),
                timeout: 10)
            #expect(put.status == 204)
            do {
                let answer = try await URLSessionTransport(responseLimit: 1 << 20).send(
                    TransportRequest(method: "GET", url: url), timeout: 10)
                Issue.record(
                    "\(size) bytes came through a 1 MiB limit: HTTP \(answer.status), \(answer.body.count) bytes")
            } catch let error as TransportError {
                #expect(error.message == "The response is larger than 1048576 bytes", "\(error)")
            }
        }
        let exact = try await URLSessionTransport(responseLimit: 3 << 20).send(
            TransportRequest(method: "GET", url: url), timeout: 10)
        #expect(exact.body.count == 3 << 20)
    }

    @Test func aRedirectToAnotherOriginDropsCredentialsAndSessionHeaders() throws {
        var original = URLRequest(url: try #require(URL(string: "https://backend.example/odata/Products")))
        original.setValue("Bearer t", forHTTPHeaderField: "Authorization")
        var redirected = original
        redirected.url = URL(string: "https://cdn.example/Products")
        redirected.setValue("s=1", forHTTPHeaderField: "Cookie")
        redirected.setValue("tok", forHTTPHeaderField: "X-CSRF-Token")
        redirected.setValue("kept", forHTTPHeaderField: "X-Custom")
        let elsewhere = Redirects.sanitized(redirected, from: original)
        #expect(elsewhere.value(forHTTPHeaderField: "Authorization") == nil)
        #expect(elsewhere.value(forHTTPHeaderField: "Cookie") == nil)
        #expect(elsewhere.value(forHTTPHeaderField: "X-CSRF-Token") == nil)
        #expect(elsewhere.value(forHTTPHeaderField: "X-Custom") == "kept")
        // The same origin (default port spelled out) keeps them.
        redirected.url = URL(string: "https://BACKEND.example:443/odata/v2/Products")
        let same = Redirects.sanitized(redirected, from: original)
        #expect(same.value(forHTTPHeaderField: "Authorization") == "Bearer t")
        #expect(same.value(forHTTPHeaderField: "Cookie") == "s=1")
        // Another port or scheme is another origin.
        redirected.url = URL(string: "http://backend.example/odata/Products")
        #expect(Redirects.sanitized(redirected, from: original).value(forHTTPHeaderField: "Authorization") == nil)
    }

    @Test func linuxURLSessionTimeoutsAreWholeSeconds() {
        #if canImport(FoundationNetworking)
            // FoundationNetworking truncates to whole seconds: 0.5 s would fire at once.
            #expect(URLSessionTransport.effectiveTimeout(0.5) == 1)
            #expect(URLSessionTransport.effectiveTimeout(1.5) == 2)
            #expect(URLSessionTransport.effectiveTimeout(nil) == 60)
        #else
            #expect(URLSessionTransport.effectiveTimeout(1.5) == 1.5)
        #endif
    }

    @Test func setCookieValuesJoinedWithCommasAreSplitAgain() {
        #expect(URLSessionTransport.splitJoinedSetCookie("a=1; Path=/") == ["a=1; Path=/"])
        #expect(
            URLSessionTransport.splitJoinedSetCookie(
                "SAP_SESSIONID=x1; Path=/; HttpOnly, sap-usercontext=sap-client=100; Path=/")
                == ["SAP_SESSIONID=x1; Path=/; HttpOnly", "sap-usercontext=sap-client=100; Path=/"])
        #expect(
            URLSessionTransport.splitJoinedSetCookie("id=a3f; Expires=Wed, 21 Oct 2026 07:28:00 GMT; Secure, lang=de")
                == ["id=a3f; Expires=Wed, 21 Oct 2026 07:28:00 GMT; Secure", "lang=de"])
    }

    @Test func urlsAreRedactedForLogs() {
        let cases: [(String, String)] = [
            (
                "https://h/odata/Customers('ALFKI')/Orders?$filter=City eq 'Rome'&$top=5",
                "https://h/odata/Customers(…)/Orders?$filter=…&$top=…"
            ),
            ("https://user:secret@h/odata/$batch", "https://h/odata/$batch"),
            ("Items(OrderID='a(b',Line=1)/x", "Items(…)/x"),
            ("Set('it''s (x')/Nav", "Set(…)/Nav"),
            // A `?` or `#` inside a key is not the query or the fragment.
            ("Customers('a?b#c')/Orders?$top=1", "Customers(…)/Orders?$top=…"),
            // Percent-encoded parentheses and quotes.
            ("Customers%28'ALFKI'%29/Orders", "Customers(…)/Orders"),
            ("Customers(%27a)b%27)/x", "Customers(…)/x"),
            // `://` inside a relative URL's key is not a scheme.
            ("/odata/v4/Links('http://u:p@x/')", "/odata/v4/Links(…)"),
            ("X?ALFKI&$count&sap-client=100", "X?…&$count&sap-client=…"),
            ("Products#secret", "Products"),
            ("Orders(", "Orders(…)"),
        ]
        for (url, expected) in cases { #expect(OfflineODataLogging.redacted(url) == expected, "\(url)") }
        // Linear: a long key and many options.
        let long = "Set('" + String(repeating: "(a", count: 50_000) + "')?" + String(repeating: "a=b&", count: 50_000)
        #expect(OfflineODataLogging.redacted(long).hasPrefix("Set(…)?a=…&a=…"))
    }
}

struct TransportTestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
