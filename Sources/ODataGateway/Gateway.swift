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
    /// What the gateway serves.
    public let configuration: GatewayConfiguration
    /// Where scopes, rows and tokens are kept.
    public let store: GatewayStore
    let transport: any Transport
    let logger: Logger
    let models = ModelCache()
    let credentialCheck = CredentialCheck()
    let housekeeping = Housekeeping()
    let buildSlots = BuildSlots()
    let identities = GatewayIdentities()
    let refreshJobs = RefreshJobs()
    let metrics: GatewayMetrics

    /// A gateway over `store`, reaching backends through `transport`.
    public init(
        configuration: GatewayConfiguration, store: GatewayStore, transport: any Transport = DefaultTransport.make(),
        logger: Logger = Logger(label: "oodata.gateway"), metrics: GatewayMetrics = GatewayMetrics()
    ) {
        self.metrics = metrics
        self.configuration = configuration
        self.store = store
        self.transport = transport
        self.logger = logger
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
        var legacy = false
        var request = incoming
        do {
            // Every path that would leave the gateway, checked once before anything is recorded.
            try LeavingPath.checkRequest(request, backendRoot: backend.url)
            // Whose data this is: from what can be verified, never from a name the device gives.
            request.user = try await identities.identity(of: request, backend: backend, gateway: self)
            if request.method == "GET", request.target.hasPrefix("$oodata/progress/") {
                // The operation's ID, without the query a client's `urlSuffix` adds (`sap-client`).
                let rest = request.target.dropFirst("$oodata/progress/".count)
                return await progressAnswer(String(rest.prefix { $0 != "?" }), user: request.user)
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
                if (200..<300).contains(answer.status) {
                    let path = String(request.target.prefix { $0 != "?" })
                    var method = request.method.uppercased()
                    if method == "POST", let tunnelled = request.headers["X-HTTP-Method"] { method = tunnelled.uppercased() }
                    let location = answer.headers["Location"] ?? answer.headers["OData-EntityId"]
                    let applied = AppliedRequest(
                        method: method, url: path == "$batch" ? "$batch" : request.target,
                        status: answer.status,
                        location: location.map {
                            $0.replacingOccurrences(of: request.gatewayRoot, with: backend.url)
                        }, contentID: nil)
                    await writeThrough([applied], request: request, backend: backend, model: model)
                }
                try? await store.noteWrite(backend: backend.url, user: request.user)
            }
            if request.method == "GET", request.target.hasPrefix("$metadata"), answer.status == 200 {
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

    /// A device's `GET $metadata` answered from the document the gateway keeps (read from the
    /// backend at most every ``ModelCache/maximumAge``, conditionally where it gives ETags), with
    /// the gateway's ETag: a device's check at each download is a 304 without a backend
    /// request. Only for credentials the backend accepted within ``CredentialCheck/metadataLifetime``;
    /// nil otherwise (the request is forwarded, as before).
    func metadataFromGateway(_ request: GatewayRequest, backend: GatewayBackend) async -> GatewayResponse? {
        guard request.method == "GET", String(request.target.prefix { $0 != "?" }) == "$metadata",
            let kept = await models.document(for: backend.url),
            await credentialCheck.acceptedLately(credentials(of: request, backend: backend), backend: backend.url)
        else { return nil }
        var headers = HTTPHeaders()
        headers["ETag"] = kept.etag
        headers["Cache-Control"] = "no-cache"
        let condition = request.headers["If-None-Match"] ?? ""
        if condition.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == kept.etag }) {
            return GatewayResponse(status: 304, headers: headers)
        }
        headers["Content-Type"] = kept.contentType ?? "application/xml"
        let body = Self.rewrite(
            kept.body, contentType: headers["Content-Type"], encoded: false, from: backend.url, to: request.gatewayRoot)
        return GatewayResponse(status: 200, headers: headers, body: body)
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

    /// The defining-query read `request` is, or nil when it is to be forwarded: a GET of an
    /// entity set with `Prefer: odata.track-changes`, or one carrying a token of the gateway.
    func trackedQuery(_ request: GatewayRequest, backend: GatewayBackend, model: Model) throws -> TrackedQuery? {
        guard request.method == "GET" else { return nil }
        let tracked = try TrackedQuery(target: request.target)
        let set = tracked.path.removingPercentEncoding ?? tracked.path
        guard model.entitySet(set) != nil else { return nil }
        let asks = (request.headers["Prefer"] ?? "").lowercased().contains("track-changes")
        guard tracked.token != nil || asks else { return nil }
        let mode = backend.tracking(tracked.canonical)
        guard mode != .never else { return nil }
        // A delta link of the backend's own (given while the query passed through) goes to the
        // backend; under ALWAYS the device reads again and joins the gateway's tracking.
        if tracked.token == nil, tracked.options.contains(where: { TrackedQuery.deltaTokenNames.contains($0.name) }) {
            guard mode == .always else { return nil }
            throw GatewayError(
                status: 410, code: "DeltaTokenExpired",
                "The gateway tracks \(set)'s changes itself now; the backend's delta token is no longer "
                    + "followed: read \(set) again")
        }
        return tracked
    }

    // MARK: Tracked reads

    func answerTracked(
        _ tracked: TrackedQuery, request: GatewayRequest, backend: GatewayBackend, model: Model
    )
        async throws -> GatewayResponse
    {
        // Rows kept in PostgreSQL go only to a device the backend answers this very query now,
        // whatever scope they are in: its credentials are checked with the query at `$top=0`
        // (an acceptance kept for a minute). Under AUTO it is the same probe that asked whether
        // the backend tracks the query, so a fresh read costs one probe, not two.
        _ = try await credentialCheck.check(
            credentials(of: request, backend: backend), url: backend.url + tracked.probeTarget,
            askDelta: backend.tracking(tracked.canonical) == .auto, gateway: self, backend: backend.url)
        let canonical = tracked.canonical
        let shared = backend.isShared(canonical)
        let user = shared ? "" : request.user
        let interval = backend.refreshInterval(canonical, default: configuration.refreshInterval)
        var scope = try await store.scope(backend: backend.url, query: canonical, user: user, interval: interval)
        let pageSize = Self.pageSize(request.headers["Prefer"], default: configuration.pageSize)
        let legacy = model.version.isLegacy
        let set = tracked.path.removingPercentEncoding ?? tracked.path
        guard let type = model.entityType(ofEntitySet: set) else {
            throw GatewayError(status: 404, code: "NotFound", "The backend has no entity set \(set)")
        }
        let keyNames = model.key(of: type).map(\.name)
        if interval > 0 {
            // The refresher keeps the scope fresh from now on, with the credentials just checked.
            await refreshJobs.note(
                RefreshJob(
                    scope: scope.id, backend: backend.url, query: tracked, keyNames: keyNames, legacy: legacy,
                    authorization: shared ? Self.shared(backend) : credentials(of: request, backend: backend),
                    interval: interval),
                keep: configuration.refresherKeeps)
        }
        func refreshIfDue() async throws {
            guard scope.due else { return }
            let authorization = shared ? Self.shared(backend) : credentials(of: request, backend: backend)
            let started = ContinuousClock.now
            let summary = try await refresh(
                scope, query: tracked, backend: backend, keyNames: keyNames, legacy: legacy,
                authorization: authorization, interval: interval, for: request)
            if summary.ran {
                await housekeep()
                metrics.refreshes.increment()
                metrics.rowsChanged.increment(by: summary.changed)
                metrics.rowsRemoved.increment(by: summary.removed)
                metrics.refreshTime.record(duration: ContinuousClock.now - started)
                logger.info(
                    "Refreshed",
                    metadata: [
                        "query": .string(canonical), "rows": "\(summary.rows)", "changed": "\(summary.changed)",
                        "removed": "\(summary.removed)",
                    ])
            } else {
                metrics.skippedRefreshes.increment()
            }
            guard let now = try await store.scope(id: scope.id) else {
                throw GatewayError(status: 503, code: "GatewayState", "The scope of \(canonical) went away")
            }
            scope = now
        }
        switch tracked.token {
        case nil:
            try await refreshIfDue()
            return try await fullPage(
                tracked, scope: scope.id, published: scope.published, after: "",
                pageSize: pageSize, set: set, legacy: legacy, root: request.gatewayRoot,
                backend: backend)
        case .page(let id, let published, let after):
            guard id == scope.id else { throw try await foreignToken(id, canonical: canonical, set: set) }
            return try await fullPage(
                tracked, scope: id, published: published, after: after, pageSize: pageSize,
                set: set, legacy: legacy, root: request.gatewayRoot, backend: backend)
        case .delta(let id, let since, let upTo, let afterSeq, let afterKey):
            guard id == scope.id else { throw try await foreignToken(id, canonical: canonical, set: set) }
            if upTo == nil { try await refreshIfDue() }
            guard since >= scope.floor else {
                throw GatewayError(
                    status: 410, code: "DeltaTokenExpired",
                    "The delta token is older than the gateway keeps deletions; read \(set) again")
            }
            guard since <= scope.published else {
                throw GatewayError(status: 400, code: "BadToken", "The delta token is not one the gateway gave")
            }
            let end = upTo ?? scope.published
            metrics.deltaPages.increment()
            let rows = try await store.deltaPage(
                scope: id, since: since, upTo: end, after: upTo == nil ? nil : (afterSeq, afterKey), limit: pageSize + 1
            )
            // A purge that committed before the page was read raised the floor: 410, not a
            // delta without the tombstones it removed.
            if let now = try await store.scope(id: id), since < now.floor {
                throw GatewayError(
                    status: 410, code: "DeltaTokenExpired",
                    "The delta token is older than the gateway keeps deletions; read \(set) again")
            }
            let more = rows.count > pageSize
            let slice = Array(rows.prefix(pageSize))
            let link: String
            var isNext = false
            if more, let last = slice.last {
                link = tracked.link(
                    root: request.gatewayRoot,
                    token: .delta(scope: id, since: since, upTo: end, afterSeq: last.seq, afterKey: last.key),
                    legacy: legacy)
                isNext = true
            } else {
                link = tracked.link(
                    root: request.gatewayRoot,
                    token: .delta(scope: id, since: end, upTo: nil, afterSeq: 0, afterKey: ""), legacy: legacy)
            }
            let answer = page(
                slice, scope: id, set: set, legacy: legacy, delta: true, nextLink: isNext ? link : nil,
                deltaLink: isNext ? nil : link, root: request.gatewayRoot, backend: backend)
            return isNext ? answer : await withChecksum(answer, scope: id, upTo: end)
        }
    }

    /// Where a device's operation is on the gateway: `{"step": …, "number": …, "count": …}`
    /// (`step` null when the gateway has no word of it yet).
    func progressAnswer(_ operation: String, user: String) async -> GatewayResponse {
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers["Cache-Control"] = "no-store"
        guard let id = Self.operationID(operation) else {
            return .error(
                GatewayError(status: 400, code: "BadOperation", "The operation ID is not one a device sends"),
                legacy: false)
        }
        let found = try? await store.progress(id, user: user)
        var members: [JSONValue.Member] = [JSONValue.Member("step", found.map { .string($0.step) } ?? .null)]
        if let number = found?.number { members.append(JSONValue.Member("number", .number(String(number)))) }
        if let count = found?.count { members.append(JSONValue.Member("count", .number(String(count)))) }
        return GatewayResponse(status: 200, headers: headers, body: Array(JSONValue.object(members).serialized.utf8))
    }

    /// A device's operation ID (`OOData-Operation`), when it has the shape one has: up to 64
    /// letters, digits and dashes.
    static func operationID(_ text: String?) -> String? {
        guard let text, !text.isEmpty, text.count <= 64,
            text.utf8.allSatisfy({ $0 < 128 }),
            text.unicodeScalars.allSatisfy({ CharacterSet.alphanumerics.contains($0) || $0 == "-" })
        else { return nil }
        return text
    }

    /// Records a step of the device's operation that `request` belongs to, if it named one.
    /// Progress is for showing: a failure to record it is ignored.
    /// On `connection` when the caller holds one (asking the pool for a second one while
    /// holding the first could wait for ever when the pool runs dry); otherwise in a task of
    /// its own, which nothing waits for (a refresh holds its transaction's connection).
    func report(
        _ request: GatewayRequest, _ step: String, number: Int? = nil, count: Int? = nil,
        on connection: PostgresConnection? = nil
    ) async {
        guard let operation = Self.operationID(request.headers["OOData-Operation"]) else { return }
        let user = request.user
        if let connection {
            try? await store.setProgress(
                operation, user: user, step: step, number: number, count: count, on: connection)
            return
        }
        let store = self.store
        Task {
            try? await store.withConnection { connection in
                try await store.setProgress(
                    operation, user: user, step: step, number: number, count: count, on: connection)
            }
        }
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
            // Store files outlive their reuse by a day (shared ones) or an hour (a user's, reused
            // ten minutes), for devices still downloading them.
            let reuse = configuration.backends.map(\.prepopulateInterval).max() ?? 0
            try await store.removeStoreFiles(sharedOlderThan: reuse + 24 * 3600, userOlderThan: 600 + 3600)
            let requests = try await store.removeRequestRecords(olderThan: configuration.requestRetention)
            if requests > 0 { logger.info("Removed request records", metadata: ["requests": "\(requests)"]) }
        } catch {
            logger.warning("Removing unused scopes failed", metadata: ["error": "\(error)"])
        }
    }

    /// The answer to a token of another scope: 410 when it is the same query under other
    /// credentials (a rotated bearer token: the device reads again), 400 otherwise. Never rows.
    func foreignToken(_ id: Int64, canonical: String, set: String) async throws -> GatewayError {
        let stored = try await store.query(ofScope: id)
        // The same entity set: the same query under other credentials, or a scope named before
        // scope names changed (issue 54): the device reads again, into its scope.
        if let stored, stored != canonical,
            GatewayBackend.entitySetPath(stored) == GatewayBackend.entitySetPath(canonical)
                && (try? TrackedQuery(target: stored))?.canonical == canonical
        {
            return GatewayError(
                status: 410, code: "DeltaTokenExpired", "The token was given for an older name of this query; read \(set) again")
        }
        switch stored {
        case canonical?:
            return GatewayError(
                status: 410, code: "DeltaTokenExpired",
                "The token was given under other credentials; read \(set) again")
        case nil:
            return GatewayError(
                status: 410, code: "DeltaTokenExpired",
                "The gateway no longer keeps the changes this token follows (unread too long); "
                    + "read \(set) again")
        default: break
        }
        return GatewayError(status: 400, code: "BadToken", "The token belongs to another query")
    }

    func fullPage(
        _ tracked: TrackedQuery, scope: Int64, published: Int64, after: String, pageSize: Int, set: String,
        legacy: Bool, root: String, backend: GatewayBackend
    ) async throws -> GatewayResponse {
        let rows = try await store.fullPage(scope: scope, after: after, limit: pageSize + 1)
        metrics.fullPages.increment()
        let page = Array(rows.prefix(pageSize))
        if rows.count > pageSize, let last = page.last {
            let next = tracked.link(
                root: root, token: .page(scope: scope, published: published, after: last.key),
                legacy: legacy)
            return self.page(
                page, scope: scope, set: set, legacy: legacy, delta: false, nextLink: next, deltaLink: nil,
                root: root,
                backend: backend)
        }
        let delta = tracked.link(
            root: root, token: .delta(scope: scope, since: published, upTo: nil, afterSeq: 0, afterKey: ""),
            legacy: legacy)
        return await withChecksum(
            self.page(
                page, scope: scope, set: set, legacy: legacy, delta: false, nextLink: nil, deltaLink: delta,
                root: root,
                backend: backend), scope: scope, upTo: published)
    }

    /// The name of the header that carries a scope checksum on the last page of a read.
    public static let checksumHeader = "OOData-Scope-Checksum"

    /// `answer` with the scope checksum (`rows=N;sum=S`, see
    /// ``GatewayStore/checksum(scope:upTo:gatewayETags:)``) when there is one. A failure to
    /// compute it leaves it out: it is a check, not part of the answer.
    func withChecksum(_ answer: GatewayResponse, scope: Int64, upTo published: Int64) async -> GatewayResponse {
        guard let checksum = try? await store.checksum(
            scope: scope, upTo: published, gatewayETags: configuration.gatewayETags)
        else { return answer }
        var answer = answer
        answer.headers[Self.checksumHeader] = "rows=\(checksum.rows);sum=\(checksum.sum)"
        return answer
    }

    /// A page in the backend's protocol: V4 `value` with `@removed` entries and
    /// `@odata.nextLink`/`@odata.deltaLink`; V2 `d.results` with `__deleted` entries and
    /// `__next`/`__delta`. Payloads name the gateway instead of the backend.
    func page(
        _ rows: [GatewayStore.Row], scope: Int64, set: String, legacy: Bool, delta: Bool, nextLink: String?,
        deltaLink: String?, root: String, backend: GatewayBackend
    ) -> GatewayResponse {
        var text =
            legacy
            ? #"{"d":{"results":["#
            : #"{"@odata.context":"# + JSONValue.string(root + "$metadata#" + set + (delta ? "/$delta" : "")).serialized
                + #","value":["#
        for (index, row) in rows.enumerated() {
            if index > 0 { text += "," }
            if let payload = row.payload {
                let named = payload.replacingOccurrences(of: backend.url, with: root)
                text +=
                    configuration.gatewayETags
                    ? Self.withETag(named, scope: scope, hash: row.hash, legacy: legacy) : named
            } else if legacy {
                text += #"{"__deleted":true"# + (row.keyMembers.isEmpty ? "" : "," + row.keyMembers) + "}"
            } else {
                text +=
                    #"{"@removed":{"reason":"deleted"}"# + (row.keyMembers.isEmpty ? "" : "," + row.keyMembers) + "}"
            }
        }
        text += "]"
        if let nextLink {
            text += (legacy ? #","__next":"# : #","@odata.nextLink":"#) + JSONValue.string(nextLink).serialized
        }
        if let deltaLink {
            text += (legacy ? #","__delta":"# : #","@odata.deltaLink":"#) + JSONValue.string(deltaLink).serialized
        }
        text += legacy ? "}}" : "}"
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers[legacy ? "DataServiceVersion" : "OData-Version"] = legacy ? "2.0" : "4.0"
        headers["Preference-Applied"] = "odata.track-changes"
        return GatewayResponse(status: 200, headers: headers, body: Array(text.utf8))
    }

    /// The gateway's ETag of a row of `scope`: `W/"gw.<scope>.<hash>"`.
    static func gatewayETag(scope: Int64, hash: String) -> String { "W/\"gw.\(scope).\(hash)\"" }

    /// The scope and hash of one of the gateway's ETags, or nil for another ETag.
    /// One spelt like the gateway's but malformed gives scope -1, which no scope has: it is
    /// checked (and refused) as any other, never forwarded to a backend that would ignore it.
    static func parseGatewayETag(_ etag: String) -> (scope: Int64, hash: String)? {
        let text = etag.trimmingCharacters(in: .whitespaces)
        guard text.hasPrefix("W/\"gw.") else { return nil }
        let fields = text.dropFirst(6).dropLast().split(separator: ".", omittingEmptySubsequences: false)
        guard text.hasSuffix("\""), text.count > 8, fields.count == 2, let scope = Int64(fields[0]), scope >= 0,
            fields[1].count == 32, fields[1].allSatisfy({ $0.isHexDigit })
        else { return (-1, "") }
        return (scope, String(fields[1]))
    }

    /// A row's payload with the gateway's ETag, when the backend gave it none (V4
    /// `@odata.etag` or V3's `odata.etag`, V2 `__metadata.etag`, at the entity's top level).
    /// Payloads without the letters `etag` anywhere take the fast way: no parsing.
    static func withETag(_ payload: String, scope: Int64, hash: String?, legacy: Bool) -> String {
        guard let hash, payload.hasPrefix("{") else { return payload }
        let etag = JSONValue.string(gatewayETag(scope: scope, hash: hash))
        if !payload.contains("etag") {
            let text = etag.serialized
            if !legacy {
                let body = payload.dropFirst()
                return #"{"@odata.etag":"# + text + (body.hasPrefix("}") ? String(body) : "," + body)
            }
            // V2: the entity's own `__metadata` comes first as the backend writes it.
            let opening = #"{"__metadata":{"#
            if payload.hasPrefix(opening) {
                let rest = payload.dropFirst(opening.count)
                return opening + #""etag":"# + text + (rest.hasPrefix("}") ? String(rest) : "," + rest)
            }
            if !payload.contains("__metadata") {
                let body = payload.dropFirst()
                return #"{"__metadata":{"etag":"# + text + "}" + (body.hasPrefix("}") ? String(body) : "," + body)
            }
        }
        guard case .object(var members)? = try? JSONValue.parse(Array(payload.utf8)) else { return payload }
        if legacy {
            if let index = members.firstIndex(where: { $0.name == "__metadata" }) {
                guard case .object(var metadata) = members[index].value else { return payload }
                if metadata.contains(where: { $0.name == "etag" }) { return payload }
                metadata.insert(JSONValue.Member("etag", etag), at: 0)
                members[index].value = .object(metadata)
            } else {
                members.insert(JSONValue.Member("__metadata", .object([JSONValue.Member("etag", etag)])), at: 0)
            }
        } else {
            if members.contains(where: { $0.name == "@odata.etag" || $0.name == "odata.etag" }) { return payload }
            members.insert(JSONValue.Member("@odata.etag", etag), at: 0)
        }
        return JSONValue.object(members).serialized
    }

    static func pageSize(_ prefer: String?, default value: Int) -> Int {
        for part in (prefer ?? "").split(separator: ",") {
            let item = part.trimmingCharacters(in: .whitespaces).lowercased()
            if item.hasPrefix("odata.maxpagesize=") || item.hasPrefix("maxpagesize=") {
                if let size = Int(item.split(separator: "=").last ?? ""), size > 0 { return min(size, value) }
            }
        }
        return value
    }

    // MARK: Refresh

    /// The most pages one refresh follows: a backend whose next links never end is stopped.
    static let maximumPages = 100_000
    /// How often a running refresh logs how many rows it has read.
    static let progressInterval = Duration.seconds(5)

    func refresh(
        _ scope: GatewayStore.Scope, query: TrackedQuery, backend: GatewayBackend, keyNames: [String], legacy: Bool,
        authorization: HTTPHeaders, interval: Double, for request: GatewayRequest? = nil, waits: Bool = true
    ) async throws -> GatewayStore.RefreshSummary {
        try await store.refresh(
            scope, interval: interval, retention: configuration.tombstoneRetention, waits: waits
        ) { write in
            var url: String? = backend.url + query.backendTarget
            var seen: Set<String> = []
            var pages = 0
            var read = 0
            let started = ContinuousClock.now
            var reported = started
            var reportedToDevice = started
            if let request { await report(request, "waitingForDownload", number: 0) }
            while let current = url {
                pages += 1
                guard pages <= Self.maximumPages, seen.insert(current).inserted else {
                    throw GatewayError(
                        status: 502, code: "BackendPaging",
                        "The backend's next links for \(query.path) repeat or do not end (page \(pages))")
                }
                var headers = HTTPHeaders()
                headers["Accept"] = "application/json"
                for field in authorization { headers[field.name] = field.value }
                metrics.backendRequests("refresh").increment()
                let response = try await transport.send(
                    TransportRequest(method: "GET", url: current, headers: headers),
                    timeout: configuration.backendTimeout)
                guard response.status == 200 else { throw BackendAnswer(response: response) }
                let (rows, next) = try Self.rows(of: response.body, keyNames: keyNames, legacy: legacy, set: query.path)
                try await write(rows)
                read += rows.count
                url = next.map { Self.resolve($0, against: current) }
                // The device waiting for it sees the rows read so far (pulled by its client).
                if let request, ContinuousClock.now - reportedToDevice >= .milliseconds(500) {
                    reportedToDevice = ContinuousClock.now
                    await report(request, "waitingForDownload", number: read)
                }
                // A long refresh (a first one of a large query) says how far it is.
                let now = ContinuousClock.now
                if url != nil, now - reported >= Self.progressInterval {
                    reported = now
                    logger.info(
                        "Refreshing",
                        metadata: [
                            "query": .string(query.canonical), "rows": "\(read)", "pages": "\(pages)",
                            "seconds": "\((now - started).components.seconds)",
                        ])
                }
            }
        }
    }

    /// The rows of a backend page, with their keys, and its next link.
    static func rows(
        of body: [UInt8], keyNames: [String], legacy: Bool, set: String
    ) throws
        -> ([(key: String, keyMembers: String, payload: String)], String?)
    {
        let json: JSONValue
        do {
            json = try JSONValue.parse(body)
        } catch {
            throw GatewayError(
                status: 502, code: "BackendPayload", "The backend's page of \(set) is not JSON: \(error)")
        }
        let found: [JSONValue]?
        let next: String?
        if legacy {
            let d = json["d"]
            found = d?["results"]?.arrayValue ?? d?.arrayValue
            // `"__next": "…"`, or pyslet's `"__next": {"uri": "…"}`.
            next = d?["__next"]?.stringValue ?? d?["__next"]?["uri"]?.stringValue
        } else {
            found = json["value"]?.arrayValue
            next = json["@odata.nextLink"]?.stringValue ?? json["odata.nextLink"]?.stringValue
        }
        // Without an array of entities the refresh stops: taking it as empty would tombstone
        // every row of the scope.
        guard let items = found else {
            throw GatewayError(
                status: 502, code: "BackendPayload",
                "The backend's page of \(set) holds no array of entities (\(legacy ? "d.results" : "value"))")
        }
        var rows: [(key: String, keyMembers: String, payload: String)] = []
        rows.reserveCapacity(items.count)
        for item in items {
            var parts: [String] = []
            var members: [String] = []
            for name in keyNames {
                guard let value = item[name] else {
                    throw GatewayError(
                        status: 502, code: "BackendPayload",
                        "A row of \(set) from the backend has no key property \(name)")
                }
                parts.append(value.serialized)
                members.append(JSONValue.string(name).serialized + ":" + value.serialized)
            }
            rows.append((parts.joined(separator: ","), members.joined(separator: ","), item.serialized))
        }
        return (rows, next)
    }

    static func resolve(_ link: String, against base: String) -> String {
        if link.hasPrefix("http://") || link.hasPrefix("https://") { return link }
        return URL(string: link, relativeTo: URL(string: base))?.absoluteString ?? link
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

/// Which credentials the backend accepted lately, so that answers from PostgreSQL go only to
/// devices the backend would answer. Kept in memory, by digest, for `lifetime` seconds; a
/// refusal is never kept (the next request asks again).
///
/// With `askDelta` the check also asks for change tracking (`Prefer: odata.track-changes`) and
/// tells whether the backend gives delta links for the query: `Preference-Applied:
/// odata.track-changes`, or a delta link in the answer (for AUTO, SPEC §13).
actor CredentialCheck {
    private var accepted: [String: (until: Date, offersDelta: Bool)] = [:]
    let lifetime: TimeInterval = 60
    /// Credentials (by digest, per backend) the backend accepted on a read, and until when
    /// they are trusted to get the `$metadata` document the gateway keeps.
    private var identities: [String: Date] = [:]
    static let metadataLifetime: TimeInterval = 900

    static func identityKey(_ credentials: HTTPHeaders, backend: String) -> String {
        let text = credentials.map { "\($0.name.lowercased()): \($0.value)" }.sorted().joined(separator: "\n")
        return GatewayRequest.digest(backend + "\n" + text)
    }

    /// Notes that the backend accepted `credentials` on a read of `backend` just now.
    func noteAccepted(_ credentials: HTTPHeaders, backend: String) {
        let now = Date()
        if identities.count > 10_000 { identities = identities.filter { $0.value > now } }
        identities[Self.identityKey(credentials, backend: backend)] = now.addingTimeInterval(Self.metadataLifetime)
    }

    /// Whether the backend accepted `credentials` on a read within ``metadataLifetime``.
    func acceptedLately(_ credentials: HTTPHeaders, backend: String) -> Bool {
        guard let until = identities[Self.identityKey(credentials, backend: backend)] else { return false }
        return until > Date()
    }

    func check(
        _ credentials: HTTPHeaders, url: String, askDelta: Bool, gateway: Gateway, backend: String? = nil
    ) async throws -> Bool {
        let text = credentials.map { "\($0.name.lowercased()): \($0.value)" }.joined(separator: "\n")
        let key = GatewayRequest.digest((askDelta ? "delta\n" : "\n") + url + "\n" + text)
        let now = Date()
        if let entry = accepted[key], entry.until > now { return entry.offersDelta }
        var headers = HTTPHeaders()
        headers["Accept"] = "application/json"
        if askDelta { headers["Prefer"] = "odata.track-changes" }
        for field in credentials { headers[field.name] = field.value }
        gateway.metrics.backendRequests("credentials").increment()
        let response = try await gateway.transport.send(
            TransportRequest(method: "GET", url: url, headers: headers), timeout: gateway.configuration.backendTimeout)
        switch response.status {
        case 200..<300:
            let offersDelta = askDelta && Self.offersDelta(response)
            if accepted.count > 10_000 { accepted = accepted.filter { $0.value.until > now } }
            accepted[key] = (now.addingTimeInterval(lifetime), offersDelta)
            if let backend { noteAccepted(credentials, backend: backend) }
            return offersDelta
        case 401, 403:
            throw BackendAnswer(response: response)
        case 400..<500:
            // The backend refuses the query itself (a bad option, an unknown set): the device's
            // request is wrong, and it gets the backend's words for it, not a 5xx.
            throw BackendAnswer(response: response)
        default:
            throw GatewayError(
                status: 502, code: "BackendUnavailable",
                "The backend answered \(response.status) when the device's credentials were checked")
        }
    }

    /// Whether a backend's answer to a read with `Prefer: odata.track-changes` tracks changes.
    static func offersDelta(_ response: TransportResponse) -> Bool {
        if (response.headers["Preference-Applied"] ?? "").lowercased().contains("track-changes") { return true }
        guard response.headers["Content-Encoding"] == nil, let json = try? JSONValue.parse(response.body) else {
            return false
        }
        return json["@odata.deltaLink"]?.stringValue != nil || json["odata.deltaLink"]?.stringValue != nil
            || json["d"]?["__delta"]?.stringValue != nil
    }
}

/// Each backend's model, read from its `$metadata`. A backend's `$metadata` can change under
/// the gateway (SPEC §14): every `$metadata` a device reads through this instance is compared
/// with the one kept (by its bytes first), and a model older than `maximumAge` is read again.
actor ModelCache {
    private struct Entry {
        var model: Model
        /// The SHA-256 of the `$metadata` the model was read from.
        var digest: String
        var read: ContinuousClock.Instant
        /// The document as the backend sent it, its content type, and the backend's ETag.
        var body: [UInt8]
        var contentType: String?
        var backendETag: String?
    }

    /// The `$metadata` document kept for `backend`, with the gateway's ETag of it
    /// (`W/"md.<digest>"`), while it is younger than ``maximumAge``.
    func document(for backend: String) -> (body: [UInt8], contentType: String?, etag: String)? {
        guard let entry = models[backend], ContinuousClock.now - entry.read < Self.maximumAge else { return nil }
        return (entry.body, entry.contentType, "W/\"md." + entry.digest.prefix(32) + "\"")
    }

    private var models: [String: Entry] = [:]
    /// How long a model is used before the backend's `$metadata` is read again.
    static let maximumAge: Duration = .seconds(300)

    func model(for backend: GatewayBackend, credentials: HTTPHeaders, gateway: Gateway) async throws -> Model {
        let kept = models[backend.url]
        if let kept, ContinuousClock.now - kept.read < Self.maximumAge { return kept.model }
        do {
            var headers = HTTPHeaders()
            headers["Accept"] = "application/xml"
            let sent = credentials.contains { _ in true } ? credentials : Gateway.shared(backend)
            for field in sent { headers[field.name] = field.value }
            // Conditional where the backend gave an ETag: an unchanged document is a 304.
            if let kept, let etag = kept.backendETag { headers["If-None-Match"] = etag }
            gateway.metrics.backendRequests("metadata").increment()
            let response = try await gateway.transport.send(
                TransportRequest(method: "GET", url: backend.url + "$metadata", headers: headers),
                timeout: gateway.configuration.backendTimeout)
            if response.status == 304, let kept {
                models[backend.url]?.read = .now
                return kept.model
            }
            guard response.status == 200 else { throw BackendAnswer(response: response) }
            return try learn(
                response.body, for: backend.url, contentType: response.headers["Content-Type"],
                etag: response.headers["ETag"])
        } catch {
            // A model read before goes on serving while the backend's $metadata cannot be read
            // again (it is tried again at the next request).
            guard let kept else { throw error }
            gateway.logger.warning(
                "Reading the backend's $metadata again failed; the model read before is used",
                metadata: ["backend": .string(backend.url), "error": .string("\(error)")])
            return kept.model
        }
    }

    /// Takes the `$metadata` a device just read from the backend through the gateway: a model
    /// that differs from the one kept replaces it. Returns the model now kept.
    @discardableResult
    func learn(
        _ body: [UInt8], for backend: String, contentType: String? = nil, etag: String? = nil
    ) throws -> Model {
        let digest = GatewayStore.hex(SHA256.hash(data: body))
        if let entry = models[backend], entry.digest == digest {
            models[backend]?.read = .now
            if let etag { models[backend]?.backendETag = etag }
            return entry.model
        }
        let model: Model
        do {
            model = try MetadataParser().parse(Data(body))
        } catch {
            throw GatewayError(status: 502, code: "BackendMetadata", "The backend's $metadata does not parse: \(error)")
        }
        models[backend] = Entry(
            model: model, digest: digest, read: .now, body: body, contentType: contentType, backendETag: etag)
        return model
    }
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
