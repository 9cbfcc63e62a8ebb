import Crypto
import Foundation
import ODataCore
import OfflineOData
import PostgresNIO

/// What a device asks for when its first open would page through its defining queries.
struct StoreFileAsk: Decodable {
    struct Query: Decodable {
        var name: String
        var query: String
        var streams: Bool?
    }
    var definingQueries: [Query]
    var indexes: [String: [[String]]]?
    var format: String
}

extension Gateway {
    /// The advisory-lock space of store builds: one build per file at a time.
    static let buildLockSpace: Int32 = 7265

    /// Answers `POST $oodata/store` (issue 37): a store file for the device's defining queries
    /// (200 with its id, size and SHA-256), built now or reused, or 204 when none is offered
    /// (`prepopulate_offline_db=N`, no shared query under SHARED-ONLY, another client format).
    func storeFileOffer(_ request: GatewayRequest, backend: GatewayBackend) async throws -> GatewayResponse {
        guard backend.prepopulate != .no else { return GatewayResponse(status: 204) }
        guard request.body.count <= 1 << 20 else {
            throw GatewayError(status: 413, code: "TooLarge", "A store request is at most 1 MiB")
        }
        let ask: StoreFileAsk
        do {
            ask = try JSONDecoder().decode(StoreFileAsk.self, from: Data(request.body))
        } catch {
            throw GatewayError(
                status: 400, code: "BadStoreRequest",
                "The store request must be JSON with definingQueries ([{name, query}]) and format: \(error)")
        }
        guard !ask.definingQueries.isEmpty, ask.definingQueries.count <= 1000,
            Set(ask.definingQueries.map(\.name)).count == ask.definingQueries.count
        else {
            throw GatewayError(
                status: 400, code: "BadStoreRequest", "The store request needs 1 to 1000 defining queries, named once")
        }
        guard ask.format == ServerBuiltStore.format else { return GatewayResponse(status: 204) }
        // The request's own query options (a device's `urlSuffix`, such as `sap-client`) go
        // with every read of the build, as they go with the device's own reads.
        let suffix = Self.querySuffix(request.target)
        // The device must be allowed to read every query, with its own credentials (the check
        // a tracked read makes; its refusal is the backend's answer).
        var shared: [OfflineODataDefiningQuery] = []
        var own: [OfflineODataDefiningQuery] = []
        for query in ask.definingQueries {
            // The same check as every path that leaves the gateway.
            try LeavingPath.check(query.query)
            let tracked = try TrackedQuery(target: Self.appending(suffix, to: query.query))
            guard tracked.token == nil else {
                throw GatewayError(status: 400, code: "BadStoreRequest", "\(query.name) carries a token")
            }
            _ = try await credentialCheck.check(
                credentials(of: request, backend: backend), url: backend.url + tracked.probeTarget, askDelta: false,
                gateway: self)
            let defining = OfflineODataDefiningQuery(
                name: query.name, query: query.query, automaticallyRetrievesStreams: query.streams ?? false)
            if backend.isShared(tracked.canonical) { shared.append(defining) } else { own.append(defining) }
        }
        // Nil from a build: this instance builds as many files as it may now; the device pages.
        var file: StoreFileRecord?
        if !shared.isEmpty {
            file = try await sharedFile(shared, indexes: ask.indexes, request: request, backend: backend)
            if file == nil { return GatewayResponse(status: 204) }
        }
        if backend.prepopulate == .yes, !own.isEmpty {
            file = try await userFile(
                shared + own, added: own, base: file, indexes: ask.indexes, request: request, backend: backend)
        }
        guard let file else { return GatewayResponse(status: 204) }
        let names = file.queries.map { String($0.prefix { $0 != "\t" }) }
        let body = JSONValue.object([
            .init("id", .string(file.id)), .init("size", .number(String(file.size))),
            .init("sha256", .string(file.sha256)), .init("definingQueries", .array(names.map { .string($0) })),
        ])
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        return GatewayResponse(status: 200, headers: headers, body: Array(body.serialized.utf8))
    }

    /// The query options of `target` (after `?`), as sent; "" without any.
    static func querySuffix(_ target: String) -> String {
        guard let question = target.firstIndex(of: "?") else { return "" }
        return String(target[target.index(after: question)...])
    }

    /// `query` with the options `suffix` appended.
    static func appending(_ suffix: String, to query: String) -> String {
        suffix.isEmpty ? query : query + (query.contains("?") ? "&" : "?") + suffix
    }

    /// The file of the shared queries: the one built within `prepopulate_offline_db_interval`,
    /// or a new one (one build at a time per file; requests arriving meanwhile wait for it).
    func sharedFile(
        _ queries: [OfflineODataDefiningQuery], indexes: [String: [[String]]]?, request: GatewayRequest,
        backend: GatewayBackend
    ) async throws -> StoreFileRecord? {
        let key = Self.fileKey("shared", queries: queries, indexes: indexes, request: request, backend: backend)
        return try await buildOnce(key: key, maxAge: backend.prepopulateInterval) {
            try await self.buildStore(
                queries, added: [], base: nil, indexes: indexes, authorization: Self.shared(backend),
                request: request, backend: backend, cacheKey: key, shared: true)
        }
    }

    /// A file of every query of one user: the shared file with the user's queries downloaded
    /// into it (or, without shared queries, built whole), kept ten minutes for a retry.
    func userFile(
        _ queries: [OfflineODataDefiningQuery], added: [OfflineODataDefiningQuery], base: StoreFileRecord?,
        indexes: [String: [[String]]]?, request: GatewayRequest, backend: GatewayBackend
    ) async throws -> StoreFileRecord? {
        let key = Self.fileKey(
            "user\n" + request.user + "\n" + (base?.id ?? ""), queries: queries, indexes: indexes, request: request,
            backend: backend)
        return try await buildOnce(key: key, maxAge: 600) {
            try await self.buildStore(
                queries, added: base == nil ? [] : added, base: base, indexes: indexes,
                authorization: self.credentials(of: request, backend: backend), request: request,
                backend: backend, cacheKey: key, shared: false)
        }
    }

    /// What names a file: its kind, the backend, the root devices reach it at, the client's
    /// store format, the queries and the indexes.
    static func fileKey(
        _ kind: String, queries: [OfflineODataDefiningQuery], indexes: [String: [[String]]]?, request: GatewayRequest,
        backend: GatewayBackend
    ) -> String {
        var text = [kind, backend.url, request.gatewayRoot, ServerBuiltStore.format, querySuffix(request.target)]
            .joined(separator: "\n")
        for query in queries {
            text += "\nq\t\(query.name)\t\(query.query)\t\(query.automaticallyRetrievesStreams)"
        }
        for set in (indexes ?? [:]).keys.sorted() {
            text += "\ni\t\(set)\t" + (indexes?[set] ?? []).map { $0.joined(separator: ",") }.joined(separator: ";")
        }
        return GatewayRequest.digest(text)
    }

    /// The file kept for `key` within `maxAge`, or the one `build` makes under an advisory lock
    /// on the key, so that one gateway (of any instance) builds it while requests for it wait,
    /// polling every 250 ms without holding a connection. The build runs to its end when the
    /// device goes away, so that its retry finds the file. Nil when this instance runs as many
    /// builds as it may (``BuildSlots``): the device pages instead.
    func buildOnce(
        key: String, maxAge: Double, build: @escaping @Sendable () async throws -> StoreFileRecord
    ) async throws -> StoreFileRecord? {
        let store = self.store
        let logger = self.logger
        let deadline = ContinuousClock.now + .seconds(1800)
        while true {
            if let kept = try await store.storeFile(cacheKey: key, maxAge: maxAge) { return kept }
            guard ContinuousClock.now < deadline else {
                throw GatewayError(
                    status: 503, code: "StoreBeingBuilt", "Another gateway is still building this store; try again")
            }
            // This instance builds it: wait for it. No slot left here: wait when another
            // instance builds it, otherwise page.
            switch await buildSlots.enter(key) {
            case .entered:
                break
            case .beingBuilt:
                try await Task.sleep(for: .milliseconds(250))
                continue
            case .full:
                guard try await store.isLocked(space: Self.buildLockSpace, key: key) else { return nil }
                try await Task.sleep(for: .milliseconds(250))
                continue
            }
            let task = Task { () throws -> StoreFileRecord? in
                try await store.withConnection { connection -> StoreFileRecord? in
                    var locked = false
                    for try await value in try await connection.query(
                        "SELECT pg_try_advisory_lock(\(Self.buildLockSpace), hashtext(\(key)))", logger: logger
                    ).decode(Bool.self) {
                        locked = value
                    }
                    // Another gateway builds it: wait for its file.
                    guard locked else { return nil }
                    do {
                        let file: StoreFileRecord
                        if let kept = try await store.storeFile(cacheKey: key, maxAge: maxAge) {
                            file = kept
                        } else {
                            file = try await build()
                        }
                        try await connection.query(
                            "SELECT pg_advisory_unlock(\(Self.buildLockSpace), hashtext(\(key)))", logger: logger)
                        return file
                    } catch {
                        _ = try? await connection.query(
                            "SELECT pg_advisory_unlock(\(Self.buildLockSpace), hashtext(\(key)))", logger: logger)
                        throw error
                    }
                }
            }
            let result = await task.result
            await buildSlots.leave(key)
            if let file = try result.get() { return file }
            try await Task.sleep(for: .milliseconds(250))
        }
    }

    /// Builds a store as a device's first open makes it, with the client's own code: a provider
    /// whose transport is this gateway, in process (no network), reading the rows PostgreSQL
    /// keeps. With `base`, that file is the start and only `added` are downloaded into it.
    func buildStore(
        _ queries: [OfflineODataDefiningQuery], added: [OfflineODataDefiningQuery], base: StoreFileRecord?,
        indexes: [String: [[String]]]?, authorization: HTTPHeaders, request: GatewayRequest, backend: GatewayBackend,
        cacheKey: String, shared: Bool
    ) async throws -> StoreFileRecord {
        let started = ContinuousClock.now
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-gateway-build-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        var parameters = OfflineODataParameters()
        parameters.storePath = folder
        parameters.storeName = "store"
        parameters.indexes = indexes
        parameters.acceptsServerBuiltStore = false
        let suffix = Self.querySuffix(request.target)
        if !suffix.isEmpty { parameters.urlSuffix = suffix }
        let path = parameters.storeFile
        if let base { try await copyStoreFile(base, to: path) }
        guard let root = URL(string: request.gatewayRoot) else {
            throw GatewayError(status: 400, code: "BadRequest", "The gateway root \(request.gatewayRoot) is not a URL")
        }
        let provider = OfflineODataProvider(
            serviceRoot: root, parameters: parameters,
            transport: GatewayLoopback(
                gateway: self, backend: backend, root: request.gatewayRoot, authorization: authorization))
        do {
            for query in queries { try await provider.add(definingQuery: query) }
            try await provider.open()
            if !added.isEmpty { try await provider.download(definingQueries: added.map(\.name)) }
            await provider.close()
        } catch {
            await provider.close()
            logger.warning("A store build failed", metadata: ["error": "\(error)"])
            throw GatewayError(status: 502, code: "StoreBuild", "The store could not be built: \(error)")
        }
        try ServerBuiltStore.seal(path: path)
        let file = try await store.keepStoreFile(
            at: path, backend: backend.url, cacheKey: cacheKey, shared: shared, owner: shared ? "" : request.user,
            queries: queries.map { "\($0.name)\t\($0.query)" })
        metrics.storeBuilds.increment()
        logger.info(
            "Built a store",
            metadata: [
                "queries": "\(queries.count)", "bytes": "\(file.size)", "shared": "\(shared)",
                "seconds": "\((ContinuousClock.now - started).components.seconds)",
            ])
        return file
    }

    /// Writes the kept file `file` to `path`.
    func copyStoreFile(_ file: StoreFileRecord, to path: String) async throws {
        guard FileManager.default.createFile(atPath: path, contents: nil),
            let handle = FileHandle(forWritingAtPath: path)
        else { throw GatewayError(status: 503, code: "StoreBuild", "Cannot write \(path)") }
        defer { try? handle.close() }
        var offset: Int64 = 0
        let step = Int64(GatewayStore.fileChunk) * 4
        while offset < file.size {
            let end = min(file.size, offset + step)
            try handle.write(contentsOf: try await store.storeFileBytes(id: file.id, range: offset..<end))
            offset = end
        }
    }

    /// Answers `GET $oodata/store/<id>`: the file's bytes, a `Range` of them (206) as a device
    /// downloads it piece by piece and resumes, to its owner (a user's file) or to a device
    /// allowed to read every query in it (a shared file).
    func storeFileContent(
        _ id: String, request: GatewayRequest, backend: GatewayBackend
    ) async throws
        -> GatewayResponse
    {
        guard let file = try await store.storeFile(id: id, backend: backend.url),
            file.shared || file.owner == request.user
        else {
            throw GatewayError(
                status: 404, code: "StoreFileGone", "The gateway keeps no store file \(id) for you; ask for one again")
        }
        // Only to a device the backend lets read every query of the file now (a user's file, to
        // that user only): the check a tracked read makes, kept a minute.
        let suffix = Self.querySuffix(request.target)
        for line in file.queries {
            let query = String(line.drop { $0 != "\t" }.dropFirst())
            let tracked = try TrackedQuery(target: Self.appending(suffix, to: query))
            _ = try await credentialCheck.check(
                credentials(of: request, backend: backend), url: backend.url + tracked.probeTarget, askDelta: false,
                gateway: self)
        }
        var range: Range<Int64> = 0..<file.size
        var partial = false
        if let asked = request.headers["Range"] {
            switch Self.byteRange(asked, size: file.size) {
            case .range(let parsed):
                range = parsed
                partial = true
            case .unsatisfiable:
                var headers = HTTPHeaders()
                headers["Content-Range"] = "bytes */\(file.size)"
                return GatewayResponse(status: 416, headers: headers)
            case .ignored:
                break
            }
        }
        guard range.count <= 8 << 20 else {
            throw GatewayError(
                status: 400, code: "RangeTooLarge",
                "Ask for the store file in ranges of at most 8 MiB (Range: bytes=…)")
        }
        let bytes = try await store.storeFileBytes(id: file.id, range: range)
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/vnd.sqlite3"
        headers["ETag"] = "\"\(file.sha256)\""
        headers["Accept-Ranges"] = "bytes"
        if partial { headers["Content-Range"] = "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(file.size)" }
        return GatewayResponse(status: partial ? 206 : 200, headers: headers, body: bytes)
    }

    /// What a `Range` header asks of a file of `size` bytes.
    enum RangeAsk: Equatable {
        /// One range: `bytes=FIRST-LAST`, `bytes=FIRST-` or the last N bytes, `bytes=-N`.
        case range(Range<Int64>)
        /// One range that starts past the end, or asks for no bytes (416).
        case unsatisfiable
        /// Not a single byte range (HTTP then serves the whole file).
        case ignored
    }

    static func byteRange(_ header: String, size: Int64) -> RangeAsk {
        let text = header.trimmingCharacters(in: .whitespaces)
        guard text.hasPrefix("bytes="), !text.contains(",") else { return .ignored }
        let parts = text.dropFirst("bytes=".count).split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return .ignored }
        /// A number of digits only; one too large for 64 bits is as large as can be.
        func number(_ text: Substring) -> Int64? {
            guard !text.isEmpty, text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
            return Int64(text) ?? Int64.max
        }
        if parts[0].isEmpty {
            guard let count = number(parts[1]) else { return .ignored }
            guard count > 0, size > 0 else { return .unsatisfiable }
            return .range(max(0, size - count)..<size)
        }
        guard let first = number(parts[0]) else { return .ignored }
        var last = size - 1
        if !parts[1].isEmpty {
            guard let given = number(parts[1]), given >= first else { return .ignored }
            last = min(last, given)
        }
        guard first < size else { return .unsatisfiable }
        return .range(first..<(last + 1))
    }
}

/// The gateway as a provider's transport, in process: the requests of a store build go to
/// ``Gateway/handle(_:backend:)`` with the build's credentials, as a device's would.
struct GatewayLoopback: Transport {
    let gateway: Gateway
    let backend: GatewayBackend
    let root: String
    /// The credentials the build reads with (the device's, or the gateway's for shared data).
    let authorization: HTTPHeaders

    func send(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
        guard request.url.hasPrefix(root) else {
            throw TransportError("A store build reads only from the gateway", url: request.url)
        }
        var headers = request.headers
        headers["Authorization"] = nil
        headers["Cookie"] = nil
        for name in GatewayIdentities.certificateHeaders { headers[name] = nil }
        for field in authorization { headers[field.name] = field.value }
        let answer = await gateway.handle(
            GatewayRequest(
                method: request.method, target: String(request.url.dropFirst(root.count)), headers: headers,
                body: request.body, gatewayRoot: root), backend: backend)
        if answer.dropsConnection { throw TransportError("The gateway cut the request", url: request.url) }
        return TransportResponse(status: answer.status, headers: answer.headers, body: answer.body)
    }
}
