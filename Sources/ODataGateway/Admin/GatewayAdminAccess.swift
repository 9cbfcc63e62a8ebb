import Crypto
import Foundation

/// Who may use the gateway's admin API (issue 56): a bearer token, or a Basic user and password,
/// from the configuration (`[admin]`) or the command line. Compared in constant time.
public struct GatewayAdminAccess: Sendable, Equatable {
    /// `Authorization: Bearer <token>`.
    public var token: String?
    /// `Authorization: Basic` with this user and password.
    public var user: String?
    public var password: String?

    /// Access by `token`, or by `user` and `password`, or both.
    public init(token: String? = nil, user: String? = nil, password: String? = nil) {
        self.token = token
        self.user = user
        self.password = password
    }

    /// What is wrong with it, or nil: a token of at least 16 characters, or a user with a
    /// password of at least 12.
    public var problem: String? {
        if token == nil, user == nil { return "give token= (at least 16 characters), or user= and password=" }
        if let token, token.count < 16 { return "the token must be at least 16 characters" }
        if user != nil, (password ?? "").count < 12 { return "user= needs a password= of at least 12 characters" }
        if user == nil, password != nil { return "password= needs user=" }
        return nil
    }

    /// Whether `authorization` (the header's value) names this access.
    public func allows(_ authorization: String?) -> Bool {
        guard let authorization, problem == nil else { return false }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2 else { return false }
        let scheme = parts[0].lowercased()
        let value = String(parts[1]).trimmingCharacters(in: .whitespaces)
        if scheme == "bearer", let token { return Self.same(value, token) }
        if scheme == "basic", let user, let password,
            let data = Data(base64Encoded: value), let pair = String(data: data, encoding: .utf8)
        {
            return Self.same(pair, user + ":" + password)
        }
        return false
    }

    /// Compares the SHA-256 digests of both, byte by byte without stopping early.
    static func same(_ a: String, _ b: String) -> Bool {
        let left = Array(SHA256.hash(data: Array(a.utf8)))
        let right = Array(SHA256.hash(data: Array(b.utf8)))
        var difference: UInt8 = 0
        for index in left.indices { difference |= left[index] ^ right[index] }
        return difference == 0
    }
}
