import Crypto
import Foundation
import PostgresNIO
public import Logging
public import ODataCore
public import OfflineOData

/// An answer of the gateway, independent of HTTP.
public struct GatewayResponse: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// Whether the device gets no answer at all: its connection is cut, as when an answer is
    /// lost, so that it keeps the request and sends it again (an answer of a request sent on
    /// its own would land in the device's ErrorArchive).
    public var dropsConnection = false

    /// An answer with its parts.
    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    static func error(_ error: GatewayError, legacy: Bool) -> GatewayResponse {
        let odata = ODataError(code: error.code, message: error.message, httpStatus: error.status)
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        // The gateway's own unavailability passes: a client may ask again shortly.
        if error.status == 503 { headers["Retry-After"] = "5" }
        return GatewayResponse(status: error.status, headers: headers, body: legacy ? odata.v2JSON() : odata.v4JSON())
    }
}

/// The sync gateway (SPEC §13): answers defining queries and their deltas from PostgreSQL,
/// refreshing them from the backend once for every device of a scope, and forwards every other
/// request to the backend with the device's credentials. Keeps nothing a device depends on in
/// memory: any number of instances share one ``GatewayStore``.
public final class Gateway: Sendable {
    /// What the gateway serves now (``reload(_:)`` replaces it; a request that began keeps
    /// reading the one it read first only where it holds a copy).
    public var configuration: GatewayConfiguration { current.value }
    let current: ConfigurationBox
    /// Where ``reloadFromSource()`` gets a new configuration (the command line re-reads its
    /// file and flags); nil: the gateway cannot reload.
    let reloadSource: (@Sendable () throws -> GatewayConfiguration)?
    /// Where scopes, rows and tokens are kept.
    public let store: GatewayStore
    let transport: any Transport
    let logger: Logger
    /// The last warnings and errors this gateway logged (`GET /api/log` on the admin port).
    public let recentLog = GatewayRecentLog()
    let models = ModelCache()
    let credentialCheck = CredentialCheck()
    let housekeeping = Housekeeping()
    let buildSlots = BuildSlots()
    let identities = GatewayIdentities()
    let refreshJobs = RefreshJobs()
    let streams = FirstReadStreams()
    let operations = GatewayOperations()
    let throttle = ThrottleBuckets()
    let metrics: GatewayMetrics

    /// A gateway over `store`, reaching backends through `transport`.
    public init(
        configuration: GatewayConfiguration, store: GatewayStore, transport: any Transport = DefaultTransport.make(),
        logger: Logger = Logger(label: "oodata.gateway"), metrics: GatewayMetrics = GatewayMetrics(),
        reloadSource: (@Sendable () throws -> GatewayConfiguration)? = nil
    ) {
        self.metrics = metrics
        self.current = ConfigurationBox(configuration)
        self.reloadSource = reloadSource
        self.store = store
        self.transport = transport
        var recording = logger
        recording.handler = RecordingLogHandler(inner: logger.handler, recent: recentLog)
        self.logger = recording
    }

    /// The backend served at `path` (`/NAME/...` or the root) and the rest of the path.
    public func route(path: String) -> (backend: GatewayBackend, rest: String)? {
        let trimmed = path.hasPrefix("/") ? String(path.dropFirst()) : path
        let first = String(trimmed.prefix { $0 != "/" })
        if let named = configuration.backends.first(where: { !$0.name.isEmpty && $0.name == first }) {
            return (named, String(trimmed.dropFirst(first.count).drop { $0 == "/" }))
        }
        if let root = configuration.backends.first(where: { $0.name.isEmpty }) { return (root, trimmed) }
        return nil
    }

    /// Answers `request` for `backend`.
    public func handle(_ incoming: GatewayRequest, backend: GatewayBackend) async -> GatewayResponse {
        var identified: GatewayRequest?
        let answer = await serve(incoming, backend: backend, identified: &identified)
        // A device is noted only once its request succeeded: its credentials were accepted (by
        // the backend or the gateway's check), so made-up credentials or instance IDs leave no
        // rows. Progress and resolution polls are no sign of a device's use.
        if let request = identified, (200..<300).contains(answer.status) || answer.status == 304,
            !request.target.hasPrefix("$oodata/progress/"), !request.target.hasPrefix("$oodata/requests/")
        {
            let path = String(request.target.prefix { $0 != "?" })
            await noteDevice(
                request, backend: backend,
                sync: path == "$batch" || Self.modifying.contains(request.method.uppercased())
                    || request.headers["Prefer"]?.contains("track-changes") == true
                    || request.target.contains("$deltatoken") || request.target.contains("!deltatoken"))
        }
        return answer
    }

    /// Answers `request` for `backend`; `identified` is the request with its verified identity,
    /// once the gateway knows it.
    func serve(
        _ incoming: GatewayRequest, backend: GatewayBackend, identified: inout GatewayRequest?
    ) async -> GatewayResponse {
        var legacy = false
        var request = incoming
        do {
            // Every path that would leave the gateway, checked once before anything is recorded.
            try LeavingPath.checkRequest(request, backendRoot: backend.url)
            // Whose data this is: from what can be verified, never from a name the device gives.
            request.user = try await identities.identity(of: request, backend: backend, gateway: self)
            identified = request
            // Progress pulls are not counted: a device polls them while it waits.
            if !request.target.hasPrefix("$oodata/progress/"),
                let refused = await throttled(request, backend: backend, legacy: legacy)
            {
                return refused
            }
            let path = String(request.target.prefix { $0 != "?" })
            if request.method == "GET", path.hasPrefix("$oodata/requests/") {
                return try await resolutionAnswer(
                    String(path.dropFirst("$oodata/requests/".count)), request: request, backend: backend)
            }
            if request.method == "GET", request.target.hasPrefix("$oodata/progress/") {
                // The operation's ID, without the query a client's `urlSuffix` adds (`sap-client`).
                let rest = request.target.dropFirst("$oodata/progress/".count)
                return await progressAnswer(String(rest.prefix { $0 != "?" }), user: request.user)
            }
            if request.method == "GET", path == "$oodata/shared-device" {
                return try await sharedDevicePolicy(request, backend: backend)
            }
            // Stores devices send for support (issue 56).
            if path == "$oodata/support" || path.hasPrefix("$oodata/support/") {
                return try await supportChunk(
                    request, backend: backend, rest: String(path.dropFirst("$oodata/support".count).drop { $0 == "/" }))
            }
            // Stores built on the gateway for first opens (issue 37).
            if request.target.hasPrefix("$oodata/store") {
                let path = String(request.target.prefix { $0 != "?" })
                if request.method == "POST", path == "$oodata/store" {
                    return try await storeFileOffer(request, backend: backend)
                }
                if request.method == "GET", path.hasPrefix("$oodata/store/") {
                    return try await storeFileContent(
                        String(path.dropFirst("$oodata/store/".count)), request: request, backend: backend)
                }
                throw GatewayError(
                    status: 405, code: "MethodNotAllowed", "POST $oodata/store, or GET $oodata/store/<id>")
            }
            let model = try await models.model(
                for: backend, credentials: credentials(of: request, backend: backend), gateway: self)
            legacy = model.version.isLegacy
            if let answer = await metadataFromGateway(request, backend: backend) { return answer }
            if let upload = try await upload(request, backend: backend, model: model) { return upload }
            if let tracked = try trackedQuery(request, backend: backend, model: model) {
                // AUTO: a backend that gives delta links for this query keeps its own; the
                // device's reads and delta links pass through (asked once a minute per query and
                // credentials, with the credential check).
                if tracked.token == nil, backend.tracking(tracked.canonical) == .auto {
                    let offersDelta = try await credentialCheck.check(
                        credentials(of: request, backend: backend), url: backend.url + tracked.probeTarget,
                        askDelta: true, gateway: self, backend: backend.url)
                    if offersDelta {
                        metrics.passedThrough.increment()
                        return try await forward(request, backend: backend)
                    }
                }
                return try await answerTracked(tracked, request: request, backend: backend, model: model)
            }
            if let (scope, hash) = conditionalEntityRead(request, model: model) {
                return try await readWithGatewayETag(request, scope: scope, hash: hash, backend: backend, model: model)
            }
            let answer = try await forward(request, backend: backend)
            if Self.modifying.contains(request.method.uppercased()) {
                // A change without the gateway's records (no repeatable-request ID): written
                // through as a recorded one is (a `$batch` forwarded as it is names no entity the
                // gateway reads back: its scopes are made due). Its scopes' checksums wait for a
                // refresh after it. Best effort: a missed note costs a device a needless full
                // read at most.
                let path = String(request.target.prefix { $0 != "?" })
                // A `$batch` of reads only changes nothing.
                let readsOnly =
                    path == "$batch"
                    && ((try? Self.units(of: request))??.0.allSatisfy { unit in
                        unit.operations.allSatisfy { $0.method == "GET" }
                    } ?? false)
                if (200..<300).contains(answer.status), !readsOnly {
                    var method = request.method.uppercased()
                    if method == "POST", let tunnelled = request.headers["X-HTTP-Method"] {
                        method = tunnelled.uppercased()
                    }
                    let location = answer.headers["Location"] ?? answer.headers["OData-EntityId"]
                    let applied = AppliedRequest(
                        method: method, url: path == "$batch" ? "$batch" : request.target,
                        status: answer.status,
                        location: location.map {
                            $0.replacingOccurrences(of: request.gatewayRoot, with: backend.url)
                        }, contentID: nil)
                    do {
                        try await writeThrough([applied], request: request, backend: backend, model: model)
                    } catch {
                        // Applied: the answer goes to the device; only its scopes may lag a target.
                        logger.warning("Write-through failed", metadata: ["error": "\(error)"])
                    }
                }
                try? await store.noteWrite(backend: backend.url, user: request.user)
            }
            if request.method == "GET", request.target == "$metadata", answer.status == 200 {
                // A device checks $metadata at every download: a change reaches the gateway too.
                _ = try? await models.learn(
                    answer.body, for: backend.url, contentType: answer.headers["Content-Type"],
                    etag: answer.headers["ETag"])
                await credentialCheck.noteAccepted(credentials(of: request, backend: backend), backend: backend.url)
            }
            return answer
        } catch let answer as BackendAnswer {
            return rewritten(answer.response, backend: backend, gatewayRoot: request.gatewayRoot)
        } catch let error as GatewayError {
            if error.code == "BadPath" { metrics.refusedPaths.increment() }
            return .error(error, legacy: legacy)
        } catch let error as TransportError {
            return .error(
                GatewayError(status: 502, code: "BackendUnreachable", "The backend did not answer: \(error)"),
                legacy: legacy)
        } catch let error as PostgresDeadlineExceeded {
            logger.warning("PostgreSQL did not answer", metadata: ["error": "\(error)"])
            return .error(
                GatewayError(
                    status: 503, code: "GatewayStateUnavailable",
                    "The gateway's database did not answer in time; try again shortly"), legacy: legacy)
        } catch {
            let id = UUID().uuidString.prefix(8)
            logger.error("Gateway request failed", metadata: ["error-id": .string(String(id)), "error": "\(error)"])
            return .error(
                GatewayError(
                    status: 503, code: "GatewayUnavailable",
                    "The gateway could not answer (error id \(id)); try again"), legacy: legacy)
        }
    }

    /// The device's credentials as the gateway sends them on the reads it makes for the device.
    func credentials(of request: GatewayRequest, backend: GatewayBackend) -> HTTPHeaders {
        request.credentialHeaders(identityCookies: backend.identityCookies)
    }

    /// The gateway's own credentials for `backend`'s shared data.
    static func shared(_ backend: GatewayBackend) -> HTTPHeaders {
        var headers = HTTPHeaders()
        if let authorization = backend.sharedAuthorization { headers["Authorization"] = authorization }
        return headers
    }

    /// Removes scopes no device read for the scope retention, and the records of uploaded
    /// requests past their retention, at most every ten minutes per instance (after a refresh
    /// or an upload). A failure is logged: it never fails a device's request.
    func housekeep() async {
        let retention = configuration.scopeRetention
        guard await housekeeping.due(every: min(600, retention)) else { return }
        do {
            let removed = try await store.removeUnusedScopes(unused: retention)
            if removed > 0 { logger.info("Removed unused scopes", metadata: ["scopes": "\(removed)"]) }
            try await store.removeProgress(olderThan: 3600)
            // Devices unseen for the scope retention: their rows go with their scopes.
            try await store.removeDevices(unseenFor: retention)
            // Store files outlive their reuse by a day (shared ones) or an hour (a user's, reused
            // ten minutes), for devices still downloading them.
            let reuse = configuration.backends.map(\.prepopulateInterval).max() ?? 0
            try await store.removeStoreFiles(sharedOlderThan: reuse + 24 * 3600, userOlderThan: 600 + 3600)
            for backend in configuration.backends {
                try await store.removeSupportStores(backend: backend.url, olderThan: backend.supportStoreRetention)
            }
            try await store.removeSupportStores(notOf: configuration.backends.map(\.url))
            let requests = try await store.removeRequestRecords(olderThan: configuration.requestRetention)
            if requests > 0 { logger.info("Removed request records", metadata: ["requests": "\(requests)"]) }
        } catch {
            logger.warning("Removing unused scopes failed", metadata: ["error": "\(error)"])
        }
    }

    // MARK: Forwarding

    /// Headers that belong to one connection, never forwarded.
    static let hopByHop: Set<String> = [
        "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length",
        "accept-encoding", "content-encoding", "proxy-authorization", "proxy-authenticate",
    ]

    func forward(_ incoming: GatewayRequest, backend: GatewayBackend) async throws -> GatewayResponse {
        var request = incoming
        if let (body, contentType) = try LeavingPath.checkRequest(incoming, backendRoot: backend.url) {
            // The batch as checked, written again: the backend reads the requests the gateway saw.
            request.body = body
            request.headers["Content-Type"] = contentType
        }
        var headers = HTTPHeaders()
        for field in request.headers where !Self.hopByHop.contains(field.name.lowercased()) {
            headers.add(field.name, field.value)
        }
        if let encoding = request.headers["Content-Encoding"] { headers["Content-Encoding"] = encoding }
        let body = Self.rewrite(
            request.body, contentType: request.headers["Content-Type"],
            encoded: request.headers["Content-Encoding"] != nil, from: request.gatewayRoot, to: backend.url)
        metrics.backendRequests("forward").increment()
        let response = try await transport.send(
            TransportRequest(method: request.method, url: backend.url + request.target, headers: headers, body: body),
            timeout: configuration.backendTimeout)
        return rewritten(response, backend: backend, gatewayRoot: request.gatewayRoot)
    }

    /// A backend answer as the device gets it: the backend's root replaced by the gateway's.
    func rewritten(_ response: TransportResponse, backend: GatewayBackend, gatewayRoot: String) -> GatewayResponse {
        var headers = HTTPHeaders()
        let backendPath = URL(string: backend.url)?.path ?? "/"
        let gatewayPath = URL(string: gatewayRoot)?.path ?? "/"
        for field in response.headers where !Self.hopByHop.contains(field.name.lowercased()) {
            var value = field.value
            switch field.name.lowercased() {
            case "location", "odata-entityid", "content-location":
                value = value.replacingOccurrences(of: backend.url, with: gatewayRoot)
            case "set-cookie":
                // A session or CSRF cookie scoped to the backend's path must reach the gateway's.
                value = Self.cookieOnGateway(value, backendPath: backendPath, gatewayPath: gatewayPath)
            default: break
            }
            headers.add(field.name, value)
        }
        if let encoding = response.headers["Content-Encoding"] { headers["Content-Encoding"] = encoding }
        let body = Self.rewrite(
            response.body, contentType: response.headers["Content-Type"],
            encoded: response.headers["Content-Encoding"] != nil, from: backend.url, to: gatewayRoot)
        return GatewayResponse(status: response.status, headers: headers, body: body)
    }

    /// A body with one root replaced by the other: only text (JSON, XML, multipart, plain) that
    /// is valid UTF-8 and not compressed; anything else goes as it came.
    static func rewrite(_ body: [UInt8], contentType: String?, encoded: Bool, from: String, to: String) -> [UInt8] {
        guard !encoded, isText(contentType), !body.isEmpty, let text = String(validating: body, as: UTF8.self),
            text.contains(from)
        else { return body }
        return Array(text.replacingOccurrences(of: from, with: to).utf8)
    }

    /// `Set-Cookie` with its `Path` moved from the backend's path to the gateway's.
    static func cookieOnGateway(_ value: String, backendPath: String, gatewayPath: String) -> String {
        value.split(separator: ";", omittingEmptySubsequences: false).map { part -> String in
            let trimmed = part.trimmingCharacters(in: .whitespaces)
            guard trimmed.lowercased().hasPrefix("path=") else { return String(part) }
            let path = String(trimmed.dropFirst(5))
            let base = backendPath.hasSuffix("/") ? String(backendPath.dropLast()) : backendPath
            guard path == base || path.hasPrefix(base + "/") || base.hasPrefix(path) else { return String(part) }
            return " Path=" + gatewayPath
        }.joined(separator: ";")
    }

    static func isText(_ contentType: String?) -> Bool {
        guard let type = contentType?.lowercased() else { return false }
        return type.contains("json") || type.contains("xml") || type.hasPrefix("multipart/") || type.hasPrefix("text/")
            || type.hasPrefix("application/http")
    }
}

/// A backend's answer that goes to the device as it is (an error while refreshing).
struct BackendAnswer: Error {
    var response: TransportResponse
}

/// When this instance last removed unused scopes.
/// How many store builds run on this instance at once (each holds a PostgreSQL connection for
/// its lock while it runs); beyond that, devices page instead of waiting.
actor BuildSlots {
    static let limit = 2
    private var building: Set<String> = []

    /// What asking for a slot to build the file named `key` gave.
    enum Entry { case entered, beingBuilt, full }

    /// A slot to build `key` (the caller then calls ``leave(_:)``), unless this instance builds
    /// it already or has no slot left.
    func enter(_ key: String) -> Entry {
        if building.contains(key) { return .beingBuilt }
        guard building.count < Self.limit else { return .full }
        building.insert(key)
        return .entered
    }

    func leave(_ key: String) { building.remove(key) }
}

actor Housekeeping {
    private var last: ContinuousClock.Instant?

    /// Whether `seconds` have passed since the last time this answered true (true the first time).
    func due(every seconds: Double) -> Bool {
        let now = ContinuousClock.now
        if let last, now - last < .milliseconds(Int64(seconds * 1000)) { return false }
        last = now
        return true
    }
}
