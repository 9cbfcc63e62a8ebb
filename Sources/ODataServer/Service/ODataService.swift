import Foundation
public import Logging
public import ODataCore
public import ODataStore

/// The reference OData service: answers V4 and V2 requests from an ``ODataStore/Store``.
///
/// `handle` is independent of HTTP; ``ODataHTTPServer`` puts it on Hummingbird.
public final class ODataService: Sendable {
    /// How the service behaves.
    public struct Options: Sendable {
        /// Entities per page unless the client asks for fewer with `Prefer: odata.maxpagesize`.
        public var pageSize = 100
        /// Largest request body accepted, in bytes.
        public var maxBodyBytes = 16 * 1024 * 1024
        /// Longest request URL accepted, in bytes: a longer one is answered `414 URI Too Long`
        /// with an OData error that says to send the query in a `$batch`. The HTTP parser takes
        /// a request line and headers up to this much plus 80 KiB; beyond that it is a `431`.
        public var maxURLBytes = 256 * 1024
        /// Entity sets whose key the server generates on POST (set → key property).
        public var serverGeneratedKeys: [String: String] = [:]
        /// How many changes the delta history keeps; older delta tokens get 410.
        public var deltaRetention = 100_000
        /// How many HTTP requests ``ODataService/journal`` keeps.
        public var journalCapacity = 1000
        /// Where stores that offline clients send for support (`sendStore`) are kept; nil: the
        /// server does not take them (`/support/stores` answers 404).
        public var supportDirectory: String?
        /// Credentials every HTTP request must carry (`401` otherwise); nil: none. Not used
        /// when ``users`` is set.
        public var requiredCredentials: RequiredCredentials?
        /// Users who see different rows; nil: no users (see `requiredCredentials`).
        ///
        /// With users, every request to the service roots (`$metadata` too) must prove one of
        /// them (`401` with `WWW-Authenticate` otherwise), and runs as that user: its row filters
        /// restrict what it reads, counts, expands and changes (see docs/server.md). The parts of
        /// a `$batch` run as the user of the `$batch` request. ``ODataService/open(store:options:faults:)``
        /// refuses users whose filters do not fit the model.
        public var users: ServiceUsers?
        /// SAP Gateway's CSRF protection for modifying requests; nil: off.
        public var csrf: CSRFProtection?
        /// Whether PUT, PATCH, MERGE and DELETE of an entity that has an ETag need `If-Match`
        /// (`428 Precondition Required` without it), as SAP Gateway does for entity types with a
        /// concurrency token. Every entity of this service has an ETag. Off only for tests and
        /// clients that must write unconditionally.
        public var requireIfMatch = true
        /// Whether repeatable requests (`Repeatability-Request-ID`, or V2's `RequestID`) are
        /// recognized: a repeat gets the first answer. False plays a backend that ignores the
        /// headers (many do): a repeat is applied again, answered without `Repeatability-Result`.
        public var honorsRepeatableRequests = true
        /// Whether `Prefer: odata.track-changes` is honoured (delta links on the last page).
        /// False plays a backend without change tracking, as most SAP Gateway services are: no
        /// delta links, the preference ignored, so every download is a full read.
        public var tracksChanges = true
        /// Whether entities carry ETags. False plays a backend without them, as many SAP
        /// Gateway services are: no `@odata.etag`, `__metadata.etag` or `ETag` header in any
        /// answer, and `If-Match`/`If-None-Match` ignored (every write is unconditional).
        public var sendsETags = true
        /// With `sendsETags` off: whether PUT, PATCH, MERGE and DELETE still need an `If-Match`
        /// (`*`, the only value a client can know), `428 Precondition Required` without one. Plays
        /// a backend that asks for a precondition it gives clients no means to state exactly.
        public var requiresIfMatchWithoutETags = false
        /// Where the service logs: each HTTP request at `debug` (method, URL without query
        /// values or keys, status, duration), `$batch` part and change-set counts at `debug`,
        /// internal errors at `error`. Logs nothing by default.
        public var logger = Logger(label: "oodata.server", factory: { _ in SwiftLogNoOpLogHandler() })
        /// Creates the default options.
        public init() {}
    }

    /// The store the service answers from (replaced by ``changeModel(to:)``).
    public var store: Store { current.withLock { $0 } }
    private let current: Locked<Store>
    public let options: Options
    public let faults: FaultInjector
    /// The last requests received over HTTP.
    public let journal: RequestJournal
    var model: Model { store.model }

    /// The HS256 keys of the users' JWT issuers.
    let jwtKeys: JWTIssuerKeys

    private init(store: Store, options: Options, faults: FaultInjector, jwtKeys: JWTIssuerKeys) {
        self.current = Locked(store)
        self.options = options
        self.faults = faults
        self.journal = RequestJournal(capacity: options.journalCapacity)
        self.jwtKeys = jwtKeys
    }

    /// Opens (or creates) the service's store and its bookkeeping tables. Throws
    /// ``ServiceUsersError`` when ``Options/users`` cannot work with the store's model.
    public static func open(store: Store, options: Options = Options(), faults: [FaultRule] = []) async throws -> ODataService {
        try options.users?.check(against: store.model)
        try await store.write { writer in
            let db = writer.connection
            try db.execute("CREATE TABLE IF NOT EXISTS server_changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, entity_set TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL)")
            try db.execute("CREATE INDEX IF NOT EXISTS server_changes_set ON server_changes (entity_set, seq)")
            try db.execute("CREATE TABLE IF NOT EXISTS server_history (name TEXT PRIMARY KEY, value INTEGER)")
            try db.execute("CREATE TABLE IF NOT EXISTS server_repeatability (id TEXT PRIMARY KEY, first_sent TEXT, status INTEGER, headers TEXT, body BLOB)")
            try db.execute("CREATE TABLE IF NOT EXISTS server_media (entity_set TEXT NOT NULL, key TEXT NOT NULL, content_type TEXT, bytes BLOB, PRIMARY KEY (entity_set, key))")
            // The users (with a row filter of the set) who could see a row before a change.
            try db.execute(
                "CREATE TABLE IF NOT EXISTS server_change_viewers (seq INTEGER NOT NULL, viewer TEXT NOT NULL, "
                    + "PRIMARY KEY (seq, viewer))")
        }
        var keys = JWTIssuerKeys.none
        if let users = options.users { keys = await JWTIssuerKeys.make(users) }
        return ODataService(store: store, options: options, faults: FaultInjector(rules: faults), jwtKeys: keys)
    }

    /// Loads generated or imported data into the store (inside one transaction), recording no
    /// change history.
    public func load(_ data: [(entitySet: String, entities: [Entity])]) async throws {
        try await store.write { writer in
            for (set, entities) in data {
                for var entity in entities {
                    entity.control.etag = Self.newETag()
                    try writer.insert(entity, into: set)
                }
            }
        }
    }

    /// Changes the service's model while it runs, as a backend whose `$metadata` changes under
    /// deployed apps (for tests and demos of SPEC §14). The store is migrated in place (see
    /// ``ODataStore/Store/migratingInPlace(to:alsoWriting:)``): new sets, types and nullable
    /// properties are added; sets and properties left out keep their tables and columns, which
    /// the service no longer reads or writes; a changed key or column type is refused. Every
    /// request answered afterwards follows `newModel`, `$metadata` included. Change history
    /// and delta tokens stay valid.
    public func changeModel(to newModel: Model) async throws {
        let migrated = try await store.migratingInPlace(to: newModel)
        current.withLock { $0 = migrated }
    }

    /// The ETag of a `$metadata` document: an FNV-1a hash of its bytes, the same in every process.
    static func metadataETag(_ body: [UInt8]) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in body {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return "\"md-" + String(hash, radix: 16) + "\""
    }

    static func newETag() -> String { "W/\"\(GuidValue.random().description.prefix(18))\"" }

    // MARK: Handling

    /// Answers one request. Never throws: every failure becomes an OData error response.
    ///
    /// Under ``Options/users``, a request without a ``ServiceRequest/user`` runs as the user its
    /// `Authorization` header proves, and is answered `401` when it proves none.
    public func handle(_ request: ServiceRequest) async -> ServiceResponse {
        var request = request
        if let users = options.users, request.user == nil {
            guard let user = await user(for: request) else { return unauthorized(request, users: users) }
            request.user = user
        }
        if let fault = await faults.match(request) {
            if let delay = fault.delayMilliseconds { try? await Task.sleep(nanoseconds: UInt64(delay) * 1_000_000) }
            if let status = fault.status {
                return .error(status, code: fault.code ?? "InjectedFault", fault.message ?? "Injected failure", version: request.version)
            }
            if fault.minimal {
                var minimal = request
                minimal.headers["Prefer"] = "return=minimal"
                return await handleUnfaulted(minimal)
            }
            if let answer = fault.answer {
                var headers = HTTPHeaders()
                headers["Content-Type"] = "application/json"
                return ServiceResponse(status: 200, headers: headers, body: Array(answer.utf8))
            }
            if fault.dropAfterCommit || fault.trickleMilliseconds != nil {
                var response = await handleUnfaulted(request)
                // A refused request committed nothing: its answer is not lost, and the rule
                // keeps its use for a request that commits.
                let committed = response.status < 400
                if fault.dropAfterCommit && !committed { await faults.giveBack(fault) }
                response.dropConnection = fault.dropAfterCommit && committed
                response.trickleMilliseconds = fault.trickleMilliseconds
                return response
            }
        }
        return await handleUnfaulted(request)
    }

    func handleUnfaulted(_ request: ServiceRequest) async -> ServiceResponse {
        guard options.sendsETags else {
            var plain = request
            // Ignored, except that a backend insisting on one sees whether it came (a request
            // of its own, as a change set's part does).
            if !options.requiresIfMatchWithoutETags { plain.headers["If-Match"] = nil }
            plain.headers["If-None-Match"] = nil
            return Self.withoutETags(await handleChecked(plain))
        }
        return await handleChecked(request)
    }

    /// A change set's answer as this service gives it (without ETags under `sendsETags` off:
    /// change sets answer from inside their transaction, not through ``handleUnfaulted(_:)``).
    func configured(_ response: ServiceResponse) -> ServiceResponse {
        options.sendsETags ? response : Self.withoutETags(response)
    }

    /// `response` as a backend without ETags gives it: no `ETag` header, and no ETag in a
    /// JSON body (V4 `@odata.etag`, V2 `__metadata.etag`). A `$batch` answer is made of parts
    /// that already went through here.
    static func withoutETags(_ response: ServiceResponse) -> ServiceResponse {
        var plain = response
        plain.headers["ETag"] = nil
        // Only entity payloads: a media value that happens to be JSON is returned as stored.
        guard (response.headers["Content-Type"] ?? "").lowercased().hasPrefix("application/json"),
            response.headers["OData-Version"] != nil || response.headers["DataServiceVersion"] != nil,
            let json = try? JSONValue.parse(response.body)
        else { return plain }
        func strip(_ value: JSONValue, inMetadata: Bool) -> JSONValue {
            switch value {
            case .object(let members):
                return .object(members.compactMap { member in
                    let etags: Set<String> = ["@odata.etag", "odata.etag", "@odata.mediaEtag", "odata.mediaEtag"]
                    if etags.contains(member.name) || (inMetadata && (member.name == "etag" || member.name == "media_etag")) {
                        return nil
                    }
                    return JSONValue.Member(member.name, strip(member.value, inMetadata: member.name == "__metadata"))
                })
            case .array(let items): return .array(items.map { strip($0, inMetadata: false) })
            default: return value
            }
        }
        plain.body = Array(strip(json, inMetadata: false).serialized.utf8)
        return plain
    }

    func handleChecked(_ request: ServiceRequest) async -> ServiceResponse {
        guard request.body.count <= options.maxBodyBytes else {
            return .error(413, code: "RequestTooLarge", "The request body is larger than \(options.maxBodyBytes) bytes", version: request.version)
        }
        do {
            return try await dispatch(request)
        } catch {
            return self.errorResponse(error, version: request.version)
        }
    }

    /// A 500 whose body names no SQL, schema or stack: the detail goes to the server's log,
    /// under an id the body gives.
    func internalError(_ error: any Error, version: ODataVersion) -> ServiceResponse {
        let id = GuidValue.random().description.prefix(8)
        options.logger.error(
            "Internal error", metadata: ["error-id": .string(String(id)), "error": .string(String(describing: error))])
        return .error(500, code: "InternalError", "The service failed to answer this request (error \(id) in its log)", version: version)
    }

    /// Maps any error to an OData error response with a fitting status.
    func errorResponse(_ error: any Error, version: ODataVersion) -> ServiceResponse {
        switch error {
        case let e as ServiceFailure: return .error(e.status, code: e.code, e.message, version: version)
        case let e as SyntaxError: return .error(400, code: "SyntaxError", e.description, version: version)
        case let e as BindingError: return .error(400, code: "BindingError", e.description, version: version)
        case let e as PayloadError: return .error(400, code: "BadPayload", e.description, version: version)
        case let e as StoreError:
            switch e.code {
            case .notFound: return .error(404, code: "NotFound", e.message, version: version)
            case .unsupported: return .error(501, code: "NotImplemented", e.message, version: version)
            case .conflict: return .error(409, code: "Conflict", e.message, version: version)
            case .badRequest: return .error(400, code: "BadRequest", e.message, version: version)
            case .unknownEntitySet, .unknownProperty: return .error(400, code: "BadRequest", e.message, version: version)
            default: return internalError(e, version: version)
            }
        case let e as DatabaseError where e.code == .constraint:
            return .error(409, code: "Conflict", e.message, version: version)
        default:
            return internalError(error, version: version)
        }
    }

    private func dispatch(_ request: ServiceRequest) async throws -> ServiceResponse {
        var request = request
        if request.method == "POST", let tunnelled = request.headers["X-HTTP-Method"] {
            request.method = tunnelled.uppercased()
        }
        let path = request.path
        if request.method == "MERGE" && !request.isV2 {
            throw ServiceFailure(405, "MethodNotAllowed", "MERGE is OData V2's method; a V4 service updates with PATCH")
        }
        if ["POST", "PUT", "PATCH", "MERGE"].contains(request.method), !request.body.isEmpty,
           (request.headers["Content-Type"] ?? "").trimmingCharacters(in: .whitespaces).isEmpty {
            throw ServiceFailure(415, "UnsupportedMediaType",
                                 "A \(request.method) with a body needs a Content-Type (application/json for entities)")
        }
        if request.method == "GET" || request.method == "HEAD" {
            let first = path.split(separator: "/", maxSplits: 1).first.map(String.init) ?? ""
            let name = first.split(separator: "(", maxSplits: 1).first.map(String.init) ?? first
            if model.actionImport(name) != nil {
                throw ServiceFailure(405, "MethodNotAllowed", "\(name) is an action: call it with POST")
            }
        }
        switch (request.method, path) {
        case ("GET", ""): return serviceDocument(request)
        case ("GET", "$metadata"):
            var headers = HTTPHeaders()
            headers["Content-Type"] = "application/xml"
            headers[request.isV2 ? "DataServiceVersion" : "OData-Version"] = request.isV2 ? "2.0" : "4.0"
            let writer = MetadataWriter()
            let body = Array((request.isV2 ? writer.v2(model) : writer.v4(model)).utf8)
            // A backend with ETags gives $metadata one too, so that clients can check it with
            // a conditional request at every download (SPEC §14).
            guard options.sendsETags else { return ServiceResponse(status: 200, headers: headers, body: body) }
            let etag = Self.metadataETag(body)
            headers["ETag"] = etag
            let asked = (request.headers["If-None-Match"] ?? "").split(separator: ",")
                .map { $0.trimmingCharacters(in: .whitespaces) }
            if asked.contains(etag) || asked.contains("*") {
                return ServiceResponse(status: 304, headers: headers)
            }
            return ServiceResponse(status: 200, headers: headers, body: body)
        case ("POST", "$batch"):
            return try await batch(request)
        case (_, "$batch"), (_, "$metadata"):
            throw ServiceFailure(405, "MethodNotAllowed", "\(request.method) is not allowed on \(path)")
        default:
            break
        }
        if let repeated = try await repeatedResponse(request) { return repeated }
        let response: ServiceResponse
        switch request.method {
        case "GET": response = try await read(request)
        case "POST", "PUT", "PATCH", "MERGE", "DELETE":
            response = try await modifyRemembering(request)
        default:
            throw ServiceFailure(405, "MethodNotAllowed", "\(request.method) is not supported")
        }
        return response
    }

    private func serviceDocument(_ request: ServiceRequest) -> ServiceResponse {
        let sets = model.entityContainer?.entitySets.map(\.name) ?? []
        if request.isV2 {
            return .json(200, Array(JSONValue.object([.init("d", .object([.init("EntitySets", .array(sets.map { .string($0) }))]))]).serialized.utf8), version: request.version)
        }
        var items = sets.map { JSONValue.object([.init("name", .string($0)), .init("kind", .string("EntitySet")), .init("url", .string($0))]) }
        for item in model.entityContainer?.functionImports ?? [] where item.includeInServiceDocument {
            items.append(.object([.init("name", .string(item.name)), .init("kind", .string("FunctionImport")), .init("url", .string(item.name))]))
        }
        return .json(200, Array(JSONValue.object([.init("@odata.context", .string("$metadata")), .init("value", .array(items))]).serialized.utf8), version: request.version)
    }
}

/// A failure with an HTTP status and an OData error code.
struct ServiceFailure: Error {
    var status: Int
    var code: String
    var message: String
    init(_ status: Int, _ code: String, _ message: String) {
        self.status = status
        self.code = code
        self.message = message
    }
}
