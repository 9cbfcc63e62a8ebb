#if os(Linux)
public import AsyncHTTPClient
public import Foundation
public import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ODataCore

/// The default transport on Linux, on AsyncHTTPClient.
///
/// `timeout` is a time without network activity, as with URLSession: a request fails when no
/// byte has been sent or received for that long (60 s when nil), however long the whole
/// exchange takes while data flows. The connection is probed for activity every 10 s, and more
/// often for timeouts below 30 s (four times per timeout), so a stall is noticed within a
/// quarter of the timeout after it expires. Time the process itself was stalled (a probe that
/// wakes late: the app suspended, its threads busy) does not count as network silence.
public final class AsyncHTTPClientTransport: Transport {
    private let client: HTTPClient
    private let log: TransportLog

    /// The timeout when the caller gives none, in seconds.
    public static let defaultTimeout: TimeInterval = 60

    /// Uses `client`, or by default a client shared by these transports that fails at once when
    /// no connection can be made (refused, unknown host, TLS failure) instead of retrying until
    /// a deadline: an offline app learns it is offline in milliseconds, and its queue is kept.
    /// Each exchange is logged to `logger` (see ``OfflineODataLogging``).
    public init(client: HTTPClient? = nil, logger: Logger = OfflineODataLogging.disabled) {
        self.client = client ?? Self.failFast
        self.log = TransportLog(logger: logger, transport: "AsyncHTTPClient")
    }

    /// The default client: the singleton's configuration, without retries of a failed connect.
    private static let failFast: HTTPClient = {
        var configuration = HTTPClient.Configuration.singletonConfiguration
        configuration.connectionPool.retryConnectionEstablishment = false
        // The transport's own idle timeout applies (the caller's `timeout`); the client's read
        // timeout (60 s) would cut an answer the caller allows longer, such as a store a sync
        // gateway builds before it answers.
        configuration.timeout.read = nil
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }()

    /// How often the connection is probed for activity for a given timeout.
    public static func probeInterval(for timeout: TimeInterval) -> TimeInterval {
        timeout < 30 ? max(timeout / 4, 0.01) : 10
    }

    /// Sends the request; a connection failure or a stall longer than `timeout` becomes a
    /// `TransportError`.
    public func send(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
        try await log.exchange(request) { try await perform(request, timeout: timeout) }
    }

    /// The server closed a connection before any answer came: a kept-alive connection it had
    /// closed meanwhile (a restart), which the request found first.
    private struct ClosedBeforeAnswer: Error {
        var underlying: any Error
    }

    /// How often a GET or HEAD is sent in all when its connection closes before any answer.
    static let readAttempts = 3

    /// Whether `error`, thrown before any byte of the answer came, says that the connection was
    /// closed by the other end: cleanly (EOF) or with a reset. A kept-alive connection that a
    /// stopping backend closed fails this way when a request finds it first: with a reset when
    /// the request's bytes reach a socket the backend has already closed.
    static func closedBeforeAnswer(_ error: any Error) -> Bool {
        if let client = error as? HTTPClientError, client == .remoteConnectionClosed { return true }
        if let io = error as? IOError { return io.errnoCode == ECONNRESET || io.errnoCode == EPIPE }
        if let channel = error as? ChannelError {
            switch channel {
            case .eof, .ioOnClosedChannel, .outputClosed: return true
            default: return false
            }
        }
        return false
    }

    /// Sends once; a GET or HEAD whose connection closed before any answer is sent again, on a
    /// new connection, up to ``readAttempts`` times in all (URLSession also resends on a reused
    /// connection that died): a backend restart drops every kept-alive connection of the pool,
    /// and a read must not fail for that. Writes are never sent twice here.
    private func perform(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
        let idempotent = request.method == "GET" || request.method == "HEAD"
        var attempt = 1
        while true {
            do {
                return try await performOnce(request, timeout: timeout)
            } catch let closed as ClosedBeforeAnswer {
                guard idempotent, attempt < Self.readAttempts else {
                    throw TransportError(Self.describe(closed.underlying, url: request.url), url: request.url)
                }
                attempt += 1
            }
        }
    }

    private func performOnce(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
        // A task cancelled before it sends does not send: AsyncHTTPClient may start the request
        // on its event loop before it sees the cancellation.
        try Task.checkCancellation()
        let idle = max(timeout ?? Self.defaultTimeout, 0.01)
        let activity = Activity()
        var http = HTTPClientRequest(url: request.url)
        http.method = HTTPMethod(rawValue: request.method)
        for field in request.headers { http.headers.add(name: field.name, value: field.value) }
        if !request.body.isEmpty {
            // Sent in parts, so that a large body on a slow network counts as activity.
            http.body = request.body.count <= BodyParts.size
                ? .bytes(ByteBuffer(bytes: request.body))
                : .stream(BodyParts(bytes: request.body, activity: activity), length: .known(Int64(request.body.count)))
        }
        let client = self.client
        let prepared = http
        let url = request.url
        do {
            return try await withThrowingTaskGroup(of: TransportResponse?.self) { group in
                group.addTask {
                    let response: HTTPClientResponse
                    do {
                        response = try await client.execute(prepared, deadline: .distantFuture)
                    } catch where Self.closedBeforeAnswer(error) {
                        throw ClosedBeforeAnswer(underlying: error)
                    }
                    activity.touch()
                    var headers = ODataCore.HTTPHeaders()
                    for field in response.headers { headers.add(field.name, field.value) }
                    var body: [UInt8] = []
                    if let length = response.headers.first(name: "Content-Length").flatMap(Int.init), length > 0 {
                        body.reserveCapacity(Swift.min(length, 1 << 30))
                    }
                    for try await part in response.body {
                        activity.touch()
                        guard body.count + part.readableBytes <= 1 << 30 else { throw TransportError("The response is larger than 1 GiB", url: url) }
                        body.append(contentsOf: part.readableBytesView)
                    }
                    return TransportResponse(status: Int(response.status.code), headers: headers, body: body)
                }
                group.addTask {
                    // The probe: ends the request when nothing has moved for `idle` seconds.
                    let interval = Self.probeInterval(for: idle)
                    while true {
                        let asleep = ContinuousClock.now
                        try await Task.sleep(nanoseconds: UInt64(interval * 1_000_000_000))
                        // A probe that wakes late found the process stalled (suspended, or its
                        // threads busy), not the network: that time does not count as quiet.
                        let late = (ContinuousClock.now - asleep).timeInterval - interval
                        if late > interval / 2 { activity.excuse(late) }
                        let quiet = activity.secondsSinceLast()
                        if quiet >= idle {
                            throw TransportError("No data was sent or received for \(String(format: "%.1f", quiet)) s (timeout \(idle) s)", url: url)
                        }
                    }
                }
                defer { group.cancelAll() }
                while let result = try await group.next() {
                    if let result { return result }
                }
                throw TransportError("The request ended without a response", url: request.url)
            }
        } catch let error as TransportError {
            throw error
        } catch let closed as ClosedBeforeAnswer {
            if Task.isCancelled { throw CancellationError() }
            throw closed
        } catch {
            // Cancelling the calling task is not a network failure.
            if error is CancellationError || Task.isCancelled { throw CancellationError() }
            throw TransportError(Self.describe(error, url: request.url), url: request.url)
        }
    }

    /// Names the cause of a failed exchange: `connection refused to host:port`, `unknown host
    /// h`, a TLS failure, or the connection closing early.
    static func describe(_ error: any Error, url: String) -> String {
        let components = URLComponents(string: url)
        let host = components?.host ?? "?"
        let port = components?.port ?? (components?.scheme == "https" ? 443 : 80)
        var text = String(describing: error)
        if let connection = error as? NIOConnectionError {
            if connection.connectionErrors.isEmpty, connection.dnsAError != nil || connection.dnsAAAAError != nil {
                return "unknown host \(host): \(connection.dnsAError.map { String(describing: $0) } ?? "no address")"
            }
            text = connection.connectionErrors.map { String(describing: $0.error) }.joined(separator: "; ")
        }
        if let io = error as? IOError, io.errnoCode == ECONNREFUSED { return "connection refused to \(host):\(port)" }
        let lower = text.lowercased()
        if lower.contains("connection refused") || lower.contains("econnrefused") { return "connection refused to \(host):\(port)" }
        if lower.contains("getaddrinfo") || lower.contains("unknown host") || lower.contains("name or service not known")
            || lower.contains("nodename nor servname") || lower.contains("no address") {
            return "unknown host \(host): \(text)"
        }
        if lower.contains("ssl") || lower.contains("tls") || lower.contains("handshake") || lower.contains("certificate") {
            return "TLS failure with \(host):\(port): \(text)"
        }
        if lower.contains("remoteconnectionclosed") || lower.contains("connection reset") || lower.contains("eof") {
            return "the connection to \(host):\(port) closed before the response was complete: \(text)"
        }
        return "the request to \(host):\(port) failed: \(text)"
    }
}

/// When a request last sent or received a byte (on a monotonic clock: a change of the
/// wall-clock time is not a stall).
private final class Activity: @unchecked Sendable {
    private let lock = NSLock()
    private var last = ContinuousClock.now

    func touch() { lock.withLock { last = .now } }
    /// Moves the last activity later by `seconds` (never past now).
    func excuse(_ seconds: TimeInterval) {
        lock.withLock { last = Swift.min(.now, last.advanced(by: .milliseconds(Int64(seconds * 1000)))) }
    }
    func secondsSinceLast() -> TimeInterval { lock.withLock { (.now - last).timeInterval } }
}

/// A request body handed to the client 64 KiB at a time, each part marking activity.
private struct BodyParts: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    static let size = 65_536
    let bytes: [UInt8]
    let activity: Activity

    struct AsyncIterator: AsyncIteratorProtocol {
        let bytes: [UInt8]
        let activity: Activity
        var offset = 0

        mutating func next() async throws -> ByteBuffer? {
            guard offset < bytes.count else { return nil }
            let end = Swift.min(bytes.count, offset + BodyParts.size)
            activity.touch()
            defer { offset = end }
            return ByteBuffer(bytes: bytes[offset..<end])
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(bytes: bytes, activity: activity) }
}
#endif
