import Crypto
import Foundation
import ODataCore
import ODataStore

extension Uploader {
    /// What the conflicts of one batch came to.
    struct ConflictOutcome: Sendable {
        /// The batch's answers, with those of requests sent again (or dropped for the backend's
        /// copy) in place of their 412 or 428.
        var results: [SentResult]
        /// The copies kept with each request that may end in the ErrorArchive.
        var copies: [Int64: (entitySet: String, backend: BackendCopy?, original: Entity?)] = [:]
        /// Requests resolved: their entity takes the backend's copy (read after a resend), and
        /// the other entities they changed are rebuilt too.
        var backendWon: [Int64: (entitySet: String, predicate: String, backend: Entity?, changed: Set<String>)] = [:]
        var resolved: [OfflineODataConflictResolved] = []
        /// A resend whose answer did not come: its request stays queued (it is not in
        /// `results`), and the upload ends with this error once the batch's answers are recorded.
        var interruption: (any Error)?
    }

    /// Reads the backend's copy of the entity of every request of the batch refused with 412 or
    /// 428 and applies the conflict policy to it (SPEC §15). A request is sent again at most
    /// once per upload: a second refusal archives it. Requests inside a change set of several
    /// requests are archived (the change set would have to go again whole).
    func resolveConflicts(
        _ results: [SentResult], batch: UploadPlanner.Batch, on provider: isolated OfflineODataProvider
    ) async throws -> ConflictOutcome {
        var outcome = ConflictOutcome(results: results)
        var unanswered: Set<Int64> = []
        let single = Set(batch.units.filter { $0.count == 1 }.flatMap { $0.map(\.id) })
        let model = self.model
        for index in results.indices {
            let result = results[index]
            let request = result.request
            // An update or delete refused for its ETag, or a create whose key the backend has.
            let isConflict =
                request.isCreate ? result.status == 409 && !request.localKey : [412, 428].contains(result.status)
            guard isConflict, result.dependencyOf == nil, request.mediaType == nil, let set = request.entitySet,
                let localKey = request.entityKey, !request.isLinkRequest
            else { continue }
            let root = serviceRoot
            let read = try await store.read {
                reader -> (Entity?, Entity?, String, [String: String], Set<String>, String?)? in
                let keyMap = try RequestQueue.keyMap(reader.connection)
                let reference = keyMap[set + localKey] ?? set + localKey
                guard let (_, key) = Keys.parse(reference, model: model, serviceRoot: "") else { return nil }
                let predicate = Keys.predicate(key, in: set, model: model)
                let kept = try RequestQueue.keptEntity(reader.connection, in: set, predicate: predicate, model: model)
                let changed = QueueEntry.analyse(request, model: model, serviceRoot: root, keyMap: keyMap).changed
                let local = try reader.entity(in: set, key: key)
                // The ETag the request was sent with, as the planner chose it.
                let sentETag =
                    try local?.control.etag
                    ?? RequestQueue.keptETag(reader.connection, in: set, predicate: predicate, model: model)
                return (local, kept?.entity, predicate, keyMap, changed, sentETag)
            }
            guard let (local, original, predicate, keyMap, changed, sentETag) = read else { continue }
            let backend = try await backendCopy(
                of: set + predicate, entitySet: set, unlessStill: sentETag, on: provider)
            outcome.copies[request.id] = (set, backend, original)
            let policy = parameters.conflictPolicy(for: set)
            // A create is archived with the copies (which entity it should have been is the
            // app's call); so is a request inside a change set of several. So is every conflict
            // after the upload was asked to stop.
            guard single.contains(request.id), !request.isCreate, !provider.cancelUploadRequested,
                !Task.isCancelled
            else { continue }
            if case .archive = policy { continue }
            let localChanges = Self.localChanges(of: request, local: local, original: original, model: model)
            var backendChanges = ConflictCopies.differences(backend?.entity, from: original)
            if let type = model.entityType(ofEntitySet: set) {
                backendChanges.subtract(model.key(of: type).map(\.name))
            }
            // A property the backend already holds with the local value is no conflict (the
            // other user set the same, or an earlier resend of this request got through).
            backendChanges = backendChanges.filter { name in backend?.entity?[name] != local?[name] }
            let conflict = OfflineODataConflict(
                requestID: request.id, method: request.method, url: request.url, entitySet: set,
                httpStatus: result.status, local: local, backend: backend?.entity, backendRead: backend != nil,
                original: original, localChanges: localChanges, backendChanges: backendChanges)
            var decision: OfflineODataConflictResolution
            switch policy {
            case .archive: continue
            case .mergeDisjoint:
                // A PUT replaces every property and a delete removes them: never disjoint.
                let isMerge = ["PATCH", "MERGE"].contains(request.method.uppercased())
                decision =
                    isMerge && backend?.entity != nil && original != nil
                        && localChanges.isDisjoint(with: backendChanges) ? .resend : .archive
            case .clientWins: decision = backend?.entity != nil ? .resend : .archive
            case .backendWins: decision = .takeBackend
            case .custom(let resolve):
                let timeout = parameters.conflictResolverTimeout
                if let answer = await Self.decide(conflict, with: resolve, within: timeout) {
                    decision = answer
                } else if Task.isCancelled {
                    decision = .archive
                } else {
                    provider.logger.warning(
                        "The custom conflict resolver did not answer in time; the request is archived",
                        metadata: ["request": .stringConvertible(request.id), "seconds": .stringConvertible(timeout)])
                    decision = .archive
                }
            }
            // The backend's copy decides the outcome: without it (it could not be read), the
            // request is archived rather than dropped or sent blind.
            guard backend != nil else { continue }
            if case .merged = decision, request.method.uppercased() == "DELETE" { decision = .resend }
            func resolved(_ outcomeKind: OfflineODataConflictResolved.Outcome) -> OfflineODataConflictResolved {
                OfflineODataConflictResolved(
                    requestID: request.id, method: request.method, url: request.url, entitySet: set,
                    outcome: outcomeKind, policy: policy.name, localChanges: localChanges,
                    backendChanges: backendChanges)
            }
            switch decision {
            case .archive:
                continue
            case .resend, .merged:
                // Without the backend's entity there is nothing to send it against.
                guard let backendEntity = backend?.entity else { continue }
                // A request sent with an ETag is never sent again unchecked: without an ETag for
                // the backend's copy (a gateway whose scope no longer holds the entity), it is
                // archived with the copies rather than sent with `*`.
                if backend?.etag == nil, sentETag != nil {
                    provider.logger.notice(
                        "The backend's copy of a conflicting entity came without an ETag; the request is archived",
                        metadata: ["request": .stringConvertible(request.id)])
                    continue
                }
                var method = request.method.uppercased()
                // V2 backends merge with MERGE, as the planner sends it.
                if method == "PATCH", model.version.isLegacy { method = "MERGE" }
                var body = String(decoding: request.body, as: UTF8.self)
                var kind = OfflineODataConflictResolved.Outcome.resent
                if case .merged(let values) = decision {
                    var changedValues = Entity()
                    let keys = Set(model.entityType(ofEntitySet: set).map { model.key(of: $0).map(\.name) } ?? [])
                    for property in values.properties
                    where !keys.contains(property.name) && backendEntity[property.name] != property.value {
                        changedValues.properties.append(property)
                    }
                    method = model.version.isLegacy ? "MERGE" : "PATCH"
                    body = String(decoding: model.version.requestBody(changedValues), as: UTF8.self)
                    kind = .merged
                }
                // Entities re-keyed by the backend are named by their backend keys, as the
                // planner names them.
                for (local, server) in keyMap {
                    body = body.replacingOccurrences(of: "\"\(local)\"", with: "\"\(server)\"")
                }
                var headers = ["Accept": "application/json"]
                if !body.isEmpty { headers["Content-Type"] = "application/json" }
                // The backend's ETag; `*` where it gives none (a 428 from a backend without ETags).
                headers["If-Match"] = backend?.etag ?? "*"
                if parameters.enableRepeatableRequests {
                    // Derived from the request's own ID: sent again after a lost answer (the
                    // request is still queued), the resend is recognized as the same request.
                    // Its first-sent time is that of its own first sending, kept in the queue
                    // before it goes: the same at every sending, as the ID is.
                    let id = request.repeatID.map(Self.resendID) ?? GuidValue.random().description
                    let now = UploadPlanner.httpDate()
                    let firstSent = try await store.write { writer -> String in
                        let kept = try writer.connection.query(
                            "SELECT resend_first_sent FROM oo_queue WHERE id = ?", [.integer(request.id)]
                        ).first?.first
                        if case .text(let time)? = kept { return time }
                        _ = try writer.connection.execute(
                            "UPDATE oo_queue SET resend_first_sent = ? WHERE id = ?",
                            [.text(now), .integer(request.id)])
                        return now
                    }
                    for (name, value) in UploadPlanner.repeatability(id: id, firstSent: firstSent) {
                        headers[name] = value
                    }
                }
                for (name, value) in request.headers { headers[name] = value }
                let answer: TransportResponse
                do {
                    answer = try await provider.send(
                        method: method, url: set + predicate, headers: headers, body: Array(body.utf8))
                } catch is CancellationError {
                    throw CancellationError()
                } catch {
                    // Applied or not, nobody knows: the request stays queued and is sent again by
                    // the next upload (its resend then carries the same repeatability ID).
                    unanswered.insert(request.id)
                    outcome.interruption = outcome.interruption ?? error
                    continue
                }
                CrashPoint.reach("conflict-resent")
                outcome.results[index] = SentResult(
                    request: request, status: answer.status, headers: answer.headers, body: answer.body)
                guard answer.status < 400 else { continue }
                outcome.copies[request.id] = nil
                outcome.resolved.append(resolved(kind))
                // The entity takes what the backend holds now (its values and ETag, which the
                // answer may lack); a delete leaves nothing.
                var now =
                    method == "DELETE"
                    ? BackendCopy(entity: nil, etag: nil)
                    : try await backendCopy(of: set + predicate, entitySet: set, on: provider)
                // A read without an ETag (a gateway gives its own only to a conditional read)
                // keeps the one the resend's answer gave.
                if method != "DELETE", now?.etag == nil, let etag = answer.headers["ETag"] {
                    now?.etag = etag
                    now?.entity?.control.etag = etag
                }
                if let now {
                    outcome.backendWon[request.id] = (set, predicate, now.entity, changed)
                }
            case .takeBackend:
                var headers = ODataCore.HTTPHeaders()
                if let etag = backend?.etag { headers["ETag"] = etag }
                // A copy without an ETag keeps the one the request was sent with, so that the
                // entity's next change is still checked (and refused if the copy is stale).
                var copy = backend?.entity
                if backend?.etag == nil, let sentETag { copy?.control.etag = sentETag }
                outcome.results[index] = SentResult(request: request, status: 204, headers: headers, body: [])
                outcome.backendWon[request.id] = (set, predicate, copy, changed)
                outcome.copies[request.id] = nil
                outcome.resolved.append(resolved(.backendWins))
            }
        }
        outcome.results.removeAll { unanswered.contains($0.request.id) }
        return outcome
    }

    /// What a custom resolver decides for `conflict`, or nil when it has not answered within
    /// `seconds` (it is then cancelled; an infinite or huge value sets no limit) or the upload
    /// was cancelled meanwhile. The resolver runs as a task of its own, so one that ignores
    /// cancellation is left behind, not waited for.
    static func decide(
        _ conflict: OfflineODataConflict,
        with resolve: @escaping @Sendable (OfflineODataConflict) async -> OfflineODataConflictResolution,
        within seconds: TimeInterval
    ) async -> OfflineODataConflictResolution? {
        let once = ResumeOnce()
        let priority = Task.currentPriority
        return await withTaskCancellationHandler {
            await withCheckedContinuation {
                (continuation: CheckedContinuation<OfflineODataConflictResolution?, Never>) in
                // Cancelled before it began: answered at once, and the resolver never runs.
                guard once.set(continuation) else { return }
                let resolver = Task.detached(priority: priority) {
                    let answer = await resolve(conflict)
                    once.resume(answer)
                }
                var timer: Task<Void, Never>?
                // Up to a year: beyond that (or not finite), no timer at all.
                if seconds.isFinite, seconds < 31_536_000 {
                    let nanoseconds = UInt64(max(0, seconds) * 1_000_000_000)
                    timer = Task.detached(priority: priority) {
                        try? await Task.sleep(nanoseconds: nanoseconds)
                        if !Task.isCancelled { once.resume(nil) }
                    }
                }
                once.attach(resolver: resolver, timer: timer)
            }
        } onCancel: {
            once.resume(nil)
        }
    }

    /// The repeatability ID of the resend of the request whose ID is `id`: the same every time.
    static func resendID(_ id: String) -> String {
        let bytes = Array(SHA256.hash(data: Array((id + "/conflict-resend").utf8)).prefix(16))
        let hex = bytes.map { byte in (byte < 16 ? "0" : "") + String(byte, radix: 16) }.joined()
        let parts = [
            hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4), hex.dropFirst(16).prefix(4),
            hex.dropFirst(20),
        ]
        return parts.joined(separator: "-")
    }

    /// The backend's entity at `url` now: nil when it could not be read (its copy is then
    /// unknown), a copy without entity when the backend has none (404).
    ///
    /// `etag`, the ETag the refused request was sent with, goes in `If-None-Match`: a sync
    /// gateway that gives ETags of its own for a backend without them answers such a read with
    /// its ETag of the entity (SPEC §13, §15). A `304` (the entity still has that ETag) is read
    /// again without the condition.
    func backendCopy(
        of url: String, entitySet: String, unlessStill etag: String? = nil, on provider: isolated OfflineODataProvider
    ) async throws -> BackendCopy? {
        let response: TransportResponse
        var headers = ["Accept": "application/json"]
        let conditional = etag != nil && etag != "*"
        if conditional, let etag { headers["If-None-Match"] = etag }
        do {
            response = try await provider.send(method: "GET", url: url, headers: headers)
        } catch {
            // The batch's answers are recorded all the same; this conflict is archived without
            // the backend's copy.
            provider.logger.warning(
                "The backend's copy of a conflicting entity could not be read", metadata: ["error": "\(error)"])
            return nil
        }
        if response.status == 404 { return BackendCopy(entity: nil, etag: nil) }
        if conditional, response.status != 200 {
            // A 304 (the entity still has that ETag), or a backend that does not take the
            // condition on a read: read again without it. A 304's ETag stays with the copy when
            // the plain read gives none (a gateway's, for a backend without ETags).
            guard var copy = try await backendCopy(of: url, entitySet: entitySet, on: provider) else { return nil }
            if response.status == 304, copy.etag == nil, let tag = response.headers["ETag"] {
                copy.etag = tag
                copy.entity?.control.etag = tag
            }
            return copy
        }
        guard response.status == 200 else {
            provider.logger.warning(
                "The backend's copy of a conflicting entity could not be read",
                metadata: ["status": .stringConvertible(response.status)])
            return nil
        }
        guard
            var entity = try? model.readEntity(
                response.body, entityType: model.entitySet(entitySet)?.entityType)
        else { return nil }
        let etag = response.headers["ETag"] ?? entity.control.etag
        entity.control.etag = etag
        return BackendCopy(entity: entity, etag: etag)
    }

    /// The properties a queued request changes: those in which its body differs from the
    /// original (every property of the body when there is none); for a delete, every property.
    static func localChanges(of request: QueuedRequest, local: Entity?, original: Entity?, model: Model) -> Set<String>
    {
        let type = request.entitySet.flatMap { model.entitySet($0)?.entityType }
        guard request.method.uppercased() != "DELETE",
            let body = try? model.readEntity(request.body, entityType: type)
        else { return Set((original ?? local)?.properties.map(\.name) ?? []) }
        // What the request sets to another value than the original had (an app that merges the
        // whole entity sets only what it changed).
        guard let original else { return Set(body.properties.map(\.name)) }
        return ConflictCopies.differences(body, from: original)
    }
}

/// A continuation resumed by whichever comes first: the resolver's answer, the timeout or the
/// upload's cancellation. When one comes, the timer is cancelled, and so is the resolver unless
/// it answered. A resumption before the continuation is set (a cancellation that came first)
/// is delivered when it is set.
final class ResumeOnce: @unchecked Sendable {
    typealias Answer = OfflineODataConflictResolution?
    private let lock = NSLock()
    private var continuation: CheckedContinuation<Answer, Never>?
    private var early: Answer = nil
    private var done = false
    private var resolver: Task<Void, Never>?
    private var timer: Task<Void, Never>?

    /// Sets the continuation; false when it was resumed at once (a resumption came first).
    func set(_ continuation: CheckedContinuation<Answer, Never>) -> Bool {
        let (finished, pending): (Bool, Answer) = lock.withLock {
            if done { return (true, early) }
            self.continuation = continuation
            return (false, nil)
        }
        guard finished else { return true }
        continuation.resume(returning: pending)
        return false
    }

    /// The tasks to cancel when an answer comes; cancelled at once when it came already.
    func attach(resolver: Task<Void, Never>, timer: Task<Void, Never>?) {
        let finished: Bool = lock.withLock {
            guard !done else { return true }
            self.resolver = resolver
            self.timer = timer
            return false
        }
        guard finished else { return }
        timer?.cancel()
        resolver.cancel()
    }

    func resume(_ answer: Answer) {
        let (continuation, resolver, timer):
            (CheckedContinuation<Answer, Never>?, Task<Void, Never>?, Task<Void, Never>?) = lock.withLock {
                guard !done else { return (nil, nil, nil) }
                done = true
                early = answer
                defer {
                    self.continuation = nil
                    self.resolver = nil
                    self.timer = nil
                }
                return (self.continuation, self.resolver, self.timer)
            }
        timer?.cancel()
        if answer == nil { resolver?.cancel() }
        continuation?.resume(returning: answer)
    }
}
