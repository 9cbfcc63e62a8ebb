import Foundation
import ODataCore
import Logging

/// Credentials for one request to the backend. Printed, they show the scheme and user only.
public enum ODataCredentials: Sendable, Hashable, CustomStringConvertible {
    /// HTTP Basic authentication.
    case basic(user: String, password: String)
    /// A bearer token (OAuth 2.0 access token, JWT, …).
    case bearer(String)

    /// `basic(alice, ***)` or `bearer(***)`: never the secret.
    public var description: String {
        switch self {
        case .basic(let user, _): "basic(\(user), ***)"
        case .bearer: "bearer(***)"
        }
    }

    /// The `Authorization` header value.
    public var authorization: String {
        switch self {
        case .basic(let user, let password): "Basic " + Data((user + ":" + password).utf8).base64EncodedString()
        case .bearer(let token): "Bearer " + token
        }
    }
}

/// Supplies the credentials the providers send with every request to the backend.
///
/// The providers ask once, before their first request, with `refresh` false, and keep the
/// answer. When the backend answers `401 Unauthorized`, they ask again with `refresh` true (log
/// in again, refresh an OAuth token) and resend the request once; a second `401` ends the
/// operation with ``OfflineODataError/Code/unauthorized`` and leaves the request queue as it
/// was. Return nil to send no `Authorization` header.
public protocol ODataAuthenticator: Sendable {
    /// The credentials for requests to `serviceRoot`; `refresh` after a `401`.
    func credentials(for serviceRoot: String, refresh: Bool) async throws -> ODataCredentials?
}

/// Fixed credentials: a refresh gives the same ones again (so a wrong password fails at the
/// second `401`).
public struct StaticCredentials: ODataAuthenticator {
    /// The credentials sent.
    public var credentials: ODataCredentials

    /// Sends `credentials` with every request.
    public init(_ credentials: ODataCredentials) { self.credentials = credentials }

    /// The fixed credentials, whether or not `refresh` is asked.
    public func credentials(for serviceRoot: String, refresh: Bool) async throws -> ODataCredentials? { credentials }
}

/// Credentials from a closure, for example one that asks the app's OAuth client for a fresh
/// access token when `refresh` is true.
public struct ClosureAuthenticator: ODataAuthenticator {
    private let body: @Sendable (_ serviceRoot: String, _ refresh: Bool) async throws -> ODataCredentials?

    /// Calls `body` for the credentials.
    public init(_ body: @escaping @Sendable (_ serviceRoot: String, _ refresh: Bool) async throws -> ODataCredentials?)
    {
        self.body = body
    }

    /// What the closure answers.
    public func credentials(for serviceRoot: String, refresh: Bool) async throws -> ODataCredentials? {
        try await body(serviceRoot, refresh)
    }
}

/// One conversation with a backend, shared by every request a provider sends: what SAP Gateway
/// (and CAP or others behind SAP's app router) expect across requests.
///
/// - **Session cookies**: cookies the backend sets are kept and sent back (custom cookies of
///   the same name win).
/// - **CSRF token**: while there is none, GETs ask for one (`X-CSRF-Token: Fetch`); before the
///   first modifying request (`POST`, `PUT`, `PATCH`, `MERGE`, `DELETE`, so also `$batch`)
///   without one, a GET of the service root fetches it. Modifying requests carry it. A `403`
///   with `X-CSRF-Token: Required` fetches a new one and resends once (repeatable-request IDs
///   make the resend safe). A backend that gives no token is not asked again until it requires one.
/// - **Credentials** from an ``ODataAuthenticator``, refreshed once after a `401`.
actor BackendSession {
    let transport: any Transport
    let authenticator: (any ODataAuthenticator)?
    let serviceRoot: String
    /// False: no CSRF token is fetched or sent.
    let csrfProtection: Bool
    /// The longest `Retry-After` of a 429 that is waited out before the request goes again.
    let maximumRetryAfter: Double

    private var cookies: [String: String] = [:]
    private var csrfToken: String?
    /// The backend was asked for a token and gave none.
    private var csrfTokenUnavailable = false
    private var credentials: ODataCredentials?
    private var credentialsAsked = false
    /// Counts the answers of the authenticator: a request that got `401` with credentials older
    /// than the current ones is resent without asking again.
    private var credentialsVersion = 0
    /// The authenticator's answer being awaited: concurrent requests share one ask.
    private var pendingCredentials: (ask: Task<ODataCredentials?, any Error>, version: Int)?

    let logger: Logger

    init(
        transport: any Transport, serviceRoot: String, authenticator: (any ODataAuthenticator)?, csrfProtection: Bool,
        maximumRetryAfter: Double = 60, logger: Logger = OfflineODataLogging.disabled
    ) {
        self.logger = logger
        self.maximumRetryAfter = maximumRetryAfter
        self.transport = transport
        self.serviceRoot = serviceRoot
        self.authenticator = authenticator
        self.csrfProtection = csrfProtection
    }

    static let modifyingMethods: Set<String> = ["POST", "PUT", "PATCH", "MERGE", "DELETE"]

    /// Scheme, host and port (defaulted by scheme), lowercased: what must match for a request to
    /// carry the session's credentials.
    static func origin(of url: String) -> String? {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            let host = components.host?.lowercased()
        else { return nil }
        let port = components.port ?? (scheme == "https" ? 443 : 80)
        return "\(scheme)://\(host):\(port)"
    }

    /// Sends `request`; `tokenRequest` is the GET that fetches a CSRF token when one is needed.
    /// A request to another origin than the service root's (a next link naming another host,
    /// `sendStore` to a support server) goes without credentials, cookies or CSRF token, and
    /// what it answers is not kept. `retryThrottled` false: a 429 is answered at once.
    func send(
        _ request: TransportRequest, timeout: TimeInterval?, tokenRequest: TransportRequest,
        retryThrottled: Bool = true
    ) async throws -> TransportResponse {
        // A 429 (a gateway's or a backend's throttling) was not processed: it is sent again
        // after its Retry-After, up to three times, while that is within `maximumRetryAfter`
        // (at most an hour; 0, negative or not a number: never). A Retry-After of 0 still waits
        // a quarter of a second. A change is sent again only when that is safe: it carries a
        // Repeatability-Request-ID (applied once whatever happens), or the 429 is a sync
        // gateway's (OOData-Gateway: its throttle answers before anything is done); a
        // backend's 429 to a plain POST may come after the work (RFC 6585 does not say).
        var response = try await sendOnce(request, timeout: timeout, tokenRequest: tokenRequest)
        let limit = maximumRetryAfter > 0 ? min(maximumRetryAfter, 3600) : 0
        let idempotent = ["GET", "HEAD", "OPTIONS"].contains(request.method.uppercased())
        let repeatable = request.headers["Repeatability-Request-ID"] != nil
        var waits = 0
        while retryThrottled, limit > 0, response.status == 429, waits < 3,
            idempotent || repeatable || response.headers["OOData-Gateway"] != nil,
            let asked = Self.retryAfter(response.headers["Retry-After"]), asked <= limit
        {
            let seconds = max(asked, 0.25)
            waits += 1
            logger.notice(
                "Answered 429: waiting Retry-After and sending again",
                metadata: [
                    "seconds": .stringConvertible(seconds), "url": .string(OfflineODataLogging.redacted(request.url)),
                ])
            try await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
            response = try await sendOnce(request, timeout: timeout, tokenRequest: tokenRequest)
        }
        return response
    }

    /// A `Retry-After` value in seconds from now: delta-seconds or an HTTP date (RFC 9110
    /// §10.2.3); nil when it is neither.
    static func retryAfter(_ value: String?, now: Date = Date()) -> Double? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int(value) { return seconds >= 0 ? Double(seconds) : nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return max(0, date.timeIntervalSince(now))
    }

    private func sendOnce(
        _ request: TransportRequest, timeout: TimeInterval?, tokenRequest: TransportRequest
    ) async throws -> TransportResponse {
        guard Self.origin(of: request.url) == Self.origin(of: serviceRoot) else {
            return try await transport.send(request, timeout: timeout)
        }
        let modifying = Self.modifyingMethods.contains(request.method.uppercased())
        if modifying, csrfProtection, csrfToken == nil, !csrfTokenUnavailable {
            try await fetchToken(tokenRequest, timeout: timeout)
        }
        var response = try await exchange(request, timeout: timeout, modifying: modifying)
        if modifying, csrfProtection, response.status == 403,
            response.headers["X-CSRF-Token"]?.lowercased() == "required"
        {
            // The token expired or the session changed: a new one, and the request once more.
            logger.notice(
                "CSRF token required again: fetching a new one and resending",
                metadata: [
                    "method": .string(request.method), "url": .string(OfflineODataLogging.redacted(request.url)),
                ])
            csrfToken = nil
            csrfTokenUnavailable = false
            try await fetchToken(tokenRequest, timeout: timeout)
            response = try await exchange(request, timeout: timeout, modifying: modifying)
        }
        return response
    }

    private func fetchToken(_ request: TransportRequest, timeout: TimeInterval?) async throws {
        var fetch = request
        fetch.method = "GET"
        fetch.body = []
        fetch.headers["X-CSRF-Token"] = "Fetch"
        _ = try await exchange(fetch, timeout: timeout, modifying: false)
        if csrfToken == nil { csrfTokenUnavailable = true }
        logger.debug("CSRF token fetched", metadata: ["token-given": .stringConvertible(csrfToken != nil)])
    }

    /// One request with credentials and cookies, resent once with refreshed credentials after
    /// a `401`; a `401` after that is thrown as `unauthorized`.
    private func exchange(
        _ request: TransportRequest, timeout: TimeInterval?, modifying: Bool
    ) async throws -> TransportResponse {
        // A request that brings its own Authorization header is sent as it is.
        let authenticating = authenticator != nil && request.headers["Authorization"] == nil
        if !credentialsAsked, authenticating { try await obtainCredentials(refresh: false, seen: credentialsVersion) }
        let version = credentialsVersion
        var sent = prepared(request, modifying: modifying)
        var response = try await transport.send(sent, timeout: timeout)
        absorb(response, askedForToken: sent.headers["X-CSRF-Token"] == "Fetch")
        if response.status == 401, authenticating {
            logger.notice(
                "Backend answered 401: refreshing the credentials and resending",
                metadata: [
                    "method": .string(request.method), "url": .string(OfflineODataLogging.redacted(request.url)),
                ])
            try await obtainCredentials(refresh: true, seen: version)
            sent = prepared(request, modifying: modifying)
            response = try await transport.send(sent, timeout: timeout)
            absorb(response, askedForToken: sent.headers["X-CSRF-Token"] == "Fetch")
        }
        if response.status == 401 {
            let detail = (try? ODataError.parse(response.body, httpStatus: 401)).map { ": \($0.message)" } ?? ""
            let tried =
                authenticating
                ? "the credentials were refreshed once"
                : request.headers["Authorization"] != nil
                    ? "the request's own Authorization header" : "no authenticator is set"
            throw OfflineODataError(
                .unauthorized, "\(request.method) \(request.url) answered 401 Unauthorized (\(tried))\(detail)",
                httpStatus: 401)
        }
        return response
    }

    /// Asks the authenticator, once for all requests waiting at the same time; nothing when
    /// the credentials changed since `seen` (another request refreshed them meanwhile).
    private func obtainCredentials(refresh: Bool, seen: Int) async throws {
        guard let authenticator, credentialsVersion == seen else { return }
        let pending: (ask: Task<ODataCredentials?, any Error>, version: Int)
        if let current = pendingCredentials {
            pending = current
        } else {
            let root = serviceRoot
            pending = (
                Task { try await authenticator.credentials(for: root, refresh: refresh) }, credentialsVersion + 1
            )
            pendingCredentials = pending
        }
        do {
            // Whichever waiter resumes first applies the answer; the others find it applied.
            let answer = try await pending.ask.value
            if credentialsVersion < pending.version {
                credentials = answer
                credentialsAsked = true
                credentialsVersion = pending.version
                pendingCredentials = nil
            }
        } catch {
            if pendingCredentials?.version == pending.version { pendingCredentials = nil }
            if let error = error as? OfflineODataError { throw error }
            throw OfflineODataError(.unauthorized, "The authenticator gave no credentials for \(serviceRoot): \(error)")
        }
    }

    /// The request with credentials, session cookies and the CSRF header.
    private func prepared(_ request: TransportRequest, modifying: Bool) -> TransportRequest {
        var request = request
        if let credentials, request.headers["Authorization"] == nil {
            request.headers["Authorization"] = credentials.authorization
        }
        if !cookies.isEmpty {
            var pairs = (request.headers["Cookie"] ?? "").split(separator: ";").map {
                $0.trimmingCharacters(in: .whitespaces)
            }.filter { !$0.isEmpty }
            let given = Set(pairs.map { $0.split(separator: "=", maxSplits: 1).first.map(String.init) ?? $0 })
            for (name, value) in cookies.sorted(by: { $0.key < $1.key }) where !given.contains(name) {
                pairs.append(name + "=" + value)
            }
            request.headers["Cookie"] = pairs.joined(separator: "; ")
        }
        if csrfProtection, request.headers["X-CSRF-Token"] == nil {
            if let csrfToken, modifying {
                request.headers["X-CSRF-Token"] = csrfToken
            } else if csrfToken == nil, !csrfTokenUnavailable, request.method.uppercased() == "GET" {
                request.headers["X-CSRF-Token"] = "Fetch"
            }
        }
        return request
    }

    /// Keeps the cookies and the CSRF token a response gives; a successful answer to a token
    /// request without a token means the backend does not use them.
    private func absorb(_ response: TransportResponse, askedForToken: Bool) {
        for field in response.headers where field.name.lowercased() == "set-cookie" {
            let first = field.value.split(separator: ";", maxSplits: 1).first.map(String.init) ?? ""
            guard let equals = first.firstIndex(of: "=") else { continue }
            let name = first[..<equals].trimmingCharacters(in: .whitespaces)
            let value = first[first.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            guard !name.isEmpty else { continue }
            // `Max-Age` of 0 or less deletes the cookie (an `Expires` in the past is not read).
            let expired = field.value.split(separator: ";").dropFirst().contains { attribute in
                let parts = attribute.split(separator: "=", maxSplits: 1).map {
                    $0.trimmingCharacters(in: .whitespaces)
                }
                return parts.count == 2 && parts[0].lowercased() == "max-age" && (Int(parts[1]) ?? 1) <= 0
            }
            if value.isEmpty || expired { cookies[name] = nil } else { cookies[name] = value }
        }
        if let token = response.headers["X-CSRF-Token"], !token.isEmpty, token.lowercased() != "required",
            token.lowercased() != "fetch"
        {
            csrfToken = token
        } else if askedForToken, (200..<300).contains(response.status) {
            csrfTokenUnavailable = true
        }
    }
}
