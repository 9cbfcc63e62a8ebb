import Foundation
public import OfflineOData

/// An error the gateway answers with an OData error body.
public struct GatewayError: Error, Sendable, CustomStringConvertible {
    /// The HTTP status of the answer.
    public var status: Int
    /// The OData error code.
    public var code: String
    /// What is wrong and where.
    public var message: String

    /// An error with its status, code and message.
    public init(status: Int, code: String, _ message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}

/// How the gateway tracks a defining query's changes (SAP's `track_deltas`).
public enum DeltaTracking: String, Sendable, CaseIterable {
    /// The backend's own delta links where it gives them for the query (reads pass through);
    /// tracked by the gateway otherwise.
    case auto = "AUTO"
    /// Tracked by the gateway, whatever the backend offers.
    case always = "ALWAYS"
    /// Not tracked: requests go to the backend, its delta links pass through.
    case never = "NEVER"
}

/// Which stores the gateway builds for a device's first open (SAP's `prepopulate_offline_db`).
public enum Prepopulate: String, Sendable, CaseIterable {
    /// A file with every defining query: the shared ones from the shared file, the user's built
    /// on request.
    case yes = "Y"
    /// A file with the shared defining queries only; the user's come by the paged download.
    case sharedOnly = "SHARED-ONLY"
    /// No file: every first open is paged.
    case no = "N"
}

/// One backend behind the gateway.
public struct GatewayBackend: Sendable {
    /// Where the gateway serves it: "" for the root, otherwise `/NAME/`.
    public var name: String
    /// The backend's service root, ending in `/`.
    public var url: String
    /// How defining queries are tracked unless a query says otherwise.
    public var trackDeltas: DeltaTracking = .auto
    /// Defining queries (entity-set paths, or whole relative URLs) whose data is the same for
    /// every user: refreshed with the gateway's own credentials, once for all devices.
    public var sharedQueries: Set<String> = []
    /// Per defining query: `track_deltas` and `refresh_interval` when they differ from the backend's.
    public var queryTracking: [String: DeltaTracking] = [:]
    public var queryRefreshInterval: [String: Double] = [:]
    /// The `Authorization` header the gateway sends for shared data (nil: none).
    public var sharedAuthorization: String?
    /// Which stores are built for first opens (`prepopulate_offline_db`).
    public var prepopulate: Prepopulate = .no
    /// Seconds a file of shared data is offered before it is built again
    /// (`prepopulate_offline_db_interval`, in minutes in the file).
    public var prepopulateInterval: Double = 24 * 3600
    /// Whether the backend takes `$batch`. Without it, the requests of a device's `$batch` go to
    /// it one by one, each recorded on its own, and the device gets them back as one answer.
    public var supportsBatch = true
    /// How its devices' JWT bearer tokens are verified, one entry per trusted issuer
    /// (`jwt_issuer`, `jwt_audience`, `jwt_jwks`, `jwt_hs_secret`). Empty: tokens are not
    /// verified, and each token is an identity of its own (SPEC §13, "Identity").
    public var jwtVerification: [JWTVerification] = []
    /// Requests a device may make (by its `Client-Instance-ID`), and a user (by identity), as
    /// token buckets (`throttle_device`, `throttle_user`); nil: not limited.
    public var deviceThrottle: ThrottleRate?
    public var userThrottle: ThrottleRate?
    /// The largest support store a device may send (`support_store_max_mb`, default 32 MiB, as
    /// SAP's Mobile Services), in bytes.
    public var supportStoreLimit: Int64 = 32 << 20
    /// Seconds a support store is kept (`support_store_retention`, minutes; default 7 days).
    public var supportStoreRetention: Double = 7 * 24 * 3600
    /// The most bytes all support stores of this endpoint take together
    /// (`support_store_total_mb`, default 1 GiB): a new store beyond is refused with 413, so no
    /// set of credentials can fill the database.
    public var supportStoreTotalLimit: Int64 = 1024 << 20
    /// What a device shared by users in turn does at a user switch with the previous user's
    /// requests it does not upload (`user_switch_policy`: refuse, keep or discard_after_backup;
    /// SPEC §16); nil: each device follows its own parameters.
    public var userSwitchPolicy: OfflineODataUserSwitchPolicy?
    /// Whether such a device first uploads the previous user's requests with their credentials
    /// when the app gives them (`force_upload_on_user_switch`); nil: the device's own setting.
    public var forceUploadOnUserSwitch: Bool?
    /// Cookies that carry a device's credentials (`identity_cookies`, e.g. a session of an
    /// identity provider): part of its identity and sent on the reads the gateway makes for it.
    /// Other cookies (CSRF sessions, load balancers) are neither.
    public var identityCookies: [String] = []

    /// A backend served at `name` ("" for the root).
    public init(name: String = "", url: String) {
        self.name = name
        self.url = url.hasSuffix("/") ? url : url + "/"
    }

    /// Whether `query` (a canonical relative URL) is shared data.
    func isShared(_ query: String) -> Bool {
        sharedQueries.contains(query) || sharedQueries.contains(Self.entitySetPath(query))
    }

    func tracking(_ query: String) -> DeltaTracking {
        queryTracking[query] ?? queryTracking[Self.entitySetPath(query)] ?? trackDeltas
    }

    func refreshInterval(_ query: String, default value: Double) -> Double {
        queryRefreshInterval[query] ?? queryRefreshInterval[Self.entitySetPath(query)] ?? value
    }

    static func entitySetPath(_ query: String) -> String {
        String(query.prefix { $0 != "?" && $0 != "(" && $0 != "/" })
    }
}

/// What a gateway serves and how (SPEC §13). Built from flags, or from an INI file shaped like
/// SAP's application configuration (see ``GatewayConfiguration/parse(ini:defaultBackend:)``).
public struct GatewayConfiguration: Sendable {
    /// The backends, each at its name.
    public var backends: [GatewayBackend]
    /// A scope's refresh target, seconds, unless its defining query says otherwise: a device is
    /// answered from PostgreSQL at once while the last refresh began within it (uploads through
    /// the gateway are written through, so a device reads its own changes whatever the
    /// target), and the refresher refreshes the scopes devices read before it runs out. 0
    /// refreshes at each request instead (requests that arrive together share one read).
    public var refreshInterval: Double = 60
    /// Seconds the refresher keeps a scope fresh after a device last read it through this
    /// instance (with that device's credentials, kept in memory only).
    public var refresherKeeps: Double = 900
    /// Seconds tombstones are kept; a delta token older than that gets 410.
    public var tombstoneRetention: Double = 7 * 24 * 3600
    /// Seconds a scope is kept after a device last read it; then it goes with its rows, and a
    /// token of it gets 410 (the device reads the query again). Last reads are recorded to the
    /// hour, so a scope may go up to an hour early.
    public var scopeRetention: Double = 30 * 24 * 3600
    /// Seconds the answers of uploaded requests are kept for repeats; a repeat of a request
    /// first sent before that is refused (`RequestExpired`), never applied again.
    public var requestRetention: Double = 7 * 24 * 3600
    /// Seconds after a request was forwarded before reading the backend may conclude that it
    /// was *not* applied (the backend may still be applying a request whose forwarder died).
    /// Until then a repeat of a request in doubt that the backend does not show applied is
    /// answered "try again later". At least as long as the backend may take on a request.
    public var inDoubtAfter: Double = 120
    /// Whether rows the backend gives no ETag get the gateway's (made from their hash), and
    /// updates and deletes carrying one are checked against the backend's current row before
    /// they are forwarded (412 on a mismatch).
    public var gatewayETags = true
    /// Rows per page the gateway answers unless a device asks for fewer.
    public var pageSize = 1000
    /// Seconds PostgreSQL has to answer a statement, or to lease a connection: a request in
    /// flight when PostgreSQL goes away is answered 503 with `Retry-After` then, and a gateway
    /// that cannot reach it at start stops, naming the server.
    public var postgresTimeout: Double = 10
    /// Seconds within which a device's `GET $metadata` is answered from the document the gateway
    /// read or confirmed last (a 304 to its ETag), without a backend request. A change of the
    /// backend's `$metadata` reaches devices within it. 0 forwards every one.
    public var metadataCheckInterval: Double = 60
    /// Seconds a backend request may take.
    public var backendTimeout: Double = 120
    /// Who may use the admin API (`[admin]`: `token=` or `user=` and `password=`); nil: no
    /// one, and the admin port is refused.
    public var admin: GatewayAdminAccess?

    /// A configuration serving `backends`.
    public init(backends: [GatewayBackend]) {
        self.backends = backends
    }
}

/// A line of a configuration file the gateway refuses, with what is wrong.
public struct GatewayConfigurationError: Error, Sendable, CustomStringConvertible {
    /// The 1-based line number (0: the file as a whole).
    public var line: Int
    /// What is wrong there.
    public var message: String

    public var description: String { line > 0 ? "line \(line): \(message)" : message }
}

extension GatewayConfiguration {
    /// Endpoint keys of SAP's application configuration file that the gateway reads but does
    /// not act on yet; they are accepted so that SAP's files load, and reported as warnings.
    static let ignoredEndpointKeys: Set<String> = [
        "indexed_type", "defining_query_format",
        "delta_query_format", "offline_db_collation", "case_sensitive_offline_db", "json_datetimeoffset_in_utc",
        "local_change_expiry", "allow_omitting_max_length_facet", "content_id_header_location", "max_delta_resends",
        "allow_defining_query_removal", "early_populate_backend_generated_values",
    ]

    /// Reads an INI file shaped like SAP's application configuration:
    ///
    /// ```ini
    /// [endpoint]
    /// name=sales                      ; served at /sales/ (the root when it is the only one)
    /// url=http://backend/odata/v4/    ; the backend's service root
    /// track_deltas=AUTO               ; AUTO, ALWAYS or NEVER, for its defining queries
    /// shared_authorization=Basic …    ; what the gateway sends for shared data
    /// tombstone_retention=10080       ; minutes deletions are kept (delta tokens older get 410)
    /// supports_batch=N                ; the backend has no $batch: requests go one by one
    /// prepopulate_offline_db=Y        ; first opens get a store file: Y, SHARED-ONLY or N
    /// prepopulate_offline_db_interval=1440 ; minutes a file of shared data is reused
    /// jwt_issuer=https://idp/         ; verify JWT bearer tokens: identity (iss, sub)
    /// jwt_audience=sales-app          ; the aud the tokens must name
    /// jwt_jwks=/etc/idp/jwks.json     ; the issuer's keys: a JWKS file or URL (or jwt_hs_secret=)
    /// identity_cookies=MYSAPSSO2      ; cookies that carry credentials (default: none)
    /// throttle_device=10/s,burst=40   ; requests per device (Client-Instance-ID): 429 beyond
    /// throttle_user=30/s              ; requests per user (identity), all devices together
    /// support_store_max_mb=32         ; the largest store a device may send for support
    /// support_store_retention=10080   ; minutes a support store is kept
    /// support_store_total_mb=1024     ; all of the endpoint's support stores together
    /// user_switch_policy=keep         ; shared devices: refuse, keep or discard_after_backup
    /// force_upload_on_user_switch=Y   ; shared devices upload the previous user's requests first
    ///
    /// [jwt_issuer]                    ; another issuer the endpoint above trusts
    /// issuer=https://idp2/
    /// audience=sales-app
    /// jwks=https://idp2/keys          ; or hs_secret=
    ///
    /// [admin]                         ; who may use the admin port (--admin-port)
    /// token=…                         ; Authorization: Bearer …, or user= and password= (Basic)
    ///
    /// [defining_query]
    /// name=Products
    /// endpoint_name=sales             ; default: the endpoint above it
    /// query=Products                  ; an entity set, or a relative URL with options
    /// is_shared_data=Y
    /// refresh_interval=5              ; minutes, as SAP counts them
    /// track_deltas=NEVER
    /// ```
    ///
    /// Comments start with `;` or `#`. An unknown section, key or value, a missing `name` or
    /// `url`, or a defining query of an endpoint not defined is refused with its line. Endpoint
    /// keys of SAP's format that the gateway does not act on yet go to `warnings`.
    public static func parse(
        ini text: String
    ) throws(GatewayConfigurationError)
        -> (configuration: GatewayConfiguration, warnings: [String])
    {
        struct Section {
            var kind: String
            var line: Int
            var values: [String: (value: String, line: Int)] = [:]
        }
        var sections: [Section] = []
        var warnings: [String] = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let number = index + 1
            let line = raw.trimmingCharacters(in: .whitespaces.union(CharacterSet(charactersIn: "\r")))
            if line.isEmpty || line.hasPrefix(";") || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") {
                guard line.hasSuffix("]") else { throw .init(line: number, message: "'\(line)' is not a [section]") }
                let kind = String(line.dropFirst().dropLast()).trimmingCharacters(in: .whitespaces)
                guard ["endpoint", "defining_query", "jwt_issuer", "admin"].contains(kind) else {
                    throw .init(
                        line: number,
                        message: "unknown section [\(kind)]: use [endpoint], [defining_query], [jwt_issuer] or [admin]")
                }
                sections.append(Section(kind: kind, line: number))
                continue
            }
            guard let equals = line.firstIndex(of: "=") else {
                throw .init(line: number, message: "'\(line.prefix(60))' is not key=value")
            }
            guard !sections.isEmpty else {
                throw .init(line: number, message: "a setting before any [endpoint] or [defining_query]")
            }
            let key = line[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            var value = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            if let comment = value.range(of: " ;") {
                value = value[..<comment.lowerBound].trimmingCharacters(in: .whitespaces)
            }
            let kind = sections[sections.count - 1].kind
            let known: Set<String> =
                kind == "admin"
                ? ["token", "user", "password"]
                : kind == "jwt_issuer"
                    ? ["issuer", "audience", "jwks", "hs_secret", "endpoint_name"]
                    : kind == "endpoint"
                        ? [
                            "name", "url", "track_deltas", "shared_authorization", "tombstone_retention",
                            "supports_batch",
                            "prepopulate_offline_db", "prepopulate_offline_db_interval", "jwt_issuer", "jwt_audience",
                            "jwt_jwks", "jwt_hs_secret", "identity_cookies", "throttle_device", "throttle_user",
                            "support_store_max_mb", "support_store_retention", "user_switch_policy",
                            "force_upload_on_user_switch",
                        ]
                        : ["name", "endpoint_name", "query", "is_shared_data", "refresh_interval", "track_deltas"]
            if kind == "endpoint", ignoredEndpointKeys.contains(key) {
                warnings.append("line \(number): \(key) is not used by this gateway yet")
                continue
            }
            guard known.contains(key) else {
                throw .init(
                    line: number,
                    message: "unknown key \(key) in [\(kind)]; known: \(known.sorted().joined(separator: ", "))")
            }
            guard sections[sections.count - 1].values[key] == nil else {
                throw .init(line: number, message: "\(key) appears twice in this [\(kind)]")
            }
            sections[sections.count - 1].values[key] = (value, number)
        }
        func tracking(_ entry: (value: String, line: Int)) throws(GatewayConfigurationError) -> DeltaTracking {
            guard let mode = DeltaTracking(rawValue: entry.value.uppercased()) else {
                throw .init(line: entry.line, message: "track_deltas=\(entry.value): use AUTO, ALWAYS or NEVER")
            }
            return mode
        }
        func minutes(_ entry: (value: String, line: Int), _ key: String) throws(GatewayConfigurationError) -> Double {
            guard let value = Double(entry.value), value >= 0, value.isFinite else {
                throw .init(line: entry.line, message: "\(key)=\(entry.value): give a number of minutes, 0 or more")
            }
            return value * 60
        }
        var backends: [GatewayBackend] = []
        var retention: Double?
        var current: Int?
        /// The endpoint a section belongs to: its `endpoint_name`, or the endpoint above it.
        func endpoint(of section: Section, named: String) throws(GatewayConfigurationError) -> Int {
            if let endpoint = section.values["endpoint_name"] {
                guard let found = backends.firstIndex(where: { $0.name == endpoint.value }) else {
                    throw .init(
                        line: endpoint.line, message: "endpoint_name=\(endpoint.value) names no [endpoint] above")
                }
                return found
            }
            guard let current else { throw .init(line: section.line, message: "\(named) comes before any [endpoint]") }
            return current
        }
        var admin: GatewayAdminAccess?
        for section in sections {
            if section.kind == "admin" {
                guard admin == nil else { throw .init(line: section.line, message: "[admin] appears twice") }
                let access = GatewayAdminAccess(
                    token: section.values["token"]?.value, user: section.values["user"]?.value,
                    password: section.values["password"]?.value)
                if let problem = access.problem { throw .init(line: section.line, message: "[admin]: \(problem)") }
                admin = access
                continue
            }
            if section.kind == "endpoint" {
                guard let name = section.values["name"], !name.value.isEmpty else {
                    throw .init(line: section.line, message: "an [endpoint] needs name=")
                }
                guard let url = section.values["url"] else {
                    throw .init(
                        line: section.line, message: "[endpoint] \(name.value) needs url= (the backend's service root)")
                }
                guard let parsed = URL(string: url.value), parsed.scheme == "http" || parsed.scheme == "https",
                    parsed.host != nil
                else {
                    throw .init(line: url.line, message: "url=\(url.value) is not an http(s) URL")
                }
                guard !name.value.contains("/"), !backends.contains(where: { $0.name == name.value }) else {
                    throw .init(line: name.line, message: "endpoint name \(name.value) is taken or contains '/'")
                }
                var backend = GatewayBackend(name: name.value, url: url.value)
                if let mode = section.values["track_deltas"] { backend.trackDeltas = try tracking(mode) }
                backend.sharedAuthorization = section.values["shared_authorization"]?.value
                if let entry = section.values["prepopulate_offline_db"] {
                    guard let mode = Prepopulate(rawValue: entry.value.uppercased()) else {
                        throw .init(
                            line: entry.line, message: "prepopulate_offline_db=\(entry.value): use Y, SHARED-ONLY or N")
                    }
                    backend.prepopulate = mode
                }
                if let entry = section.values["prepopulate_offline_db_interval"] {
                    backend.prepopulateInterval = try minutes(entry, "prepopulate_offline_db_interval")
                }
                if let issuer = section.values["jwt_issuer"] {
                    guard let audience = section.values["jwt_audience"], !audience.value.isEmpty else {
                        throw .init(line: issuer.line, message: "jwt_issuer needs jwt_audience= (the aud tokens name)")
                    }
                    let jwks = section.values["jwt_jwks"]?.value
                    let secret = section.values["jwt_hs_secret"]?.value
                    guard jwks != nil || secret != nil else {
                        throw .init(
                            line: issuer.line,
                            message: "jwt_issuer needs jwt_jwks= (a JWKS file or URL) or jwt_hs_secret=")
                    }
                    let verification = JWTVerification(
                        issuer: issuer.value, audience: audience.value, jwks: jwks, hmacSecret: secret)
                    if let problem = verification.problem {
                        throw .init(line: issuer.line, message: "jwt_issuer=\(issuer.value): \(problem)")
                    }
                    backend.jwtVerification = [verification]
                } else if let orphan = section.values["jwt_audience"] ?? section.values["jwt_jwks"]
                    ?? section.values["jwt_hs_secret"]
                {
                    throw .init(line: orphan.line, message: "jwt_audience, jwt_jwks and jwt_hs_secret need jwt_issuer=")
                }
                if let cookies = section.values["identity_cookies"] {
                    backend.identityCookies = cookies.value.split(separator: ",").map {
                        $0.trimmingCharacters(in: .whitespaces)
                    }.filter { !$0.isEmpty }
                }
                for (key, path) in [
                    ("throttle_device", \GatewayBackend.deviceThrottle),
                    ("throttle_user", \GatewayBackend.userThrottle),
                ] {
                    guard let entry = section.values[key] else { continue }
                    do {
                        backend[keyPath: path] = try ThrottleRate(parsing: entry.value)
                    } catch {
                        throw .init(line: entry.line, message: "\(key)=\(entry.value): \(error.message)")
                    }
                }
                if let entry = section.values["user_switch_policy"] {
                    switch entry.value.lowercased() {
                    case "refuse": backend.userSwitchPolicy = .refuse
                    case "keep": backend.userSwitchPolicy = .keepForTheirUser
                    case "discard_after_backup": backend.userSwitchPolicy = .discardAfterBackup
                    default:
                        throw .init(
                            line: entry.line,
                            message: "user_switch_policy=\(entry.value): give refuse, keep or discard_after_backup")
                    }
                }
                if let entry = section.values["force_upload_on_user_switch"] {
                    switch entry.value.uppercased() {
                    case "Y": backend.forceUploadOnUserSwitch = true
                    case "N": backend.forceUploadOnUserSwitch = false
                    default:
                        throw .init(
                            line: entry.line, message: "force_upload_on_user_switch=\(entry.value): use Y or N")
                    }
                }
                if let entry = section.values["support_store_max_mb"] {
                    guard let megabytes = Int64(entry.value), megabytes > 0, megabytes <= 1024 else {
                        throw .init(line: entry.line, message: "support_store_max_mb must be 1 to 1024 (megabytes)")
                    }
                    backend.supportStoreLimit = megabytes << 20
                }
                if let entry = section.values["support_store_total_mb"] {
                    guard let megabytes = Int64(entry.value), megabytes > 0, megabytes <= 1 << 20 else {
                        throw .init(
                            line: entry.line, message: "support_store_total_mb must be 1 to 1048576 (megabytes)")
                    }
                    backend.supportStoreTotalLimit = megabytes << 20
                }
                if let entry = section.values["support_store_retention"] {
                    let value = try minutes(entry, "support_store_retention")
                    guard value > 0 else {
                        throw .init(line: entry.line, message: "support_store_retention must be more than 0")
                    }
                    backend.supportStoreRetention = value
                }
                if let batch = section.values["supports_batch"] {
                    switch batch.value.uppercased() {
                    case "Y": backend.supportsBatch = true
                    case "N": backend.supportsBatch = false
                    default: throw .init(line: batch.line, message: "supports_batch=\(batch.value): use Y or N")
                    }
                }
                if let entry = section.values["tombstone_retention"] {
                    let value = try minutes(entry, "tombstone_retention")
                    guard value > 0 else {
                        throw .init(line: entry.line, message: "tombstone_retention must be more than 0")
                    }
                    retention = value
                }
                backends.append(backend)
                current = backends.count - 1
                continue
            }
            if section.kind == "jwt_issuer" {
                // Another issuer an endpoint trusts (an endpoint's own jwt_issuer= names one).
                let index = try endpoint(of: section, named: "[jwt_issuer]")
                guard let issuer = section.values["issuer"], !issuer.value.isEmpty,
                    let audience = section.values["audience"], !audience.value.isEmpty
                else {
                    throw .init(line: section.line, message: "a [jwt_issuer] needs issuer= and audience=")
                }
                let verification = JWTVerification(
                    issuer: issuer.value, audience: audience.value, jwks: section.values["jwks"]?.value,
                    hmacSecret: section.values["hs_secret"]?.value)
                if let problem = verification.problem {
                    throw .init(line: section.line, message: "[jwt_issuer] \(issuer.value): \(problem)")
                }
                guard !backends[index].jwtVerification.contains(where: { $0.issuer == issuer.value }) else {
                    throw .init(line: issuer.line, message: "issuer \(issuer.value) is given twice for this endpoint")
                }
                backends[index].jwtVerification.append(verification)
                continue
            }
            guard let name = section.values["name"], !name.value.isEmpty else {
                throw .init(line: section.line, message: "a [defining_query] needs name=")
            }
            let index = try endpoint(of: section, named: "[defining_query] \(name.value)")
            let query = section.values["query"]?.value ?? name.value
            let key = (try? TrackedQuery(target: query))?.canonical ?? query
            if let shared = section.values["is_shared_data"] {
                switch shared.value.uppercased() {
                case "Y": backends[index].sharedQueries.insert(key)
                case "N": break
                default: throw .init(line: shared.line, message: "is_shared_data=\(shared.value): use Y or N")
                }
            }
            if let interval = section.values["refresh_interval"] {
                backends[index].queryRefreshInterval[key] = try minutes(interval, "refresh_interval")
            }
            if let mode = section.values["track_deltas"] { backends[index].queryTracking[key] = try tracking(mode) }
        }
        guard !backends.isEmpty else { throw .init(line: 0, message: "the file defines no [endpoint]") }
        // A single endpoint is served at the root as well as at its name.
        var configuration = GatewayConfiguration(backends: backends)
        if backends.count == 1 {
            var root = backends[0]
            root.name = ""
            configuration.backends.append(root)
        }
        if let retention { configuration.tombstoneRetention = retention }
        configuration.admin = admin
        return (configuration, warnings)
    }
}
