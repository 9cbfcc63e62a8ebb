import Foundation
import JWTKit
import ODataCore

/// The HS256 keys of the JWT issuers of ``ServiceUsers``, one collection per issuer (so a token
/// is verified with its own issuer's secret only).
struct JWTIssuerKeys: Sendable {
    private let keys: [String: JWTKeyCollection]
    private let audience: String?

    static let none = JWTIssuerKeys(keys: [:], audience: nil)

    private init(keys: [String: JWTKeyCollection], audience: String?) {
        self.keys = keys
        self.audience = audience
    }

    /// The keys of `users`' issuers (``ServiceUsers/check()`` has made sure each secret is long enough).
    static func make(_ users: ServiceUsers) async -> JWTIssuerKeys {
        var keys: [String: JWTKeyCollection] = [:]
        for (issuer, secret) in users.jwtIssuers {
            let collection = JWTKeyCollection()
            await collection.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
            keys[issuer] = collection
        }
        return JWTIssuerKeys(keys: keys, audience: users.jwtAudience)
    }

    /// The claims the service reads from a token.
    struct Claims: JWTPayload {
        var iss: IssuerClaim
        var sub: SubjectClaim
        var exp: ExpirationClaim?
        var nbf: NotBeforeClaim?
        var aud: AudienceClaim?

        func verify(using algorithm: some JWTAlgorithm) async throws {
            try exp?.verifyNotExpired()
            try nbf?.verifyNotBefore()
        }
    }

    /// The issuer and subject of `token` when it is an HS256 JWT signed with its issuer's secret,
    /// in force (`exp`, `nbf`) and for the audience; nil for any other token.
    func verify(_ token: String) async -> (issuer: String, subject: String)? {
        // The header and issuer are read unverified only to choose the key; the signature is
        // then checked with that issuer's secret, and the algorithm must be HS256 (never `none`).
        guard let unverified = try? DefaultJWTParser().parse(Array(token.utf8), as: Claims.self),
            unverified.header.alg == "HS256",
            let collection = keys[unverified.payload.iss.value],
            let claims = try? await collection.verify(token, as: Claims.self),
            claims.iss.value == unverified.payload.iss.value
        else { return nil }
        if let audience {
            guard let aud = claims.aud, (try? aud.verifyIntendedAudience(includes: audience)) != nil else { return nil }
        }
        return (claims.iss.value, claims.sub.value)
    }
}

extension ODataService {
    /// The user a request proves under ``Options/users``: the first, in order, whose credential
    /// its `Authorization` header carries; nil when none does or there are no users.
    public func user(for request: ServiceRequest) async -> ServiceUser? {
        guard let users = options.users, let header = request.headers["Authorization"],
            let space = header.firstIndex(of: " ")
        else { return nil }
        let scheme = header[..<space].lowercased()
        let value = header[header.index(after: space)...].trimmingCharacters(in: .whitespaces)
        guard !value.isEmpty else { return nil }
        var basic: (user: String, password: String)?
        if scheme == "basic", let data = Data(base64Encoded: value) {
            let text = String(decoding: data, as: UTF8.self)
            if let colon = text.firstIndex(of: ":") {
                basic = (String(text[..<colon]), String(text[text.index(after: colon)...]))
            }
        }
        let bearer = scheme == "bearer" ? value : nil
        // The token is verified once, and only when a JWT user is asked about.
        var verified: (issuer: String, subject: String)??
        for user in users.users {
            let matches: Bool
            switch user.credential {
            case .basic(let name, let password):
                guard let basic else { continue }
                // Both compared in full, whatever the first one gave.
                let sameName = constantTimeEqual(basic.user, name)
                let samePassword = constantTimeEqual(basic.password, password)
                matches = sameName && samePassword
            case .apiKey(let key):
                guard let basic else { continue }
                matches = constantTimeEqual(basic.password, key)
            case .bearer(let token):
                guard let bearer else { continue }
                matches = constantTimeEqual(bearer, token)
            case .jwt(let issuer, let subject):
                guard let bearer else { continue }
                if verified == nil { verified = .some(await jwtKeys.verify(bearer)) }
                guard let claims = verified ?? nil else { continue }
                matches = claims.issuer == issuer && claims.subject == subject
            }
            if matches { return user }
        }
        return nil
    }

    /// The `401` for a request that proves no user: `WWW-Authenticate` names the schemes the
    /// users' credentials use.
    func unauthorized(_ request: ServiceRequest, users: ServiceUsers) -> ServiceResponse {
        var refusal = ServiceResponse.error(
            401, code: "Unauthorized",
            request.headers["Authorization"] == nil
                ? "This service needs credentials" : "The credentials were not accepted",
            version: request.version)
        let kinds = Set(
            users.users.map { user -> String in
                switch user.credential {
                case .basic, .apiKey: "Basic"
                case .bearer, .jwt: "Bearer"
                }
            })
        refusal.headers["WWW-Authenticate"] = nil
        for scheme in ["Basic", "Bearer"] where kinds.contains(scheme) || kinds.isEmpty {
            refusal.headers.add("WWW-Authenticate", scheme + #" realm="oodata""#)
        }
        return refusal
    }

    /// The access check of an HTTP request: with ``Options/users``, the user it proves (or a
    /// `401`) and the CSRF protection; otherwise ``checkAccess(_:)``.
    func authorize(
        _ request: ServiceRequest
    ) async -> (refusal: ServiceResponse?, headers: HTTPHeaders, user: ServiceUser?) {
        guard let users = options.users else {
            let (refusal, headers) = checkAccess(request)
            return (refusal, headers, nil)
        }
        guard let user = await user(for: request) else {
            return (unauthorized(request, users: users), HTTPHeaders(), nil)
        }
        let (refusal, headers) = checkAccess(request)
        return (refusal, headers, user)
    }
}
