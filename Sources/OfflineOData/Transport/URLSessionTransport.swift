public import Foundation
public import Logging
import ODataCore

#if canImport(FoundationNetworking)
    public import FoundationNetworking
#endif

/// A ``Transport`` over `URLSession`: the default on Apple platforms, and available on Linux
/// (FoundationNetworking).
///
/// It keeps the contracts of every transport here:
/// - `timeout` is a time without network activity (URLSession's own request timeout): a slow
///   answer that keeps coming does not fail, a stalled one does.
/// - A failure to connect fails at once and is named (`connection refused to host:port`,
///   `unknown host h`, a TLS failure) as a ``TransportError``.
/// - Cancelling the calling task cancels the URLSession task and throws `CancellationError`.
/// - Cookies and caching are the provider's: URLSession's cookie store and URL cache are not
///   used for these requests, so the session cookies and CSRF token the provider keeps
///   and the app's custom cookies go exactly as set.
/// - A response larger than 1 GiB is refused while it arrives.
/// - A redirect to another origin (scheme, host, port) goes without `Authorization`,
///   `Proxy-Authorization`, `Cookie` and `X-CSRF-Token`.
///
/// The transport owns its session unless the app passes one: use ``init(session:logger:)`` to
/// send through a session the app configured (proxies, `URLCredential`s, protocol classes, a
/// delegate for authentication challenges). Each transport has its own session, so providers
/// with transports of their own do not share connections.
public final class URLSessionTransport: Transport {
    private let session: URLSession
    /// The delegate of a session this transport made; nil for an app's session.
    private let router: SessionRouter?
    private let log: TransportLog
    /// The largest response taken (``maximumResponseSize``; smaller in tests).
    let responseLimit: Int

    /// The timeout when the caller gives none, in seconds.
    public static let defaultTimeout: TimeInterval = 60

    /// The largest response accepted, in bytes (1 GiB).
    public static let maximumResponseSize = 1 << 30

    /// A transport with its own session made from a copy of `configuration` (an ephemeral one
    /// by default), with cookie storage and URL cache switched off: the provider keeps the
    /// session cookies itself, and answers are never cached outside the encrypted store.
    public convenience init(
        configuration: URLSessionConfiguration? = nil, logger: Logger = OfflineODataLogging.disabled
    ) {
        let given = configuration ?? URLSessionConfiguration.ephemeral
        let copy = (given.copy() as? URLSessionConfiguration) ?? given
        copy.httpCookieStorage = nil
        copy.httpShouldSetCookies = false
        copy.urlCache = nil
        copy.requestCachePolicy = .reloadIgnoringLocalCacheData
        let router = SessionRouter()
        self.init(
            session: URLSession(configuration: copy, delegate: router, delegateQueue: nil), router: router,
            logger: logger, responseLimit: Self.maximumResponseSize)
    }

    /// A transport of its own session that refuses responses over `responseLimit` bytes.
    convenience init(responseLimit: Int) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.urlCache = nil
        let router = SessionRouter()
        self.init(
            session: URLSession(configuration: configuration, delegate: router, delegateQueue: nil), router: router,
            logger: OfflineODataLogging.disabled, responseLimit: responseLimit)
    }

    private init(session: URLSession, router: SessionRouter?, logger: Logger, responseLimit: Int) {
        self.session = session
        self.router = router
        self.log = TransportLog(logger: logger, transport: "URLSession")
        self.responseLimit = responseLimit
    }

    /// A transport that sends through `session`, which the app made and keeps configured.
    ///
    /// On Apple platforms the requests go through `session` itself (its delegate still answers
    /// authentication challenges); each request switches off the session's cookie handling,
    /// and no answer is written to its URL cache. On Linux, where FoundationNetworking would
    /// still apply the session's cookie storage to every request, the transport sends through a
    /// session of its own made from a copy of `session.configuration` (proxies, headers,
    /// protocol classes and timeouts carry over; cookies and cache are off; the session's
    /// delegate is not used).
    public convenience init(session: URLSession, logger: Logger = OfflineODataLogging.disabled) {
        #if canImport(FoundationNetworking)
            self.init(configuration: session.configuration, logger: logger)
        #else
            self.init(session: session, router: nil, logger: logger, responseLimit: Self.maximumResponseSize)
        #endif
    }

    deinit {
        // A session keeps its delegate until it is invalidated.
        if router != nil { session.finishTasksAndInvalidate() }
    }

    /// Sends the request; a connection failure, a stall longer than `timeout` or a response
    /// over ``maximumResponseSize`` becomes a ``TransportError``.
    public func send(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
        try await log.exchange(request) { try await perform(request, idle: Self.effectiveTimeout(timeout)) }
    }

    /// The timeout a request gets: `timeout` (``defaultTimeout`` when nil). On Linux,
    /// FoundationNetworking counts whole seconds (it truncates, so 0.5 s would be no time at
    /// all): the timeout is rounded up to whole seconds, at least 1.
    static func effectiveTimeout(_ timeout: TimeInterval?) -> TimeInterval {
        let idle = max(timeout ?? defaultTimeout, 0.01)
        #if canImport(FoundationNetworking)
            return max(1, idle.rounded(.up))
        #else
            return idle
        #endif
    }

    private func perform(_ request: TransportRequest, idle: TimeInterval) async throws -> TransportResponse {
        guard let url = URL(string: request.url), url.scheme != nil, url.host != nil else {
            throw TransportError("not an absolute http(s) URL", url: request.url)
        }
        try Task.checkCancellation()
        var urlRequest = URLRequest(url: url)
        urlRequest.httpMethod = request.method
        urlRequest.timeoutInterval = idle
        urlRequest.httpShouldHandleCookies = false
        urlRequest.cachePolicy = .reloadIgnoringLocalCacheData
        for field in request.headers { urlRequest.addValue(field.value, forHTTPHeaderField: field.name) }
        if !request.body.isEmpty { urlRequest.httpBody = Data(request.body) }

        let exchange = Exchange(limit: responseLimit)
        let task: URLSessionDataTask
        task = session.dataTask(with: urlRequest)
        if let router {
            router.register(exchange, for: task)
        } else {
            #if !canImport(FoundationNetworking)
                task.delegate = exchange
            #endif
        }
        let outcome: Result<(HTTPURLResponse, Data), any Error> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                exchange.start(continuation)
                task.resume()
            }
        } onCancel: {
            task.cancel()
        }
        switch outcome {
        case .success(let (response, body)):
            return TransportResponse(
                status: response.statusCode, headers: Self.headers(of: response), body: [UInt8](body))
        case .failure(let error):
            if exchange.tooLarge {
                let limit = responseLimit == 1 << 30 ? "1 GiB" : "\(responseLimit) bytes"
                throw TransportError("The response is larger than \(limit)", url: request.url)
            }
            if let urlError = error as? URLError, urlError.code == .cancelled, Task.isCancelled {
                throw CancellationError()
            }
            throw TransportError(Self.describe(error, url: url, idle: idle), url: request.url)
        }
    }

    /// The response's header fields; a `Set-Cookie` that URLSession joined with commas is split
    /// into one field per cookie again. URLSession decodes a compressed body itself: its
    /// `Content-Encoding` and the compressed `Content-Length` are left out.
    static func headers(of response: HTTPURLResponse) -> HTTPHeaders {
        var headers = HTTPHeaders()
        var fields = response.allHeaderFields.compactMap { key, value -> (String, String)? in
            guard let name = key as? String else { return nil }
            return (name, value as? String ?? String(describing: value))
        }
        if fields.contains(where: { $0.0.lowercased() == "content-encoding" && $0.1.lowercased() != "identity" }) {
            fields.removeAll { ["content-encoding", "content-length"].contains($0.0.lowercased()) }
        }
        for (name, value) in fields.sorted(by: { $0.0.lowercased() < $1.0.lowercased() }) {
            if name.lowercased() == "set-cookie" {
                for cookie in splitJoinedSetCookie(value) { headers.add(name, cookie) }
            } else {
                headers.add(name, value)
            }
        }
        return headers
    }

    /// Splits `Set-Cookie` values joined with `,`: a comma starts a new cookie only when a
    /// `name=` follows it before any `;` (so the comma of an `Expires` date does not).
    static func splitJoinedSetCookie(_ value: String) -> [String] {
        var cookies: [String] = []
        var current = ""
        var rest = Substring(value)
        while let comma = rest.firstIndex(of: ",") {
            let after = rest[rest.index(after: comma)...]
            let upToBreak = after.prefix { $0 != ";" && $0 != "," }
            let name = upToBreak.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let trimmed = name.trimmingCharacters(in: .whitespaces)
            let startsCookie = upToBreak.contains("=") && !trimmed.isEmpty && !trimmed.contains(" ")
            current += rest[..<comma]
            if startsCookie {
                cookies.append(current.trimmingCharacters(in: .whitespaces))
                current = ""
            } else {
                current += ","
            }
            rest = after
        }
        current += rest
        let last = current.trimmingCharacters(in: .whitespaces)
        if !last.isEmpty { cookies.append(last) }
        return cookies
    }

    /// Names the cause of a failed exchange as the other transports do.
    static func describe(_ error: any Error, url: URL, idle: TimeInterval) -> String {
        let host = url.host ?? "?"
        let port = url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
        let nsError = error as NSError
        let detail = (nsError.userInfo[NSLocalizedDescriptionKey] as? String) ?? nsError.localizedDescription
        guard let code = (error as? URLError)?.code else { return "the request to \(host):\(port) failed: \(detail)" }
        switch code {
        case .timedOut:
            return "No data was sent or received within the timeout (timeout \(idle) s)"
        case .cannotConnectToHost:
            return "connection refused to \(host):\(port)"
        case .cannotFindHost, .dnsLookupFailed:
            return "unknown host \(host): \(detail)"
        case .secureConnectionFailed, .serverCertificateUntrusted, .serverCertificateHasBadDate,
            .serverCertificateNotYetValid, .serverCertificateHasUnknownRoot, .clientCertificateRejected,
            .clientCertificateRequired:
            return "TLS failure with \(host):\(port): \(detail)"
        case .networkConnectionLost:
            return "the connection to \(host):\(port) closed before the response was complete: \(detail)"
        case .notConnectedToInternet:
            return "no network connection for \(host):\(port): \(detail)"
        default:
            return "the request to \(host):\(port) failed: \(detail)"
        }
    }
}

/// Routes the callbacks of a session this transport made to the exchange of each task.
private final class SessionRouter: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var exchanges: [Int: Exchange] = [:]

    func register(_ exchange: Exchange, for task: URLSessionTask) {
        lock.withLock { exchanges[task.taskIdentifier] = exchange }
    }

    private func exchange(_ task: URLSessionTask, remove: Bool = false) -> Exchange? {
        lock.withLock { remove ? exchanges.removeValue(forKey: task.taskIdentifier) : exchanges[task.taskIdentifier] }
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        exchange(dataTask)?.receive(response)
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        exchange(dataTask)?.receive(data, task: dataTask)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        exchange(task, remove: true)?.complete(task, error: error)
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(Redirects.sanitized(request, from: task.originalRequest))
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, willCacheResponse proposedResponse: CachedURLResponse,
        completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void
    ) {
        completionHandler(nil)
    }
}

/// What a redirect keeps of a request.
enum Redirects {
    /// The headers that carry credentials or session state: not sent to another origin.
    static let originBound: Set<String> = ["authorization", "proxy-authorization", "cookie", "x-csrf-token"]

    /// `request` as the redirect sends it: without ``originBound`` headers when its origin
    /// (scheme, host, port) differs from `original`'s.
    static func sanitized(_ request: URLRequest, from original: URLRequest?) -> URLRequest {
        guard let target = request.url, origin(of: target) != original?.url.map(origin(of:)) else { return request }
        var request = request
        for name in (request.allHTTPHeaderFields ?? [:]).keys where originBound.contains(name.lowercased()) {
            request.setValue(nil, forHTTPHeaderField: name)
        }
        return request
    }

    static func origin(of url: URL) -> String {
        let scheme = url.scheme?.lowercased() ?? ""
        return "\(scheme)://\(url.host?.lowercased() ?? ""):\(url.port ?? (scheme == "https" ? 443 : 80))"
    }
}

/// One request's response as it arrives, and the continuation that awaits it.
private final class Exchange: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private let limit: Int
    private var response: URLResponse?
    private var body = Data()
    private var continuation: CheckedContinuation<Result<(HTTPURLResponse, Data), any Error>, Never>?
    /// The outcome when it came before the continuation was set.
    private var early: Result<(HTTPURLResponse, Data), any Error>?
    private var _tooLarge = false

    init(limit: Int) { self.limit = limit }

    /// The response went over the limit and its task was cancelled.
    var tooLarge: Bool { lock.withLock { _tooLarge } }

    func start(_ continuation: CheckedContinuation<Result<(HTTPURLResponse, Data), any Error>, Never>) {
        let ready: Result<(HTTPURLResponse, Data), any Error>? = lock.withLock {
            if let early { return early }
            self.continuation = continuation
            return nil
        }
        if let ready { continuation.resume(returning: ready) }
    }

    func receive(_ response: URLResponse) {
        lock.withLock {
            self.response = response
            if let length = (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Length").flatMap(
                Int.init),
                length > 0, length <= limit
            {
                body.reserveCapacity(length)
            }
        }
    }

    func receive(_ data: Data, task: URLSessionTask) {
        let over = lock.withLock {
            guard !_tooLarge else { return false }
            if body.count + data.count > limit {
                _tooLarge = true
                body = Data()
                return true
            }
            body.append(data)
            return false
        }
        if over { task.cancel() }
    }

    /// The end of a task that delivered its callbacks here.
    func complete(_ task: URLSessionTask, error: (any Error)?) {
        let outcome: Result<(HTTPURLResponse, Data), any Error> = lock.withLock {
            // Over the limit with the last part (the cancel came too late to fail the task).
            if _tooLarge { return .failure(URLError(.cancelled)) }
            if let error { return .failure(error) }
            guard let http = (response ?? task.response) as? HTTPURLResponse else {
                return .failure(URLError(.badServerResponse))
            }
            return .success((http, body))
        }
        finish(outcome)
    }

    private func finish(_ outcome: Result<(HTTPURLResponse, Data), any Error>) {
        let waiting = lock.withLock {
            let waiting = continuation
            continuation = nil
            if waiting == nil { early = outcome }
            return waiting
        }
        waiting?.resume(returning: outcome)
    }

    // As a task's own delegate (an app's session on Apple platforms), with the same answers as
    // `SessionRouter`.
    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        receive(response)
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        receive(data, task: dataTask)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        complete(task, error: error)
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(Redirects.sanitized(request, from: task.originalRequest))
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, willCacheResponse proposedResponse: CachedURLResponse,
        completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void
    ) {
        completionHandler(nil)
    }
}
