import Foundation
import ODataCore
import OfflineOData

/// The streamed first reads this instance runs (see ``GatewayStore/streamFirstRead``): the
/// chunks it committed lately, kept so that devices keeping up with the backend are answered
/// from memory; whether each stream ended, and how. Devices served by another instance, or
/// behind by more than ``kept`` chunks, read the chunks from PostgreSQL.
actor FirstReadStreams {
    /// How many of a stream's latest chunks are kept (about 1,000 rows each).
    static let kept = 8
    /// How long an ended stream is remembered (devices still reading its last chunks).
    static let remembered: Duration = .seconds(60)

    enum Phase {
        case starting
        case running(generation: Int64, began: Date)
        case finished(generation: Int64, published: Int64)
        /// The stream failed (in `generation`, or before it began when nil).
        case failed(generation: Int64?, any Error)
        /// Another held the scope's lock, or the scope was published meanwhile.
        case notNeeded
    }

    struct Stream {
        var phase = Phase.starting
        var chunks: [GatewayStore.StreamChunk] = []
        /// Chunks kept without their rows: larger than any page a device may get.
        var oversized: Set<Int64> = []
        /// How many chunks were committed, and the most any device here has asked past.
        var committed = 0
        var asked = 0
        /// When a device here last asked past a chunk no device had asked past before.
        var advanced = ContinuousClock.now
        var task: Task<Void, Never>?
        var ended: ContinuousClock.Instant?
    }

    private var streams: [Int64: Stream] = [:]

    /// Claims `scope` for a stream of this instance: false when one starts or runs here.
    func claim(_ scope: Int64) -> Bool {
        forgetEnded()
        if let stream = streams[scope], stream.ended == nil { return false }
        streams[scope] = Stream()
        return true
    }

    func run(_ scope: Int64, task: Task<Void, Never>) { streams[scope]?.task = task }

    /// Drops the streams that ended more than ``remembered`` ago, with their chunks.
    private func forgetEnded() {
        let now = ContinuousClock.now
        if streams.values.contains(where: { $0.ended.map { now - $0 >= Self.remembered } ?? false }) {
            streams = streams.filter { $0.value.ended.map { now - $0 < Self.remembered } ?? true }
        }
    }

    func began(_ scope: Int64, generation: Int64, at: Date) {
        streams[scope]?.phase = .running(generation: generation, began: at)
    }

    /// `chunk` is committed; with `published`, it is the last, and the stream is published.
    func committed(_ scope: Int64, _ chunk: GatewayStore.StreamChunk, published: Int64?, largestPage: Int) {
        guard var stream = streams[scope] else { return }
        streams[scope] = nil
        var chunk = chunk
        if chunk.rows.count > largestPage {
            chunk.rows = []
            stream.oversized.insert(chunk.seq)
        }
        stream.chunks.append(chunk)
        stream.committed += 1
        if stream.chunks.count > Self.kept { stream.chunks.removeFirst(stream.chunks.count - Self.kept) }
        if let published, case .running(let generation, _) = stream.phase {
            stream.phase = .finished(generation: generation, published: published)
            stream.ended = .now
        }
        streams[scope] = stream
    }

    func end(_ scope: Int64, _ phase: Phase) {
        guard var stream = streams[scope], stream.ended == nil else { return }
        if case .failed = phase { stream.chunks = [] }
        stream.phase = phase
        stream.ended = .now
        stream.task = nil
        streams[scope] = stream
    }

    /// The phase of this instance's stream of `scope`, nil when it runs none.
    func phase(_ scope: Int64) -> Phase? { streams[scope]?.phase }

    /// What this instance holds for a device of `scope` after chunk `afterSeq` of `generation`.
    enum Next {
        /// The next chunk, and whether it is the stream's last (with the sequence number published).
        case chunk(GatewayStore.StreamChunk, published: Int64?)
        /// Nothing yet: the stream runs.
        case waiting
        case failed(any Error)
        /// Not here: PostgreSQL has it (another instance's stream, or a chunk no longer kept).
        case elsewhere
    }

    func next(_ scope: Int64, generation: Int64, afterSeq: Int64) -> Next {
        forgetEnded()
        guard let stream = streams[scope] else { return .elsewhere }
        switch stream.phase {
        case .starting, .notNeeded: return .elsewhere
        case .failed(let failed, let error):
            // Another generation's failure is not this one's (it may run on another instance).
            return failed == generation ? .failed(error) : .elsewhere
        case .running(let current, _), .finished(let current, _):
            guard current == generation else { return .elsewhere }
            if let index = stream.chunks.firstIndex(where: { $0.previous == afterSeq }) {
                noteAsk(scope, reached: stream.committed - (stream.chunks.count - index))
                if stream.oversized.contains(stream.chunks[index].seq) { return .elsewhere }
                let last = index == stream.chunks.count - 1
                if last, case .finished(_, let published) = stream.phase {
                    return .chunk(stream.chunks[index], published: published)
                }
                return .chunk(stream.chunks[index], published: nil)
            }
            if stream.chunks.last?.seq == afterSeq || (stream.chunks.isEmpty && afterSeq == generation) {
                noteAsk(scope, reached: stream.committed)
                if case .finished = stream.phase { return .elsewhere }
                return .waiting
            }
            return .elsewhere
        }
    }

    private func noteAsk(_ scope: Int64, reached: Int) {
        guard var stream = streams[scope], reached > stream.asked else { return }
        stream.asked = reached
        stream.advanced = .now
        streams[scope] = stream
    }

    /// How long a stream waits for its devices at most before it reads on regardless.
    static let pacing: Duration = .seconds(1)

    /// Waits while this instance's stream of `scope` is more than half its kept chunks ahead of
    /// the furthest device reading it here (while devices here move on: the furthest one
    /// reached a new chunk within ``pacing``): the backend
    /// is read as fast as devices take the rows, which then come from memory, not PostgreSQL
    /// (on a gateway whose cores the backend shares, a stream running ahead slows its devices).
    /// A stream no device here reads runs at the backend's pace.
    func pace(_ scope: Int64) async {
        while let stream = streams[scope], stream.committed - stream.asked > Self.kept / 2,
            ContinuousClock.now - stream.advanced < Self.pacing, !Task.isCancelled
        {
            try? await Task.sleep(for: .milliseconds(2))
        }
    }

    /// Stops every stream this instance runs (the gateway stops).
    func cancelAll() {
        for stream in streams.values { stream.task?.cancel() }
    }
}

extension Gateway {
    /// How long a device's request for the next page of a streamed first read waits for the
    /// backend's next page before it is answered 503.
    static let streamPatience: Duration = .seconds(45)

    /// The first read of `scope` while it is unpublished, streamed: the device joins a stream
    /// of this instance or another that began recently enough for it (within the scope's
    /// refresh interval before it arrived), or starts one. Nil when neither can be (another
    /// instance refreshes the scope without streaming, or one began too early for this
    /// device): it then waits for that refresh as before.
    func firstRead(
        _ tracked: TrackedQuery, scope: GatewayStore.Scope, request: GatewayRequest, backend: GatewayBackend,
        keyNames: [String], legacy: Bool, interval: Double, shared: Bool, pageSize: Int, set: String
    ) async throws -> GatewayResponse? {
        // The device's progress: it waits for the backend's first page.
        await report(request, "waitingForDownload", number: 0)
        let earliest = scope.arrival.addingTimeInterval(-interval)
        func joinable(_ began: Date, stale: Date? = nil) -> Bool {
            interval > 0 && began >= earliest && stale.map { began > $0 } ?? true
        }
        func answer(_ generation: Int64) async throws -> GatewayResponse {
            try await streamPage(
                tracked, scope: scope.id, generation: generation, afterSeq: generation, afterKey: nil,
                pageSize: pageSize, set: set, legacy: legacy, root: request.gatewayRoot, backend: backend,
                shared: shared)
        }
        let state = try await store.streamState(scope: scope.id)
        if let state, let generation = state.generation, state.published == 0, state.locked, let began = state.began {
            return joinable(began, stale: state.staleSince) ? try await answer(generation) : nil
        }
        let deadline = ContinuousClock.now + Self.streamPatience
        guard await streams.claim(scope.id) else {
            // This instance's stream of the scope is starting or runs.
            while true {
                switch await streams.phase(scope.id) {
                case .starting?:
                    guard ContinuousClock.now < deadline else { throw Self.streamSlow(set) }
                    try await Task.sleep(for: .milliseconds(10))
                case .running(let generation, let began)?:
                    return joinable(began, stale: state?.staleSince) ? try await answer(generation) : nil
                default: return nil
                }
            }
        }
        let authorization = shared ? Self.shared(backend) : credentials(of: request, backend: backend)
        let job = Task {
            await self.runStream(
                tracked, scope: scope.id, backend: backend, keyNames: keyNames, legacy: legacy,
                authorization: authorization)
        }
        await streams.run(scope.id, task: job)
        while true {
            switch await streams.phase(scope.id) {
            case .starting?:
                guard ContinuousClock.now < deadline else { throw Self.streamSlow(set) }
                try await Task.sleep(for: .milliseconds(5))
            case .running(let generation, _)?, .finished(let generation, _)?: return try await answer(generation)
            case .failed(_, let error)?:
                throw mappedRefreshError(error, shared: shared, backend: backend, query: tracked.canonical)
            case .notNeeded?, nil: return nil
            }
        }
    }

    /// Runs a streamed first read of `scope` to its end, reading the backend with
    /// `authorization` (kept in memory for the stream only).
    func runStream(
        _ tracked: TrackedQuery, scope: Int64, backend: GatewayBackend, keyNames: [String], legacy: Bool,
        authorization: HTTPHeaders
    ) async {
        let started = ContinuousClock.now
        let largestPage = configuration.pageSize
        do {
            let summary = try await store.streamFirstRead(
                scope: scope,
                began: { generation, at in await streams.began(scope, generation: generation, at: at) },
                committed: { chunk, published in
                    await self.streams.committed(scope, chunk, published: published, largestPage: largestPage)
                }
            ) { write in
                try await readBackend(
                    tracked, backend: backend, keyNames: keyNames, legacy: legacy, authorization: authorization,
                    request: nil
                ) { rows, last in
                    try await write(rows, last)
                    // After the last, the stream publishes and lets go of the scope at once.
                    if !last { await self.streams.pace(scope) }
                }
            }
            guard let summary else {
                await streams.end(scope, .notNeeded)
                return
            }
            metrics.refreshes.increment()
            metrics.rowsChanged.increment(by: summary.changed)
            let took = ContinuousClock.now - started
            metrics.refreshTime.record(duration: took)
            let seconds = Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
            logger.info(
                "Refreshed (a first read, streamed)",
                metadata: [
                    "query": .string(tracked.canonical), "rows": "\(summary.rows)",
                    "seconds": "\((seconds * 1000).rounded() / 1000)",
                ])
            await housekeep()
        } catch {
            var generation: Int64?
            if case .running(let current, _)? = await streams.phase(scope) { generation = current }
            await streams.end(scope, .failed(generation: generation, error))
            logger.notice(
                "A streamed first read stopped before its end",
                metadata: ["query": .string(tracked.canonical), "error": "\(error)"])
            try? await store.noteRefreshError(scope: scope, Self.describeRefreshError(error))
        }
    }

    static func describeRefreshError(_ error: any Error) -> String {
        if let answer = error as? BackendAnswer { return "the backend answered \(answer.response.status)" }
        if let error = error as? GatewayError { return error.message }
        return "\(error)"
    }

    /// A refresh's error as the device gets it: a refusal of the gateway's shared credentials
    /// is the operator's (502), not the device's to log in again.
    func mappedRefreshError(_ error: any Error, shared: Bool, backend: GatewayBackend, query: String) -> any Error {
        guard shared, let answer = error as? BackendAnswer, [401, 403].contains(answer.response.status) else {
            return error
        }
        logSharedRefusal(answer.response.status, backend: backend, query: query)
        return GatewayError(
            status: 502, code: "SharedCredentialsRefused",
            "The backend refused the gateway's shared credentials for \(query) (\(answer.response.status)); "
                + "the operator must fix shared_authorization")
    }

    /// A page of the streamed first read `generation` of `scope` after the position: the next
    /// chunk from memory when this instance holds it, else rows from PostgreSQL; waits while
    /// the stream has nothing new yet. The last page carries the delta link from the published
    /// sequence number (and the scope checksum).
    func streamPage(
        _ tracked: TrackedQuery, scope: Int64, generation: Int64, afterSeq: Int64, afterKey: String?, pageSize: Int,
        set: String, legacy: Bool, root: String, backend: GatewayBackend, shared: Bool
    ) async throws -> GatewayResponse {
        let deadline = ContinuousClock.now + Self.streamPatience
        func link(_ afterSeq: Int64, _ afterKey: String?) -> String {
            tracked.link(
                root: root,
                token: .stream(scope: scope, generation: generation, afterSeq: afterSeq, afterKey: afterKey),
                legacy: legacy)
        }
        func last(_ rows: [GatewayStore.Row], published: Int64) async -> GatewayResponse {
            await lastPage(
                rows, tracked, scope: scope, published: published, set: set, legacy: legacy, root: root,
                backend: backend)
        }
        metrics.fullPages.increment()
        var lookedAgain = false
        while true {
            if afterKey == nil {
                switch await streams.next(scope, generation: generation, afterSeq: afterSeq) {
                case .chunk(let chunk, let published) where chunk.rows.count <= pageSize:
                    if let published { return await last(chunk.rows, published: published) }
                    return page(
                        chunk.rows, scope: scope, set: set, legacy: legacy, delta: false,
                        nextLink: link(chunk.seq, nil), deltaLink: nil, root: root, backend: backend)
                case .waiting:
                    guard ContinuousClock.now < deadline else { throw Self.streamSlow(set) }
                    try await Task.sleep(for: .milliseconds(5))
                    continue
                case .failed(let error):
                    throw mappedRefreshError(error, shared: shared, backend: backend, query: tracked.canonical)
                case .chunk, .elsewhere: break
                }
            }
            guard let state = try await store.streamState(scope: scope) else {
                throw GatewayError(status: 503, code: "GatewayState", "The scope of \(set) went away")
            }
            guard state.generation == generation else {
                throw GatewayError(
                    status: 410, code: "DeltaTokenExpired",
                    "The gateway's first read of \(set) that this link follows broke off; read \(set) again")
            }
            // Read after the state: a finished stream's rows are all in.
            let finished = state.finished(generation)
            let rows = try await store.streamPage(
                scope: scope, afterSeq: afterSeq, afterKey: afterKey, upTo: state.upTo, limit: pageSize + 1)
            if rows.count > pageSize {
                let end = rows[pageSize - 1]
                return page(
                    Array(rows.prefix(pageSize)), scope: scope, set: set, legacy: legacy, delta: false,
                    nextLink: link(end.seq, end.key), deltaLink: nil, root: root, backend: backend)
            }
            if finished { return await last(rows, published: state.upTo) }
            if !rows.isEmpty {
                // Every chunk up to `upTo` is read whole: the next page starts after it.
                return page(
                    rows, scope: scope, set: set, legacy: legacy, delta: false, nextLink: link(state.upTo, nil),
                    deltaLink: nil, root: root, backend: backend)
            }
            guard state.locked, state.published == 0 else {
                // The stream may have published and let go between the statement's look at the
                // scope and its look at the locks: look once more before saying it stopped.
                if !lookedAgain {
                    lookedAgain = true
                    continue
                }
                throw GatewayError(
                    status: 502, code: "BackendRead",
                    "The gateway's first read of \(set) stopped before its end"
                        + (state.error.map { " (\($0))" } ?? "") + "; read \(set) again")
            }
            guard ContinuousClock.now < deadline else { throw Self.streamSlow(set) }
            try await Task.sleep(for: .milliseconds(25))
        }
    }

    static func streamSlow(_ set: String) -> GatewayError {
        GatewayError(
            status: 503, code: "BackendSlow",
            "The backend gave no page of \(set) for \(streamPatience.components.seconds) s during the gateway's "
                + "first read; try again")
    }

    /// Reads every page of `query` from `backend` with `authorization`, handing each page's
    /// rows to `write` (with whether it is the last); the next page is fetched and parsed while
    /// `write` runs. Reports the
    /// rows read to `request`'s device when there is one.
    func readBackend(
        _ query: TrackedQuery, backend: GatewayBackend, keyNames: [String], legacy: Bool, authorization: HTTPHeaders,
        request: GatewayRequest?,
        write: (_ rows: [(key: String, keyMembers: String, payload: String)], _ last: Bool) async throws -> Void
    ) async throws {
        typealias Page = (rows: [(key: String, keyMembers: String, payload: String)], next: String?)
        var seen: Set<String> = []
        var pages = 0
        var read = 0
        let started = ContinuousClock.now
        var reported = started
        var reportedToDevice = started
        let transport = self.transport
        let timeout = configuration.backendTimeout
        let metrics = self.metrics
        @Sendable func fetch(_ url: String) async throws -> Page {
            var headers = HTTPHeaders()
            headers["Accept"] = "application/json"
            for field in authorization { headers[field.name] = field.value }
            metrics.backendRequests("refresh").increment()
            let response = try await transport.send(
                TransportRequest(method: "GET", url: url, headers: headers), timeout: timeout)
            guard response.status == 200 else { throw BackendAnswer(response: response) }
            let (rows, next) = try Self.rows(of: response.body, keyNames: keyNames, legacy: legacy, set: query.path)
            return (rows, try next.map { try Self.nextPage($0, against: url, backend: backend) })
        }
        if let request { await report(request, "waitingForDownload", number: 0) }
        var url: String? = backend.url + query.backendTarget
        var pending: Task<Page, any Error>?
        defer { pending?.cancel() }
        while let current = url {
            pages += 1
            guard pages <= Self.maximumPages, seen.insert(current).inserted else {
                throw GatewayError(
                    status: 502, code: "BackendPaging",
                    "The backend's next links for \(query.path) repeat or do not end (page \(pages))")
            }
            let page: Page
            if let fetching = pending {
                pending = nil
                page = try await fetching.value
            } else {
                page = try await fetch(current)
            }
            url = page.next
            // The backend reads the next page while PostgreSQL writes this one.
            if let next = url, !seen.contains(next), pages < Self.maximumPages {
                pending = Task { try await fetch(next) }
            }
            try await write(page.rows, url == nil)
            read += page.rows.count
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
