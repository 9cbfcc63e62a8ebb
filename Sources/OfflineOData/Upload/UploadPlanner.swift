import Foundation
import ODataCore

/// The plan of one upload, as a state machine without I/O.
///
/// It takes the queue after the algorithms, as change-set units (``QueueAlgorithms/units``),
/// and the entities of requests already in the ErrorArchive. ``nextBatch()`` cuts the next
/// `$batch`: whole units up to ``batchSize`` requests (which starts at 100 and follows the
/// backend's answer times, see ``answered(requests:in:slowAfter:)``) and ``batchBytesLimit``
/// bytes; a unit that changes an entity
/// an earlier unit of the batch changes, that touches what the batch creates or decides, or
/// (with the transaction builder) a second transaction, starts the next batch; a unit that
/// depends on a failed request is not sent at all but answered 424 on the spot. For a batch,
/// ``messages(for:context:)`` writes each request (Content-ID references to creates of the
/// same batch, the backend's keys for earlier ones, `If-Match` for the first change of an
/// entity whose ETag the store knows and `*` after it, repeatability headers, V2's MERGE),
/// ``multipart(for:messages:)`` the `$batch` body, and ``results(of:for:)`` reads the answer back per request. Then
/// ``received(_:for:)`` turns the answers into ``Action``s for ``UploadRecorder`` and
/// remembers which entities now fail, so that their dependants in later batches are not sent
/// either. ``cancel()`` stops it between batches. ``Uploader`` performs the plan.
struct UploadPlanner: Sendable {
    /// The parameters that shape batches.
    struct Limits: Sendable {
        /// The most requests one batch may hold, however fast the backend answers.
        var maxRequestsPerBatch: Int
        /// With the transaction builder each transaction's change set starts a new batch.
        var transactionBuilder: Bool
    }

    /// One `$batch` to send.
    struct Batch: Sendable {
        /// Change sets, in queue order.
        var units: [[QueueEntry]]
        /// Requests answered without being sent: a request they depend on failed (424).
        var skipped: [SentResult]
        /// The requests to send, in order.
        var requests: [QueuedRequest] { units.joined().map(\.request) }
        /// How many requests the upload has planned up to and including this batch.
        var planned: Int
    }

    /// What to do with one answer.
    enum Action: Sendable, Equatable {
        /// The backend took the request: it leaves the queue and its entity takes over what
        /// the answer brings.
        case apply(TakeOver)
        /// The backend refused it: it goes to the ErrorArchive with the backend's error.
        case archiveFailure(status: Int)
        /// It was not sent because request `dependsOn` failed: ErrorArchive, 424.
        case archiveDependant(dependsOn: Int64)
    }

    /// What an applied request's entity takes from the answer.
    enum TakeOver: Sendable, Equatable {
        /// A create: the backend's key (mapped from the local one), ETag and values, for the
        /// entity and the nested entities of a deep insert.
        case created
        /// A link change: the new ETag of the end that holds the foreign key.
        case linkETag
        /// An update or media change: the new ETag.
        case etag
        /// A delete: nothing.
        case nothing
    }

    /// What the messages of a batch need besides the requests.
    struct MessageContext: Sendable {
        /// `Set(localKey)` → `Set(backendKey)` for entities created by earlier uploads.
        var keyMap: [String: String]
        /// `Set(key)` (as queued) → the ETag the store holds.
        var etags: [String: String]
        /// Request ID → its first-sent time (HTTP date).
        var firstSent: [Int64: String]
        /// Now, as an HTTP date.
        var now: String
        var repeatable: Bool
        /// V2 has no PATCH: partial updates go as MERGE.
        var legacy: Bool
        /// An entity whose ETag is unknown is sent with `If-Match: *` (else without If-Match).
        var lastWriterWins = false
        /// Link changes of the batch (request ID) → `Set(key)` (as queued) of the entity holding
        /// the foreign key, whose ETag they renew.
        var linkHolders: [Int64: String] = [:]
    }

    /// Requests the first batch of an upload may hold (or the maximum, when that is lower).
    static let startingBatchSize = 100
    /// A full batch answered within this many seconds lets the next batch hold twice as many
    /// requests (up to the maximum).
    static let quickAnswerSeconds = 2.0
    /// The most bytes of requests (bodies, URLs and about 512 bytes of headers and delimiters
    /// each) a batch takes, unless its first change set alone is larger: a thousand requests
    /// with large bodies stay under the request size backends accept (16 MiB for the
    /// reference server), and one lost answer costs little to send again.
    static let batchBytesLimit = 4 << 20

    private let units: [[QueueEntry]]
    private let limits: Limits
    /// The most requests the next batch may hold.
    private(set) var batchSize: Int
    private var index = 0
    private var cancelled = false
    /// `Set(key)` → the failed request that entity now waits for.
    private(set) var failedEntities: [String: Int64]
    /// Entities of requests a batch's answer left unanswered (the backend stopped early, or
    /// the answer was cut): they stay queued, and so does every later request that touches
    /// one, until the next upload. Sent now, a later change of such an entity would reach the
    /// backend before the earlier one, which its repeat would then undo.
    private(set) var heldEntities: Set<String> = []
    /// Requests planned (sent or answered as dependants) so far.
    private(set) var planned = 0
    private(set) var succeeded = 0
    private(set) var failed = 0
    /// Requests in the upload.
    let total: Int

    init(units: [[QueueEntry]], failedEntities: [String: Int64], limits: Limits) {
        self.units = units
        self.limits = limits
        self.batchSize = min(Self.startingBatchSize, max(1, limits.maxRequestsPerBatch))
        self.failedEntities = failedEntities
        self.total = units.reduce(0) { $0 + $1.count }
    }

    /// Adapts ``batchSize`` to how long the backend took to answer a batch of `requests`
    /// requests, in seconds. A batch answered in more than `slowAfter` seconds (a quarter of
    /// the request timeout) halves the size, so that a slow backend's batches stay well within
    /// the timeout. A full batch answered within ``quickAnswerSeconds`` doubles it, up to
    /// `maxRequestsPerBatch`: a fast backend gets fewer, larger batches, and the round trips
    /// saved are most of an upload's time on a fast network. Between the two it stays.
    mutating func answered(requests: Int, in seconds: Double, slowAfter: Double) {
        if seconds > slowAfter {
            batchSize = max(1, batchSize / 2)
        } else if requests >= batchSize && seconds <= Self.quickAnswerSeconds {
            batchSize = min(max(1, limits.maxRequestsPerBatch), batchSize * 2)
        }
    }

    /// Whether units are left that no batch has taken (after a cancellation, they stay queued).
    var hasUnplanned: Bool { index < units.count }

    /// Stops the plan: ``nextBatch()`` gives no more batches.
    mutating func cancel() { cancelled = true }

    /// The next batch; nil when every unit is planned or the plan was cancelled.
    mutating func nextBatch() -> Batch? {
        guard !cancelled, index < units.count else { return nil }
        // One batch: up to batchSize requests in whole change sets. An entity
        // already changed in this batch by another change set starts the next batch, so
        // that If-Match stays right; with the transaction builder, each transaction's
        // change set starts a new batch too.
        var batch: [[QueueEntry]] = []
        var skipped: [SentResult] = []
        var touched: Set<String> = []
        // Everything the change sets of this batch decide, creates included: a change set
        // that depends on one of them waits for the next batch, so that it is never sent when
        // the request it depends on fails (it is archived with 424 instead; SPEC §7). This
        // also keeps requests on nested entities of a deep insert (which no Content-ID
        // names) out of the deep insert's batch.
        var changedHere: Set<String> = []
        var count = 0
        var bytes = 0
        var hasTransaction = false
        while index < units.count {
            let unit = units[index]
            // A change set after an unanswered request of an entity it touches waits with it.
            if unit.contains(where: { !$0.touched.isDisjoint(with: heldEntities) }) {
                for entry in unit { heldEntities.formUnion(entry.produced) }
                index += 1
                continue
            }
            // A change set that depends on a failed request is not sent at all.
            let failing = failedEntities
            if let failedID = unit.lazy.compactMap({ entry in entry.touched.lazy.compactMap { failing[$0] }.first })
                .first
            {
                for entry in unit {
                    skipped.append(
                        SentResult(
                            request: entry.request, status: 424, headers: ODataCore.HTTPHeaders(), body: [],
                            dependencyOf: failedID))
                    for reference in entry.produced { failedEntities[reference] = failedID }
                }
                index += 1
                continue
            }
            let isTransaction = unit.first?.request.options.transactionID != nil
            let changed = Set(unit.filter { $0.kind != .create }.flatMap(\.changed))
            let unitBytes = unit.reduce(0) { $0 + $1.request.body.count + $1.request.url.utf8.count + 512 }
            if !batch.isEmpty {
                if count + unit.count > batchSize { break }
                if bytes + unitBytes > Self.batchBytesLimit { break }
                if !touched.isDisjoint(with: changed) { break }
                if limits.transactionBuilder && isTransaction && hasTransaction { break }
                if unit.contains(where: { !$0.touched.isDisjoint(with: changedHere) }) { break }
            }
            batch.append(unit)
            count += unit.count
            bytes += unitBytes
            touched.formUnion(changed)
            for entry in unit { changedHere.formUnion(entry.produced) }
            hasTransaction = hasTransaction || isTransaction
            index += 1
        }
        planned += count + skipped.count
        return Batch(units: batch, skipped: skipped, planned: planned)
    }

    /// Takes the answers of a batch (its skipped requests included, and only the requests
    /// answered when the backend stopped early) and returns what to do with each, in order.
    mutating func received(_ results: [SentResult], for batch: Batch) -> [Action] {
        let entries = Dictionary(batch.units.joined().map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        let answered = Set(results.map(\.request.id))
        for entry in batch.units.joined() where !answered.contains(entry.id) {
            heldEntities.formUnion(entry.produced)
        }
        var actions: [Action] = []
        for result in results {
            guard result.status >= 400 else {
                succeeded += 1
                actions.append(.apply(Self.takeOver(of: result.request)))
                continue
            }
            failed += 1
            let failedID = result.dependencyOf ?? result.request.id
            let own = (result.request.entitySet ?? "") + (result.request.entityKey ?? "")
            for reference in entries[result.request.id]?.produced ?? [own] {
                failedEntities[reference] = failedEntities[reference] ?? failedID
            }
            if let dependsOn = result.dependencyOf {
                actions.append(.archiveDependant(dependsOn: dependsOn))
            } else {
                actions.append(.archiveFailure(status: result.status))
            }
        }
        return actions
    }

    /// What an applied request's entity takes from its answer.
    static func takeOver(of request: QueuedRequest) -> TakeOver {
        if request.isCreate { return .created }
        if request.isLinkRequest { return .linkETag }
        return request.method == "DELETE" ? .nothing : .etag
    }

    // MARK: Messages

    /// The request messages of a batch, in order, with the headers each needs.
    func messages(for batch: Batch, context: MessageContext) -> [BatchMessage] {
        var contentIDs: [String: String] = [:]
        var messages: [BatchMessage] = []
        var createdHere: Set<String> = []
        var matched: Set<String> = []
        for request in batch.requests {
            var url = request.url
            // A media request's body is a stream: it goes as it is. JSON bodies name local
            // entities by reference; those references are rewritten like the URL.
            let isMedia = request.mediaType != nil
            var body = isMedia ? "" : String(decoding: request.body, as: UTF8.self)
            // Local keys: Content-ID references inside this batch, the backend's key for earlier ones.
            for (local, cid) in contentIDs {
                if url == local || url.hasPrefix(local + "/") { url = cid + url.dropFirst(local.count) }
                if !isMedia { body = body.replacingOccurrences(of: "\"\(local)\"", with: "\"\(cid)\"") }
            }
            for (local, server) in context.keyMap {
                if url == local || url.hasPrefix(local + "/") { url = server + url.dropFirst(local.count) }
                if !isMedia { body = body.replacingOccurrences(of: "\"\(local)\"", with: "\"\(server)\"") }
            }
            var headers = ODataCore.HTTPHeaders()
            if let mediaType = request.mediaType {
                headers["Content-Type"] = mediaType
            } else if !body.isEmpty {
                headers["Content-Type"] = "application/json"
            }
            if context.repeatable, let id = request.repeatID {
                let time = context.firstSent[request.id] ?? context.now
                for (name, value) in Self.repeatability(id: id, firstSent: time) { headers[name] = value }
            }
            let reference = (request.entitySet ?? "") + (request.entityKey ?? "")
            // If-Match guards the first change of an entity in this batch with the ETag the
            // store knows. Later ones (the ETag is new by then, and the first one checked it) and
            // entities created in this batch send `*`. An entity whose ETag is unknown (its
            // backend gave none) goes without If-Match, so that a backend that wants one answers
            // 428 rather than another user's change being overwritten unseen; `*` only when
            // the app chose last-writer-wins.
            if !request.isCreate, !request.url.hasSuffix("/$ref") {
                if createdHere.contains(reference) || matched.contains(reference) {
                    headers["If-Match"] = "*"
                } else if let etag = context.etags[reference] {
                    headers["If-Match"] = etag
                    // Later changes of this entity in the batch follow this checked one.
                    matched.insert(reference)
                } else if context.lastWriterWins {
                    headers["If-Match"] = "*"
                }
            }
            // A link change renews the ETag of the entity holding the foreign key (on backends
            // such as SAP Gateway and the reference server), unchecked: its later changes in
            // this batch (the same change set) follow it with `*`, as a 412 against the ETag it
            // had would be certain. Across batches, its new ETag is read first (see Uploader).
            if let holder = context.linkHolders[request.id] { matched.insert(holder) }
            for (name, value) in request.headers { headers[name] = value }
            headers["Content-ID"] = "\(request.id)"
            if request.isCreate, request.localKey {
                contentIDs[reference] = "$\(request.id)"
            }
            if request.isCreate { createdHere.insert(reference) }
            let method = context.legacy && request.method == "PATCH" ? "MERGE" : request.method
            messages.append(.request(method, url, headers: headers, body: isMedia ? request.body : Array(body.utf8)))
        }
        return messages
    }

    /// The `$batch` body: one change set per unit, each part with its request's Content-ID.
    func multipart(for batch: Batch, messages: [BatchMessage]) -> MultipartBatch {
        let requests = batch.requests
        var parts: [BatchPart] = []
        var offset = 0
        for unit in batch.units {
            parts.append(
                .changeSet(
                    ChangeSet(
                        operations: (offset..<(offset + unit.count)).map { index in
                            var partHeaders = ODataCore.HTTPHeaders([
                                ("Content-Type", "application/http"), ("Content-Transfer-Encoding", "binary"),
                            ])
                            partHeaders["Content-ID"] = "\(requests[index].id)"
                            return BatchOperation(partHeaders: partHeaders, message: messages[index])
                        })))
            offset += unit.count
        }
        return MultipartBatch(parts: parts)
    }

    /// Each sent request's answer from the `$batch` response: a change set answers each of
    /// its requests, a single failed part answers the whole change set; change sets the
    /// backend did not answer (it stopped early) have no results and stay queued.
    func results(of answer: MultipartBatch, for batch: Batch) -> [SentResult] {
        let requests = batch.requests
        var results: [SentResult] = []
        var offset = 0
        for (unitIndex, unit) in batch.units.enumerated() {
            let group = offset..<(offset + unit.count)
            offset += unit.count
            guard unitIndex < answer.parts.count else {
                // The backend stopped early (no continue-on-error): the rest stays queued.
                break
            }
            switch answer.parts[unitIndex] {
            case .changeSet(let set):
                for (index, operation) in zip(group, set.operations) {
                    let message = operation.message
                    results.append(
                        SentResult(
                            request: requests[index], status: message.status ?? 500, headers: message.headers,
                            body: message.body))
                }
            case .operation(let operation):
                let message = operation.message
                for index in group {
                    results.append(
                        SentResult(
                            request: requests[index], status: message.status ?? 500, headers: message.headers,
                            body: message.body))
                }
            }
        }
        return results
    }

    /// The headers that make a request repeatable: OData's, and SAP Gateway's names for them.
    static func repeatability(id: String, firstSent: String) -> [(name: String, value: String)] {
        [
            ("Repeatability-Request-ID", id), ("Repeatability-First-Sent", firstSent), ("RequestID", id),
            ("RepeatabilityCreation", firstSent),
        ]
    }

    /// Now as an HTTP date (the form of `Repeatability-First-Sent`).
    static func httpDate(_ date: Date = Date()) -> String {
        // Within the years 1 to 9999, which the form can write.
        let seconds = date.timeIntervalSince1970
        let bounded = seconds.isFinite ? min(max(seconds, -62_135_596_800), 253_402_300_799) : 0
        return HTTPDate.format(secondsSince1970: Int64(bounded.rounded(.down)))
    }
}

/// The outcome of one sent request.
struct SentResult: Sendable {
    var request: QueuedRequest
    var status: Int
    var headers: ODataCore.HTTPHeaders
    var body: [UInt8]
    /// Not sent because a request it depends on failed.
    var dependencyOf: Int64?
}

/// Requests sent one by one (no `$batch`) that stopped at a failure: the answers received
/// before it, and the failure.
struct PartlySent: Error {
    var results: [SentResult]
    var failure: any Error
}
