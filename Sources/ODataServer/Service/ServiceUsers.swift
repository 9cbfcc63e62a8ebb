import Foundation
package import ODataCore

/// How a user of the reference service proves who they are.
///
/// In the users file (``ServiceUsers/load(path:)``) a credential is an object with one member:
/// `{"basic": {"user": "alice", "password": "…"}}`, `{"apiKey": "…"}`, `{"bearer": "…"}` or
/// `{"jwt": {"issuer": "https://idp.example", "subject": "u-17"}}`.
public enum ServiceCredential: Sendable, Hashable, Codable {
    /// `Authorization: Basic` with this user name and password, both checked.
    case basic(user: String, password: String)
    /// API-key style Basic (common behind API gateways): any user name, only the password (the key) is checked.
    case apiKey(String)
    /// `Authorization: Bearer <token>`, an opaque token compared in full.
    case bearer(String)
    /// `Authorization: Bearer <JWT>` signed HS256 with the issuer's secret (`ServiceUsers.jwtIssuers`), with
    /// these `iss` and `sub`, not expired (`exp`, when present), and the audience when
    /// `ServiceUsers.jwtAudience` is set.
    case jwt(issuer: String, subject: String)

    private enum Kind: String, CodingKey, CaseIterable {
        case basic, apiKey, bearer, jwt
    }

    private enum BasicKeys: String, CodingKey, CaseIterable { case user, password }
    private enum JWTKeys: String, CodingKey, CaseIterable { case issuer, subject }

    /// Reads the one-member object form.
    public init(from decoder: any Decoder) throws {
        try UnknownMembers.refuse(in: decoder, allowed: Kind.allCases.map(\.rawValue))
        let container = try decoder.container(keyedBy: Kind.self)
        guard container.allKeys.count == 1, let kind = container.allKeys.first else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription: "a credential has exactly one of the members basic, apiKey, bearer or jwt"))
        }
        switch kind {
        case .basic:
            let basic = try container.nestedContainer(keyedBy: BasicKeys.self, forKey: .basic)
            try UnknownMembers.refuse(
                in: try container.superDecoder(forKey: .basic), allowed: BasicKeys.allCases.map(\.rawValue))
            self = .basic(
                user: try basic.decode(String.self, forKey: .user),
                password: try basic.decode(String.self, forKey: .password))
        case .apiKey: self = .apiKey(try container.decode(String.self, forKey: .apiKey))
        case .bearer: self = .bearer(try container.decode(String.self, forKey: .bearer))
        case .jwt:
            let jwt = try container.nestedContainer(keyedBy: JWTKeys.self, forKey: .jwt)
            try UnknownMembers.refuse(
                in: try container.superDecoder(forKey: .jwt), allowed: JWTKeys.allCases.map(\.rawValue))
            self = .jwt(
                issuer: try jwt.decode(String.self, forKey: .issuer),
                subject: try jwt.decode(String.self, forKey: .subject))
        }
    }

    /// Writes the one-member object form.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Kind.self)
        switch self {
        case .basic(let user, let password):
            var basic = container.nestedContainer(keyedBy: BasicKeys.self, forKey: .basic)
            try basic.encode(user, forKey: .user)
            try basic.encode(password, forKey: .password)
        case .apiKey(let key): try container.encode(key, forKey: .apiKey)
        case .bearer(let token): try container.encode(token, forKey: .bearer)
        case .jwt(let issuer, let subject):
            var jwt = container.nestedContainer(keyedBy: JWTKeys.self, forKey: .jwt)
            try jwt.encode(issuer, forKey: .issuer)
            try jwt.encode(subject, forKey: .subject)
        }
    }
}

extension ServiceCredential: CustomStringConvertible, CustomDebugStringConvertible {
    /// The credential without its secret (passwords, keys and tokens are never printed).
    public var description: String {
        switch self {
        case .basic(let user, _): "basic(user: \(user))"
        case .apiKey: "apiKey"
        case .bearer: "bearer"
        case .jwt(let issuer, let subject): "jwt(issuer: \(issuer), subject: \(subject))"
        }
    }

    /// As ``description``: no secret.
    public var debugDescription: String { description }
}

/// A user of the reference service and the rows it may see.
public struct ServiceUser: Sendable, Hashable, Codable {
    /// The user's name, unique among the users (per-user records are kept by it).
    public var name: String
    /// How the user proves who it is.
    public var credential: ServiceCredential
    /// Per entity set, a `$filter` expression (written so that it parses in V4 and V2 grammar alike, e.g.
    /// `Country eq 'DE'`) that the user's rows of that set match; a set not named is wholly visible.
    public var rowFilters: [String: String]

    /// Creates a user; `rowFilters` empty: every row of every set is visible to it.
    public init(name: String, credential: ServiceCredential, rowFilters: [String: String] = [:]) {
        self.name = name
        self.credential = credential
        self.rowFilters = rowFilters
    }

    private enum CodingKeys: String, CodingKey, CaseIterable { case name, credential, rowFilters }

    /// Reads a user; `rowFilters` may be left out.
    public init(from decoder: any Decoder) throws {
        try UnknownMembers.refuse(in: decoder, allowed: CodingKeys.allCases.map(\.rawValue))
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decode(String.self, forKey: .name)
        credential = try container.decode(ServiceCredential.self, forKey: .credential)
        rowFilters = try container.decodeIfPresent([String: String].self, forKey: .rowFilters) ?? [:]
    }
}

/// The users of the reference service (`Options.users`, `oodata serve --users FILE`).
///
/// With users, every request to the service roots must prove one of them (the first whose
/// credential matches, in order), and that user's ``ServiceUser/rowFilters`` decide which rows it
/// reads and changes. See docs/server.md for the file format.
public struct ServiceUsers: Sendable, Hashable, Codable {
    /// The users, matched in order: the first whose credential a request carries is its user.
    public var users: [ServiceUser]
    /// Issuer → HS256 secret, for `.jwt` users.
    public var jwtIssuers: [String: String]
    /// The `aud` every JWT must name, when set.
    public var jwtAudience: String?

    /// Creates the users; ``ODataService/open(store:options:faults:)`` checks them against the model.
    public init(users: [ServiceUser], jwtIssuers: [String: String] = [:], jwtAudience: String? = nil) {
        self.users = users
        self.jwtIssuers = jwtIssuers
        self.jwtAudience = jwtAudience
    }

    private enum CodingKeys: String, CodingKey, CaseIterable { case users, jwtIssuers, jwtAudience }

    /// Reads the file form; `jwtIssuers` and `jwtAudience` may be left out.
    public init(from decoder: any Decoder) throws {
        try UnknownMembers.refuse(in: decoder, allowed: CodingKeys.allCases.map(\.rawValue))
        let container = try decoder.container(keyedBy: CodingKeys.self)
        users = try container.decode([ServiceUser].self, forKey: .users)
        jwtIssuers = try container.decodeIfPresent([String: String].self, forKey: .jwtIssuers) ?? [:]
        jwtAudience = try container.decodeIfPresent(String.self, forKey: .jwtAudience)
    }

    /// Reads the JSON file form (see docs/server.md). Throws ``ServiceUsersError`` naming the file
    /// and the problem: unreadable, not JSON, a member missing or unknown, or users that cannot
    /// work (``check()``). The row filters are checked against the model when a service opens.
    public static func load(path: String) throws -> ServiceUsers {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw ServiceUsersError(.unreadable, "\(path): cannot be read (\(error.localizedDescription))")
        }
        let users: ServiceUsers
        do {
            users = try JSONDecoder().decode(ServiceUsers.self, from: data)
        } catch let error as DecodingError {
            throw ServiceUsersError(.malformed, "\(path): \(ServiceUsersError.describe(error))")
        } catch {
            throw ServiceUsersError(.malformed, "\(path): \(error)")
        }
        do {
            try users.check()
        } catch {
            throw ServiceUsersError(error.code, "\(path): \(error.message)")
        }
        return users
    }

    /// HS256 needs a secret of at least the hash's size (RFC 7518 §3.2).
    static let minimumSecretBytes = 32

    /// Throws when the users cannot work whatever the model: names missing or given twice, a
    /// Basic user name with `:`, a JWT user whose issuer has no secret, a secret too short.
    package func check() throws(ServiceUsersError) {
        var names: Set<String> = []
        for (index, user) in users.enumerated() {
            let place = "users[\(index)]"
            guard !user.name.isEmpty else { throw ServiceUsersError(.invalid, "\(place) has an empty name") }
            guard names.insert(user.name).inserted else {
                throw ServiceUsersError(.invalid, "\(place): the name \(user.name) is given to two users")
            }
            switch user.credential {
            case .basic(let name, _) where name.contains(":"):
                throw ServiceUsersError(.invalid, "\(place) (\(user.name)): a Basic user name cannot contain ':'")
            case .apiKey(let key) where key.isEmpty, .bearer(let key) where key.isEmpty:
                throw ServiceUsersError(.invalid, "\(place) (\(user.name)): the key or token is empty")
            case .jwt(let issuer, _) where jwtIssuers[issuer] == nil:
                throw ServiceUsersError(
                    .invalid, "\(place) (\(user.name)): the issuer \(issuer) has no secret in jwtIssuers")
            default: break
            }
            for (set, filter) in user.rowFilters where filter.trimmingCharacters(in: .whitespaces).isEmpty {
                throw ServiceUsersError(.invalid, "\(place) (\(user.name)): the row filter of \(set) is empty")
            }
        }
        for (issuer, secret) in jwtIssuers.sorted(by: { $0.key < $1.key })
        where secret.utf8.count < Self.minimumSecretBytes {
            throw ServiceUsersError(
                .invalid,
                "jwtIssuers: the secret of \(issuer) has \(secret.utf8.count) bytes; "
                    + "HS256 needs at least \(Self.minimumSecretBytes)")
        }
    }

    /// Throws unless every row filter names an entity set of `model` and parses and binds as a
    /// `$filter` of that set in V4 and in V2 grammar.
    package func check(against model: Model) throws(ServiceUsersError) {
        try check()
        for (index, user) in users.enumerated() {
            for (set, filter) in user.rowFilters.sorted(by: { $0.key < $1.key }) {
                let place = "users[\(index)] (\(user.name)), row filter of \(set)"
                guard model.entitySet(set) != nil else {
                    throw ServiceUsersError(.invalid, "\(place): \(set) is not an entity set of the service")
                }
                let target = set + "?$filter=" + RowFilterText.encoded(filter)
                for version in [ODataVersion.v4, .v2] {
                    do {
                        let parsed = try URLParser(version: version.grammar).parse(target)
                        _ = try RequestBinder(model: model, version: version.grammar).bind(parsed, input: target)
                    } catch {
                        throw ServiceUsersError(
                            .invalid,
                            "\(place): '\(filter)' is not a \(version.isLegacy ? "V2" : "V4") "
                                + "$filter of \(set): \(error)")
                    }
                }
            }
        }
    }
}

extension ServiceUsers: CustomStringConvertible {
    /// The users and issuers without secrets.
    public var description: String {
        "ServiceUsers(users: \(users.map { "\($0.name): \($0.credential)" }), issuers: \(jwtIssuers.keys.sorted()))"
    }
}

/// Why users of the reference service were refused (``ServiceUsers/load(path:)``, or
/// ``ODataService/open(store:options:faults:)`` checking them against the model).
public struct ServiceUsersError: Error, CustomStringConvertible, Sendable {
    fileprivate enum Code: Sendable { case unreadable, malformed, invalid }
    fileprivate let code: Code
    /// What is wrong, and where (the file, the user, the set).
    public let message: String

    fileprivate init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The message.
    public var description: String { message }

    /// A decoding error as a person reads it: where in the file, and what.
    fileprivate static func describe(_ error: DecodingError) -> String {
        func place(_ path: [any CodingKey]) -> String {
            let text = path.map { $0.intValue.map { "[\($0)]" } ?? "." + $0.stringValue }.joined()
            return text.isEmpty ? "the top level" : String(text.drop { $0 == "." })
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "\(place(context.codingPath)): the member \(key.stringValue) is missing"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            return "\(place(context.codingPath)): \(context.debugDescription)"
        case .dataCorrupted(let context):
            if let underlying = context.underlyingError { return "not valid JSON (\(underlying.localizedDescription))" }
            return "\(place(context.codingPath)): \(context.debugDescription)"
        @unknown default: return "\(error)"
        }
    }
}

/// Refuses members a users file does not define: a misspelt `rowFilters` must not leave a user
/// seeing every row.
private enum UnknownMembers {
    struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    static func refuse(in decoder: any Decoder, allowed: [String]) throws {
        guard let container = try? decoder.container(keyedBy: AnyKey.self) else { return }
        if let unknown = container.allKeys.map(\.stringValue).sorted().first(where: { !allowed.contains($0) }) {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription: "unknown member '\(unknown)' (known: \(allowed.joined(separator: ", ")))"))
        }
    }
}

/// A row filter as URL text.
enum RowFilterText {
    private static let unreserved = CharacterSet(
        charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")

    /// `text` percent-encoded for a query option value: everything but unreserved characters,
    /// so `&`, `#`, `+` and `%` in it stay part of the expression.
    static func encoded(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? ""
    }
}
