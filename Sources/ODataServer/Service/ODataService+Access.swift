import Foundation
public import ODataCore

/// Credentials the reference service can require of every HTTP request.
public enum RequiredCredentials: Sendable, Hashable {
    /// `Authorization: Basic …` with this user and password.
    case basic(user: String, password: String)
    /// `Authorization: Bearer <token>` with one of these tokens.
    case bearer(Set<String>)

    fileprivate func accepts(_ header: String?) -> Bool {
        guard let header, let space = header.firstIndex(of: " ") else { return false }
        let scheme = header[..<space].lowercased()
        let value = header[header.index(after: space)...].trimmingCharacters(in: .whitespaces)
        switch self {
        case .basic(let user, let password):
            guard scheme == "basic", let data = Data(base64Encoded: value) else { return false }
            return constantTimeEqual(String(decoding: data, as: UTF8.self), user + ":" + password)
        case .bearer(let tokens):
            // Every token is compared in full, so the time taken tells nothing of the match.
            guard scheme == "bearer", !value.isEmpty else { return false }
            return tokens.reduce(false) { found, token in constantTimeEqual(value, token) || found }
        }
    }

    fileprivate var challenge: String {
        switch self {
        case .basic: #"Basic realm="oodata""#
        case .bearer: #"Bearer realm="oodata""#
        }
    }
}

/// Whether two strings are equal, in a time that depends on their lengths only.
func constantTimeEqual(_ a: String, _ b: String) -> Bool {
    let x = Array(a.utf8), y = Array(b.utf8)
    var difference = UInt8(x.count == y.count ? 0 : 1)
    for index in 0..<max(x.count, y.count) {
        difference |= (index < x.count ? x[index] : 0) ^ (index < y.count ? y[index] : 0)
    }
    return difference == 0
}

/// SAP Gateway's CSRF protection, for the reference service.
///
/// A GET (or HEAD) with `X-CSRF-Token: Fetch` is answered with a token in `X-CSRF-Token`,
/// bound to a session cookie (`oodata-session`, set when the request has none). Every `POST`,
/// `PUT`, `PATCH`, `MERGE` and `DELETE` (so also `$batch`) must carry that token with that
/// cookie while it is valid; otherwise the answer is `403` with `X-CSRF-Token: Required`, and
/// nothing is changed.
public final class CSRFProtection: Sendable {
    /// How long a token stays valid after it was issued.
    public let tokenLifetime: Duration
    private let state = Locked<[String: (token: String, issued: ContinuousClock.Instant)]>([:])

    /// Tokens valid for `tokenLifetime` (30 minutes by default, as SAP Gateway's session).
    public init(tokenLifetime: Duration = .seconds(1800)) { self.tokenLifetime = tokenLifetime }

    /// Ends every session: the next modifying request of each client gets `403` Required.
    public func invalidateAll() { state.withLock { $0.removeAll() } }

    /// The cookie that names a session.
    static let cookieName = "oodata-session"

    /// Checks `request`; a refusal, or the headers to add to the answer (a token, a cookie).
    func check(_ request: ServiceRequest) -> (refusal: ServiceResponse?, headers: HTTPHeaders) {
        var headers = HTTPHeaders()
        let session = Self.cookie(Self.cookieName, in: request.headers["Cookie"])
        let sent = request.headers["X-CSRF-Token"]
        if ["GET", "HEAD"].contains(request.method) {
            guard sent?.lowercased() == "fetch" else { return (nil, headers) }
            let now = ContinuousClock.now
            let (id, token, isNew) = state.withLock { sessions -> (String, String, Bool) in
                // Expired sessions go (so the map does not grow without end).
                sessions = sessions.filter { now - $0.value.issued < tokenLifetime }
                // Only a session this service made is kept; any other cookie value gets a new
                // session (a client cannot choose its session id).
                if let session, let current = sessions[session] { return (session, current.token, false) }
                let id = GuidValue.random().description
                let token = Data(GuidValue.random().description.utf8).base64EncodedString()
                sessions[id] = (token, now)
                return (id, token, true)
            }
            if isNew { headers["Set-Cookie"] = "\(Self.cookieName)=\(id); Path=/; HttpOnly" }
            headers["X-CSRF-Token"] = token
            return (nil, headers)
        }
        let valid = state.withLock { sessions -> Bool in
            guard let session, let sent, let current = sessions[session] else { return false }
            return constantTimeEqual(current.token, sent) && ContinuousClock.now - current.issued < tokenLifetime
        }
        if valid { return (nil, headers) }
        var refusal = ServiceResponse.error(403, code: "CSRFTokenRequired", "CSRF token validation failed: fetch a token with "
                                            + "'X-CSRF-Token: Fetch' on a GET and send it with the session cookie", version: request.version)
        refusal.headers["X-CSRF-Token"] = "Required"
        return (refusal, headers)
    }

    /// The value of cookie `name` in a `Cookie` header.
    static func cookie(_ name: String, in header: String?) -> String? {
        for pair in (header ?? "").split(separator: ";") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == name { return parts[1].trimmingCharacters(in: .whitespaces) }
        }
        return nil
    }
}

/// A value behind a lock. `@unchecked Sendable`: every access to `value` holds `lock`.
final class Locked<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

extension ODataService {
    /// Checks an HTTP request against the required credentials and the CSRF protection
    /// (requests inside a `$batch` are covered by the `$batch` request itself). A refusal
    /// (`401` with `WWW-Authenticate`, `403` with `X-CSRF-Token: Required`), or headers to add
    /// to the answer. With ``Options/users`` the credentials are those of the users (see
    /// ``user(for:)``, which the HTTP server asks first), and `requiredCredentials` is not used.
    public func checkAccess(_ request: ServiceRequest) -> (refusal: ServiceResponse?, headers: HTTPHeaders) {
        if options.users == nil, let required = options.requiredCredentials,
           !required.accepts(request.headers["Authorization"]) {
            var refusal = ServiceResponse.error(401, code: "Unauthorized", request.headers["Authorization"] == nil
                                                ? "This service needs credentials" : "The credentials were not accepted", version: request.version)
            refusal.headers["WWW-Authenticate"] = required.challenge
            return (refusal, HTTPHeaders())
        }
        guard let csrf = options.csrf else { return (nil, HTTPHeaders()) }
        return csrf.check(request)
    }
}
