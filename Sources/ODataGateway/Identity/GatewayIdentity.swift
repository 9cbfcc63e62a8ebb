import Crypto
import Foundation
import JWTKit
import Logging
import ODataCore
import OfflineOData

/// How the gateway verifies the JWT bearer tokens that devices of one backend send (SPEC §13,
/// "Identity"). With it, a device's identity is the token's `(iss, sub)`, which survives a
/// token's rotation; without it, the identity is a digest of the whole token.
public struct JWTVerification: Sendable, Hashable, CustomStringConvertible {
    /// The `iss` the tokens name (compared exactly).
    public var issuer: String
    /// The audience the tokens must name in `aud`.
    public var audience: String
    /// Where the issuer's public keys are: a JWKS file, or an `http(s)` URL the gateway reads
    /// (again every ten minutes, and when a token names a key it does not know).
    public var jwks: String?
    /// A shared secret, for an issuer that signs with HS256.
    public var hmacSecret: String?

    /// Verification of tokens from `issuer` for `audience`, with keys from `jwks` or an HS256 secret.
    public init(issuer: String, audience: String, jwks: String? = nil, hmacSecret: String? = nil) {
        self.issuer = issuer
        self.audience = audience
        self.jwks = jwks
        self.hmacSecret = hmacSecret
    }

    /// The issuer, audience and key source, without the secret.
    public var description: String {
        "JWTVerification(issuer: \(issuer), audience: \(audience), keys: "
            + (jwks ?? (hmacSecret == nil ? "none" : "an HS256 secret")) + ")"
    }

    /// What is wrong with it, or nil: it needs keys, and a JWKS URL on another host than this
    /// machine must be `https` (keys read over plain HTTP could be anyone's).
    public var problem: String? {
        guard jwks != nil || hmacSecret != nil else { return "it needs a JWKS (file or URL) or an HS256 secret" }
        if let jwks, jwks.hasPrefix("http://"), let host = URL(string: jwks)?.host,
            !["127.0.0.1", "localhost", "::1", "[::1]"].contains(host)
        {
            return "its JWKS URL \(jwks) must be https"
        }
        if let secret = hmacSecret, secret.utf8.count < 32 {
            return "its HS256 secret must be at least 32 bytes (RFC 7518)"
        }
        return nil
    }
}

/// The claims the gateway reads from a verified token.
struct IdentityClaims: JWTPayload {
    var iss: IssuerClaim
    var sub: SubjectClaim
    var aud: AudienceClaim
    var exp: ExpirationClaim
    var nbf: NotBeforeClaim?

    func verify(using algorithm: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
        try nbf?.verifyNotBefore()
    }
}

/// Only the issuer, read before verification to choose the issuer's keys.
struct IssuerOnly: JWTPayload {
    var iss: IssuerClaim?
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// Derives a request's identity from what can be verified, never from a name the device asserts
/// (SPEC §13, "Identity"):
/// - Basic: a keyed digest (HMAC-SHA256 with a secret kept in PostgreSQL, `oodata_secret`) of
///   the user name *and* the password: a new password is a new identity;
/// - a JWT bearer token of a backend with ``JWTVerification``: `(iss, sub)` once its signature,
///   issuer, audience and expiry are verified (a token that fails is refused with 401); without
///   verification, the keyed digest of the whole token;
/// - anything else (another scheme, client certificates passed as headers, the cookies named in
///   `GatewayBackend.identityCookies`): the keyed digest of what was sent;
/// - nothing: "" (anonymous).
///
/// Identities are digests: the gateway keeps no user name, password or token.
final class GatewayIdentities: Sendable {
    /// Headers that proxies use to pass a client certificate on.
    static let certificateHeaders = [
        "X-Client-Cert", "X-SSL-Client-Cert", "X-Forwarded-Client-Cert", "SSL-Client-Cert",
    ]
    /// How long keys read from a JWKS URL are used before they are read again.
    static let jwksLifetime: Duration = .seconds(600)
    /// The least time between two reads of a JWKS URL for a token with a key not known.
    static let jwksRetry: Duration = .seconds(60)

    private let state = IdentityState()

    /// The identity of `request`, a device's request to `backend`.
    func identity(of request: GatewayRequest, backend: GatewayBackend, gateway: Gateway) async throws -> String {
        let credentials = request.credentialHeaders(identityCookies: backend.identityCookies)
        guard credentials.contains(where: { _ in true }) else { return "" }
        let key = try await state.key(store: gateway.store)
        func mac(_ text: String) -> String {
            GatewayStore.hex(HMAC<SHA256>.authenticationCode(for: Array(text.utf8), using: key))
        }
        var others = credentials
        others["Authorization"] = nil
        let extra = others.map { "\($0.name.lowercased()): \($0.value)" }.joined(separator: "\n")
        let suffix = extra.isEmpty ? "" : "." + mac("headers\n" + extra)
        guard let authorization = credentials["Authorization"]?.trimmingCharacters(in: .whitespaces) else {
            return "headers:" + mac("headers\n" + extra)
        }
        let space = authorization.firstIndex(of: " ") ?? authorization.endIndex
        let scheme = authorization[..<space].lowercased()
        let value = authorization[space...].trimmingCharacters(in: .whitespaces)
        switch scheme {
        case "basic":
            guard let decoded = Data(base64Encoded: value) else { break }
            // User name and password alike: the backend may check only one of them.
            return "basic:" + mac("basic\n" + decoded.base64EncodedString()) + suffix
        case "bearer":
            guard !backend.jwtVerification.isEmpty else { return "bearer:" + mac("bearer\n" + value) + suffix }
            let (issuer, subject) = try await verified(value, backend: backend, gateway: gateway)
            return "jwt:" + mac("jwt\n\(issuer.utf8.count):" + issuer + subject) + suffix
        default: break
        }
        return "other:" + mac("other\n" + authorization) + suffix
    }

    /// The `(iss, sub)` of a token verified with its issuer's keys; 401 when it does not verify.
    func verified(_ token: String, backend: GatewayBackend, gateway: Gateway) async throws -> (String, String) {
        func refused(_ why: String) -> GatewayError {
            GatewayError(status: 401, code: "InvalidToken", "The bearer token is refused: \(why)")
        }
        let peek = JWTKeyCollection()
        guard let issuer = (try? await peek.unverified(token, as: IssuerOnly.self))?.iss?.value else {
            throw refused("it is not a JWT with an issuer (iss)")
        }
        guard let verification = backend.jwtVerification.first(where: { $0.issuer == issuer }) else {
            throw refused("its issuer is not one this endpoint trusts")
        }
        var claims: IdentityClaims?
        var lastError: (any Error)?
        for reload in [false, true] {
            let keys = try await state.keys(for: verification, reload: reload, gateway: gateway)
            do {
                claims = try await keys.verify(token, as: IdentityClaims.self)
                break
            } catch {
                lastError = error
            }
        }
        guard let claims else {
            gateway.logger.debug(
                "A bearer token did not verify", metadata: ["error": "\(lastError.map { "\($0)" } ?? "")"])
            throw refused("its signature, expiry (exp) or not-before (nbf) does not verify")
        }
        guard claims.iss.value == verification.issuer else { throw refused("its issuer changed") }
        do {
            try claims.aud.verifyIntendedAudience(includes: verification.audience)
        } catch {
            throw refused("it is not for audience \(verification.audience)")
        }
        guard !claims.sub.value.isEmpty else { throw refused("it names no subject (sub)") }
        return (claims.iss.value, claims.sub.value)
    }

    /// Logs, for each backend whose devices' bearer tokens the gateway does not verify, what that
    /// means for them.
    static func warnUnverified(_ configuration: GatewayConfiguration, logger: Logger) {
        for backend in configuration.backends where backend.jwtVerification.isEmpty {
            logger.warning(
                Logger.Message(
                    stringLiteral:
                        "Bearer tokens are not verified by the gateway for this backend: each token is an "
                        + "identity of its own (a device whose token rotates reads its data again, and its repeats of uploads sent "
                        + "under the old token get 409). Configure jwt_issuer, jwt_audience and jwt_jwks (or "
                        + "jwt_hs_secret) to name JWT identities by (iss, sub)."),
                metadata: ["backend": .string(backend.url)])
        }
    }
}

/// The identity secret and the issuers' keys as read (JWKS text), kept.
///
/// A key collection is made anew for each verification: jwt-kit fixes the algorithm of a JWKS
/// key that names none from the first token that uses it, so a shared collection would let one
/// forged token (`{"alg":"RS512","kid":…}`) lock out every device until the keys are read again.
actor IdentityState {
    private var secret: SymmetricKey?
    private var jwks: [JWTVerification: (text: String, read: ContinuousClock.Instant)] = [:]
    private var reading: [JWTVerification: Task<String, any Error>] = [:]

    func key(store: GatewayStore) async throws -> SymmetricKey {
        if let secret { return secret }
        let bytes = try await store.identitySecret()
        let key = SymmetricKey(data: bytes)
        secret = key
        return key
    }

    /// The keys of `verification`'s issuer, in a collection of their own; with `reload`, read
    /// again from a JWKS URL when they were read more than a minute ago (a token may name a key
    /// the issuer added since).
    func keys(for verification: JWTVerification, reload: Bool, gateway: Gateway) async throws -> JWTKeyCollection {
        let keys = JWTKeyCollection()
        if let secret = verification.hmacSecret {
            await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        }
        guard let source = verification.jwks else { return keys }
        let text = try await jwksText(for: verification, source: source, reload: reload, gateway: gateway)
        do {
            try await keys.add(jwksJSON: text)
        } catch {
            throw GatewayError(
                status: 503, code: "JWKSUnavailable",
                "The keys of issuer \(verification.issuer) at \(source) are not a JWKS: \(error)")
        }
        return keys
    }

    private func jwksText(
        for verification: JWTVerification, source: String, reload: Bool, gateway: Gateway
    ) async throws -> String {
        let now = ContinuousClock.now
        let fromURL = source.hasPrefix("http://") || source.hasPrefix("https://")
        if let kept = jwks[verification] {
            let age = now - kept.read
            if !fromURL || (age < GatewayIdentities.jwksLifetime && (!reload || age < GatewayIdentities.jwksRetry)) {
                return kept.text
            }
        }
        // One read at a time per issuer: tokens arriving meanwhile wait for it.
        if let running = reading[verification] { return try await running.value }
        let task = Task { try await Self.read(source, issuer: verification.issuer, gateway: gateway) }
        reading[verification] = task
        defer { reading[verification] = nil }
        let text = try await task.value
        jwks[verification] = (text, ContinuousClock.now)
        return text
    }

    private static func read(_ source: String, issuer: String, gateway: Gateway) async throws -> String {
        guard source.hasPrefix("http://") || source.hasPrefix("https://") else {
            do {
                return try String(contentsOfFile: source, encoding: .utf8)
            } catch {
                throw GatewayError(
                    status: 503, code: "JWKSUnavailable",
                    "The keys of issuer \(issuer) could not be read from \(source): \(error)")
            }
        }
        var headers = HTTPHeaders()
        headers["Accept"] = "application/json"
        let response = try await gateway.transport.send(
            TransportRequest(method: "GET", url: source, headers: headers),
            timeout: gateway.configuration.backendTimeout)
        guard response.status == 200 else {
            throw GatewayError(
                status: 503, code: "JWKSUnavailable",
                "The keys of issuer \(issuer) could not be read (\(source) answered \(response.status))")
        }
        return String(decoding: response.body, as: UTF8.self)
    }
}
