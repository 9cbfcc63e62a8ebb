import Crypto
import Foundation
import ODataCore
import OfflineOData
import PostgresNIO
import Logging

extension Gateway {
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
                    interval: interval, shared: shared),
                keep: configuration.refresherKeeps)
        }
        func refreshIfDue() async throws {
            guard scope.due else { return }
            let authorization = shared ? Self.shared(backend) : credentials(of: request, backend: backend)
            let started = ContinuousClock.now
            let summary: GatewayStore.RefreshSummary
            do {
                summary = try await refresh(
                    scope, query: tracked, backend: backend, keyNames: keyNames, legacy: legacy,
                    authorization: authorization, interval: interval, for: request)
            } catch let answer as BackendAnswer where shared && [401, 403].contains(answer.response.status) {
                // The device's own credentials were accepted above: a 401 would tell it to log in
                // again, when it is the gateway's shared ones the backend refused.
                throw mappedRefreshError(answer, shared: shared, backend: backend, query: canonical)
            }
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
            // A scope never published: its first read is streamed to the device as the backend
            // gives it (unless another instance reads it without streaming, or a stream began
            // too early for this device).
            if scope.published == 0,
                let answer = try await firstRead(
                    tracked, scope: scope, request: request, backend: backend, keyNames: keyNames, legacy: legacy,
                    interval: interval, shared: shared, pageSize: pageSize, set: set)
            {
                return answer
            }
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
        case .stream(let id, let generation, let afterSeq, let afterKey):
            guard id == scope.id else { throw try await foreignToken(id, canonical: canonical, set: set) }
            return try await streamPage(
                tracked, scope: id, generation: generation, afterSeq: afterSeq, afterKey: afterKey,
                pageSize: pageSize, set: set, legacy: legacy, root: request.gatewayRoot, backend: backend,
                shared: shared)
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
                status: 410, code: "DeltaTokenExpired",
                "The token was given for an older name of this query; read \(set) again")
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
        return await lastPage(
            page, tracked, scope: scope, published: published, set: set, legacy: legacy, root: root, backend: backend)
    }

    /// The last page of a full read (paged or streamed) made at `published`: its rows, the
    /// delta link from there and the scope checksum.
    func lastPage(
        _ rows: [GatewayStore.Row], _ tracked: TrackedQuery, scope: Int64, published: Int64, set: String,
        legacy: Bool, root: String, backend: GatewayBackend
    ) async -> GatewayResponse {
        let delta = tracked.link(
            root: root, token: .delta(scope: scope, since: published, upTo: nil, afterSeq: 0, afterKey: ""),
            legacy: legacy)
        return await withChecksum(
            page(
                rows, scope: scope, set: set, legacy: legacy, delta: false, nextLink: nil, deltaLink: delta,
                root: root, backend: backend), scope: scope, upTo: published)
    }

    /// The name of the header that carries a scope checksum on the last page of a read.
    public static let checksumHeader = "OOData-Scope-Checksum"

    /// `answer` with the scope checksum (`rows=N;sum=S`, see
    /// ``GatewayStore/checksum(scope:upTo:gatewayETags:)``) when there is one. A failure to
    /// compute it leaves it out: it is a check, not part of the answer.
    func withChecksum(_ answer: GatewayResponse, scope: Int64, upTo published: Int64) async -> GatewayResponse {
        guard
            let checksum = try? await store.checksum(
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
        var text: [UInt8] = []
        text.reserveCapacity(rows.reduce(256) { $0 + ($1.payload?.utf8.count ?? 64) + 64 })
        text += Array(
            (legacy
                ? #"{"d":{"results":["#
                : #"{"@odata.context":"#
                    + JSONValue.string(root + "$metadata#" + set + (delta ? "/$delta" : ""))
                    .serialized + #","value":["#).utf8)
        let from = Array(backend.url.utf8)
        let to = Array(root.utf8)
        let etags = configuration.gatewayETags
        var named: [UInt8] = []
        for (index, row) in rows.enumerated() {
            if index > 0 { text.append(UInt8(ascii: ",")) }
            if let payload = row.payload {
                named.removeAll(keepingCapacity: true)
                PageText.append(payload, replacing: from, with: to, to: &named)
                if etags {
                    PageText.appendWithETag(named, scope: scope, hash: row.hash, legacy: legacy, to: &text)
                } else {
                    text += named
                }
            } else if legacy {
                text += Array((#"{"__deleted":true"# + (row.keyMembers.isEmpty ? "" : "," + row.keyMembers) + "}").utf8)
            } else {
                text += Array(
                    (#"{"@removed":{"reason":"deleted"}"# + (row.keyMembers.isEmpty ? "" : "," + row.keyMembers) + "}")
                        .utf8)
            }
        }
        var tail = "]"
        if let nextLink {
            tail += (legacy ? #","__next":"# : #","@odata.nextLink":"#) + JSONValue.string(nextLink).serialized
        }
        if let deltaLink {
            tail += (legacy ? #","__delta":"# : #","@odata.deltaLink":"#) + JSONValue.string(deltaLink).serialized
        }
        tail += legacy ? "}}" : "}"
        text += Array(tail.utf8)
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers[legacy ? "DataServiceVersion" : "OData-Version"] = legacy ? "2.0" : "4.0"
        headers["Preference-Applied"] = "odata.track-changes"
        return GatewayResponse(status: 200, headers: headers, body: text)
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
            try await readBackend(
                query, backend: backend, keyNames: keyNames, legacy: legacy, authorization: authorization,
                request: request
            ) { rows, _ in try await write(rows) }
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

    /// A backend page's next link, resolved against the page's URL, when it stays under the
    /// backend's root: the reads that follow next links (refreshes, write-through) carry a
    /// device's or the gateway's credentials, which go nowhere else.
    static func nextPage(_ link: String, against base: String, backend: GatewayBackend) throws(GatewayError) -> String {
        let url = resolve(link, against: base)
        guard url.lowercased().hasPrefix(backend.url.lowercased()) else {
            throw GatewayError(
                status: 502, code: "BackendPaging",
                "The backend's next link \(url.prefix(200)) leaves its service root \(backend.url): not followed")
        }
        return url
    }
}
