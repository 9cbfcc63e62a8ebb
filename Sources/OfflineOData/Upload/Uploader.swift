import Foundation
import ODataCore
import ODataStore
import Logging

/// Performs an upload: runs the queue algorithms, then the ``UploadPlanner``'s batches
/// through the provider's transport, and has ``UploadRecorder`` apply each batch's answers to
/// the store in one transaction, batch by batch.
///
/// It owns the I/O of an upload and nothing else: reading what the messages need (key map,
/// ETags, first-sent times) before a batch, sending it as `$batch` (or request by request to a
/// backend without `$batch`), reading the new ETag of an entity whose link changed, reporting
/// progress and failures through the provider, and writing the EventLog line. Its methods run
/// on the provider's actor (`isolated` parameter), which owns the progress counters, the
/// delegate and the cancellation flags.
struct Uploader {
    let store: Store
    let serviceRoot: String
    let parameters: OfflineODataParameters
    let progress: ProgressReporter

    var model: Model { store.model }

    /// The steps of an upload with these parameters, in the order they happen.
    static func plan(_ parameters: OfflineODataParameters) -> [OfflineODataProgressStep] {
        var plan: [OfflineODataProgressStep] = [.uploadPreprocessing]
        plan += algorithmSteps(parameters)
        plan += [
            .processingRequests, .sendingDataToServer, .receivingDataFromServer, .removingRemoveAfterUploadRequests,
        ]
        return plan
    }

    /// The steps of the queue algorithms the parameters turn on.
    static func algorithmSteps(_ parameters: OfflineODataParameters) -> [OfflineODataProgressStep] {
        var steps: [OfflineODataProgressStep] = []
        if parameters.enableRequestQueueOptimization { steps.append(.performingRequestQueueMerge) }
        if parameters.enableUndoLocalCreation { steps.append(.performingCreateDeleteMerge) }
        if parameters.enableTransactionBuilder { steps.append(.performingTransactionMerge) }
        return steps
    }

    /// Sends the queue (only requests of `categories`, when given); see
    /// ``OfflineODataProvider/upload(categories:)``.
    func run(categories: [String]?, on provider: isolated OfflineODataProvider) async throws {
        provider.report(progress, .uploadPreprocessing)
        let units = try await prepareQueue(categories: categories, on: provider)
        let root = serviceRoot
        let model = self.model
        let failedEntities = try await store.read { reader in
            try RequestQueue.failedEntities(reader.connection, model: model, serviceRoot: root)
        }
        var planner = UploadPlanner(
            units: units, failedEntities: failedEntities,
            limits: .init(
                maxRequestsPerBatch: parameters.maxRequestsPerBatch,
                transactionBuilder: parameters.enableTransactionBuilder))
        var batches = 0
        var changeSets = 0
        func summary() -> String {
            provider.operationSummary["requests-applied"] = .stringConvertible(planner.succeeded)
            provider.operationSummary["requests-failed"] = .stringConvertible(planner.failed)
            provider.operationSummary["requests-not-sent"] = .stringConvertible(
                planner.total - planner.succeeded - planner.failed)
            provider.operationSummary["batches"] = .stringConvertible(batches)
            provider.operationSummary["change-sets"] = .stringConvertible(changeSets)
            return
                "\(planner.succeeded) requests applied, \(planner.failed) failed, \(planner.total - planner.succeeded - planner.failed) not sent"
        }
        while true {
            if provider.cancelUploadRequested || Task.isCancelled { planner.cancel() }
            guard let batch = planner.nextBatch() else { break }
            provider.report(progress, .processingRequests, ["number": "\(batch.planned)", "count": "\(planner.total)"])
            var results = batch.skipped
            var interruption: (any Error)?
            if !batch.units.isEmpty {
                batches += 1
                changeSets += batch.units.count
                do {
                    let sent = try await send(batch, planner: planner, on: provider)
                    results += sent.results
                    // The batch's size follows how long the backend took over the `$batch`
                    // exchange (not the client's own work around it), for the requests it
                    // answered (fewer when it stopped at a failure).
                    if let seconds = sent.exchangeSeconds {
                        planner.answered(
                            requests: sent.results.count, in: seconds,
                            slowAfter: (parameters.effectiveTimeout ?? URLSessionTransport.defaultTimeout) / 4)
                    }
                } catch let partial as PartlySent {
                    // Requests sent one by one: what the backend answered before the failure is
                    // recorded (never sent again); the failed request and the rest stay queued.
                    results += partial.results
                    interruption = partial.failure
                }
            }
            // A 412 or 428: the backend's copy is read and the conflict policy applied (SPEC §15).
            let conflicts = try await resolveConflicts(results, batch: batch, on: provider)
            results = conflicts.results
            if let stopped = conflicts.interruption { interruption = interruption ?? stopped }
            let actions = planner.received(results, for: batch)
            let answered = zip(results, actions).map { ($0, $1) }
            let resolvedNow = conflicts.resolved
            let time = OfflineODataProvider.timestamp()
            let failures = try await store.write { writer in
                let failures = try UploadRecorder(writer, model: model, serviceRoot: root).record(answered)
                // One EventLog row for the conflicts of the batch, with their answers.
                if !resolvedNow.isEmpty {
                    let details = resolvedNow.map { resolution in
                        "request \(resolution.requestID) \(resolution.method) \(resolution.url): "
                            + "\(resolution.outcome.rawValue) (\(resolution.policy))"
                    }.joined(separator: "; ")
                    try LocalSchema.logEvent(writer, type: "ConflictResolved", details: details, time: time)
                }
                for failure in failures {
                    guard let copy = conflicts.copies[failure.requestID] else { continue }
                    try ConflictCopies.keep(
                        requestID: failure.requestID, entitySet: copy.entitySet, backend: copy.backend,
                        original: copy.original, writer: writer)
                }
                try ConflictCopies.takeBackend(conflicts.backendWon, writer: writer, model: model, serviceRoot: root)
                return failures
            }
            for resolution in resolvedNow {
                provider.logger.notice(
                    "A conflict was resolved without the ErrorArchive",
                    metadata: [
                        "queue-id": .stringConvertible(resolution.requestID),
                        "outcome": .string(resolution.outcome.rawValue), "policy": .string(resolution.policy),
                    ])
                provider.emit(.conflictResolved(resolution))
            }
            provider.keyMapCache = nil
            try await readBackNestedCreates(in: results, on: provider)
            try await refreshETags(afterLinkChangesIn: results, on: provider)
            // One call per ErrorArchive row, dependants too, in queue order.
            for failure in failures.sorted(by: { $0.requestID < $1.requestID }) {
                provider.logger.warning(
                    "Request went to the ErrorArchive",
                    metadata: [
                        "queue-id": .stringConvertible(failure.requestID), "method": .string(failure.method),
                        "url": .string(OfflineODataLogging.redacted(failure.url)),
                        "status": .stringConvertible(failure.httpStatus), "error-code": .string(failure.code),
                    ])
                provider.logger.trace(
                    "ErrorArchive request detail",
                    metadata: [
                        "queue-id": .stringConvertible(failure.requestID), "full-url": .string(failure.url),
                        "message": .string(failure.message),
                    ])
                provider.emit(.requestFailed(failure))
            }
            if let interruption {
                try await provider.logEvent(in: store, type: "Upload", details: summary())
                throw interruption
            }
        }
        provider.report(progress, .removingRemoveAfterUploadRequests)
        try await provider.logEvent(in: store, type: "Upload", details: summary())
        if Task.isCancelled && planner.hasUnplanned { throw CancellationError() }
        if provider.cancelUploadRequested && planner.hasUnplanned {
            throw OfflineODataError(
                .cancelled,
                "The upload was cancelled after \(planner.succeeded + planner.failed) requests; the rest stay queued")
        }
    }

    /// Loads the requests to upload and runs the queue algorithms the parameters turn on, in
    /// SPEC §6's order; what they change is written back to the queue (and so shows in the
    /// RequestQueue entity set). Returns the requests grouped into change sets.
    func prepareQueue(categories: [String]?, on provider: isolated OfflineODataProvider) async throws -> [[QueueEntry]]
    {
        let root = serviceRoot
        let model = self.model
        var entries = try await store.read { reader in
            try RequestQueue.pendingEntries(reader.connection, model: model, serviceRoot: root, categories: categories)
        }
        // A request goes only with its own user's credentials (SPEC §16): the queue holds no
        // other user's, and one that did would stop the upload before anything is sent.
        if let stray = entries.first(where: { $0.request.owner != provider.sessionUser }) {
            throw OfflineODataError(
                .invalidRequest,
                "Request \(stray.id) (\(stray.request.method) \(stray.request.url)) was made by "
                    + "\(stray.request.owner.map { "user \($0)" } ?? "no user") and is never sent with the "
                    + "credentials of "
                    + "\(provider.sessionUser.map { "user \($0)" } ?? "a provider without currentUser"); "
                    + "nothing was sent")
        }
        func persist(_ rewrite: QueueRewrite, before: [QueueEntry]) async throws {
            guard !rewrite.isEmpty else { return }
            try await store.write { writer in
                try RequestQueue(writer, model: model, serviceRoot: root).persist(rewrite, before: before)
            }
        }
        if parameters.enableRequestQueueOptimization {
            provider.report(progress, .performingRequestQueueMerge)
            let (after, rewrite) = QueueAlgorithms.optimize(entries, model: model)
            try await persist(rewrite, before: entries)
            entries = after
        }
        if parameters.enableUndoLocalCreation {
            provider.report(progress, .performingCreateDeleteMerge)
            let (after, rewrite) = QueueAlgorithms.undoLocalCreations(entries)
            try await persist(rewrite, before: entries)
            entries = after
        }
        if parameters.enableTransactionBuilder { provider.report(progress, .performingTransactionMerge) }
        return QueueAlgorithms.units(entries, builder: parameters.enableTransactionBuilder)
    }

    /// Sends one batch, one change set per unit (or, without `$batch`, each request) and
    /// returns each request's answer, with the seconds the `$batch` exchange took (nil when the
    /// requests went one by one).
    func send(
        _ batch: UploadPlanner.Batch, planner: UploadPlanner, on provider: isolated OfflineODataProvider
    ) async throws -> (results: [SentResult], exchangeSeconds: Double?) {
        let requests = batch.requests
        let now = UploadPlanner.httpDate()
        let root = serviceRoot
        let model = self.model
        let firstSent = try await store.write { writer in
            try RequestQueue(writer, model: model, serviceRoot: root).markFirstSent(requests, now: now)
        }
        let (keyMap, etags) = try await store.read { reader -> ([String: String], [String: String]) in
            let map = try RequestQueue.keyMap(reader.connection)
            var etags: [String: String] = [:]
            for request in requests where !request.isCreate {
                guard let set = request.entitySet, let key = request.entityKey else { continue }
                let reference = map[set + key] ?? set + key
                guard let (mappedSet, parsed) = Keys.parse(reference, model: model, serviceRoot: "") else { continue }
                // The row's ETag; else (an entity deleted locally has no row) the one the state
                // before its local changes kept, which each answer of the backend advances.
                if let etag = try reader.rowAndETag(in: mappedSet, key: parsed)?.etag {
                    etags[set + key] = etag
                } else if let etag = try RequestQueue.keptETag(
                    reader.connection, in: mappedSet, predicate: Keys.predicate(parsed, in: mappedSet, model: model),
                    model: model)
                {
                    etags[set + key] = etag
                }
            }
            return (map, etags)
        }
        let context = UploadPlanner.MessageContext(
            keyMap: keyMap, etags: etags, firstSent: firstSent, now: now,
            repeatable: parameters.enableRepeatableRequests, legacy: model.version.isLegacy,
            lastWriterWins: parameters.lastWriterWins,
            linkHolders: requests.reduce(into: [Int64: String]()) { holders, request in
                if let holder = LocalChange.linkHolder(
                    of: request, schema: store.schema, serviceRoot: root, keyMap: [:])
                {
                    holders[request.id] = holder.reference
                }
            })
        let messages = planner.messages(for: batch, context: context)
        if !parameters.backendSupportsBatch {
            return (try await sendOneByOne(requests, messages: messages, on: provider), nil)
        }
        let multipart = planner.multipart(for: batch, messages: messages)
        var headers = ["Content-Type": multipart.contentType]
        if !model.version.isLegacy { headers["Prefer"] = "odata.continue-on-error" }
        let body = multipart.write()
        let clock = ContinuousClock()
        let start = clock.now
        let response = try await provider.withServerProgress(progress) { operation in
            var sent = headers
            if let operation { sent["OOData-Operation"] = operation }
            return try await provider.send(method: "POST", url: "$batch", headers: sent, body: body)
        }
        let exchange = (clock.now - start).timeInterval
        provider.report(progress, .sendingDataToServer, ["sentBytes": "\(provider.bytesSent)"])
        provider.report(progress, .receivingDataFromServer, ["receivedBytes": "\(provider.bytesReceived)"])
        guard response.status < 400 else {
            var error = OfflineODataProvider.backendError(response, method: "POST", url: provider.absoluteURL("$batch"))
            if [404, 405, 501].contains(response.status) {
                // A backend without $batch: the requests can go one by one.
                error.message +=
                    "; the backend seems to have no $batch: set backendSupportsBatch = false "
                    + "(oodata: --no-batch) to upload request by request. The requests stay queued"
            }
            throw error
        }
        let answer: MultipartBatch
        do {
            let boundary = response.headers["Content-Type"].flatMap {
                ODataCore.HTTPHeaders.parameter("boundary", in: $0)
            }
            answer = try MultipartBatch.read(response.body, boundary: boundary)
        } catch {
            throw OfflineODataError(
                .backend, "The $batch response is not valid multipart: \(error); the requests stay queued")
        }
        let results = planner.results(of: answer, for: batch)
        warnIfRepeatsAreNotRecognized(results, on: provider)
        return (results, exchange)
    }

    /// A request sent again (its first answer was lost) relies on the backend recognizing the
    /// repeat; an answer without `Repeatability-Result` (or SAP Gateway's `RepeatabilityResult`)
    /// suggests it did not, and the change may have been applied twice. Said in the log, once
    /// per resent request.
    func warnIfRepeatsAreNotRecognized(_ results: [SentResult], on provider: isolated OfflineODataProvider) {
        guard parameters.enableRepeatableRequests else { return }
        for result in results
        where result.request.firstSent != nil && result.dependencyOf == nil
            && result.headers["Repeatability-Result"] == nil && result.headers["RepeatabilityResult"] == nil
        {
            provider.logger.warning(
                """
                A resent request was answered without Repeatability-Result: the backend may not recognize repeated \
                requests, so a change whose first answer was lost may have been applied twice
                """,
                metadata: [
                    "queue-id": .stringConvertible(result.request.id), "method": .string(result.request.method),
                    "url": .string(OfflineODataLogging.redacted(result.request.url)),
                    "status": .stringConvertible(result.status),
                ])
        }
    }

    /// A backend without `$batch`: each request on its own, Content-ID references replaced by
    /// the `Location` of the create they name. A failure to send stops it (``PartlySent``).
    private func sendOneByOne(
        _ requests: [QueuedRequest], messages: [BatchMessage],
        on provider: isolated OfflineODataProvider
    ) async throws -> [SentResult] {
        var results: [SentResult] = []
        var locations: [String: String] = [:]
        for (request, message) in zip(requests, messages) {
            var url = ContentIDReferences.resolve(url: message.url ?? "", locations)
            let body = ContentIDReferences.resolve(body: message.body, locations)
            if url.hasPrefix(serviceRoot) { url = String(url.dropFirst(serviceRoot.count)) }
            var headers: [String: String] = [:]
            for field in message.headers where field.name != "Content-ID" { headers[field.name] = field.value }
            let response: TransportResponse
            do {
                response = try await provider.send(
                    method: message.method ?? request.method, url: url, headers: headers, body: body)
            } catch {
                throw PartlySent(results: results, failure: error)
            }
            provider.report(progress, .sendingDataToServer, ["sentBytes": "\(provider.bytesSent)"])
            if let location = response.headers["Location"] { locations["\(request.id)"] = location }
            results.append(
                SentResult(request: request, status: response.status, headers: response.headers, body: response.body))
        }
        provider.report(progress, .receivingDataFromServer, ["receivedBytes": "\(provider.bytesReceived)"])
        warnIfRepeatsAreNotRecognized(results, on: provider)
        return results
    }

    /// A deep insert whose answer did not carry its nested entities (a `204`, or a `201` with
    /// the parent only) leaves the nested entities the backend keyed with their temporary
    /// local keys. They are read back now: the created entity with `$expand` of the
    /// navigations the request created through; each nested entity takes the key, ETag and
    /// values of the read child whose values are the ones it sent (a child that is not
    /// matched exactly once keeps its local key, as before, until a download).
    func readBackNestedCreates(in results: [SentResult], on provider: isolated OfflineODataProvider) async throws {
        let model = self.model
        let root = serviceRoot
        for result in results
        where result.status < 300 && result.request.isCreate
            && !result.request.options.removeAfterUpload && result.request.nested.contains(where: { $0.localKey })
        {
            guard let set = result.request.entitySet, let localPredicate = result.request.entityKey else { continue }
            let request = result.request
            let (pending, parent) = try await store.read { reader -> ([NestedCreate], String) in
                let waiting = try request.nested.filter { created in
                    guard created.localKey,
                        let (nestedSet, key) = Keys.parse(created.entity, model: model, serviceRoot: "")
                    else { return false }
                    return try reader.entity(in: nestedSet, key: key) != nil
                }
                let map = try RequestQueue.keyMap(reader.connection)
                return (waiting, map[set + localPredicate] ?? set + localPredicate)
            }
            guard !pending.isEmpty, Keys.parse(parent, model: model, serviceRoot: "") != nil else { continue }
            let paths = pending.map { (created: NestedCreate) in created.path }
            let expand = model.version.isLegacy ? Self.legacyExpandOption(for: paths) : Self.expandOption(for: paths)
            let response: TransportResponse
            do {
                response = try await provider.send(method: "GET", url: parent + "?$expand=" + expand)
            } catch {
                provider.logger.notice(
                    "The nested entities of a deep insert could not be read back; they keep their local keys until a download",
                    metadata: ["url": .string(OfflineODataLogging.redacted(parent)), "error": .string("\(error)")])
                continue
            }
            guard response.status < 300,
                let readBack = try? model.readEntity(response.body, entityType: model.entitySet(set)?.entityType),
                let sent = try? model.readEntity(request.body, entityType: model.entitySet(set)?.entityType)
            else {
                provider.logger.notice(
                    "The nested entities of a deep insert could not be read back; they keep their local keys until a download",
                    metadata: [
                        "url": .string(OfflineODataLogging.redacted(parent)),
                        "status": .stringConvertible(response.status),
                    ])
                continue
            }
            // Best effort: the batch is recorded already; a failure here only leaves local keys.
            do {
                try await store.write { writer in
                    try UploadRecorder(writer, model: model, serviceRoot: root).takeOverNested(
                        pending, sent: sent, readBack: readBack)
                }
            } catch {
                provider.logger.notice(
                    "The nested entities of a deep insert were read back but not taken over; they keep their local keys",
                    metadata: ["url": .string(OfflineODataLogging.redacted(parent)), "error": .string("\(error)")])
            }
            provider.keyMapCache = nil
        }
    }

    /// V2's `$expand` for nested paths: every navigation path in full, `Items,Items/Notes`.
    static func legacyExpandOption(for paths: [String]) -> String {
        var seen: [String] = []
        for path in paths {
            let names = path.split(separator: "/").filter { Int($0) == nil }.map(String.init)
            for depth in names.indices {
                let prefix = names[...depth].joined(separator: "/")
                if !seen.contains(prefix) { seen.append(prefix) }
            }
        }
        return seen.joined(separator: ",")
    }

    /// `$expand` for nested paths (`Contacts/0`, `Items/1/Notes/0`): `Contacts,Items($expand=Notes)`.
    static func expandOption(for paths: [String]) -> String {
        var children: [String: [String]] = [:]
        var order: [String] = []
        for path in paths {
            let names = path.split(separator: "/").filter { Int($0) == nil }.map(String.init)
            guard let first = names.first else { continue }
            if children[first] == nil { order.append(first) }
            let rest = names.dropFirst().joined(separator: "/")
            children[first, default: []] += rest.isEmpty ? [] : [rest]
        }
        return order.map { name in
            let inner = children[name] ?? []
            return inner.isEmpty ? name : name + "($expand=" + expandOption(for: inner) + ")"
        }.joined(separator: ",")
    }

    /// A link change gave the entity holding the foreign key a new ETag on backends that renew
    /// it (the reference server, SAP Gateway). When the answer did not carry it, it is read
    /// now, right after the change, so that the entity's next change is checked against it: an
    /// old ETag would fail for certain, and `If-Match: *` could overwrite another user's change
    /// unseen. If the read fails, the known ETag stays (a 412 then shows, never a lost update).
    func refreshETags(afterLinkChangesIn results: [SentResult], on provider: isolated OfflineODataProvider) async throws
    {
        let linked = results.filter {
            $0.status < 400 && $0.request.isLinkRequest
        }
        guard !linked.isEmpty else { return }
        let root = serviceRoot
        let schema = store.schema
        let stale = try await store.read { reader -> [String] in
            let keyMap = try RequestQueue.keyMap(reader.connection)
            return linked.compactMap { result in
                guard
                    let holder = LocalChange.linkHolder(
                        of: result.request, schema: schema, serviceRoot: root, keyMap: keyMap)
                else { return nil }
                return holder.isSource && result.headers["ETag"] != nil ? nil : holder.reference
            }
        }
        let model = self.model
        for reference in Set(stale).sorted() {
            guard let (set, key) = Keys.parse(reference, model: model, serviceRoot: ""),
                let response = try? await provider.send(
                    method: "GET", url: reference, headers: ["Accept": "application/json"]),
                response.status == 200
            else { continue }
            let answered = try? model.readEntity(response.body, entityType: model.entitySet(set)?.entityType)
            guard let etag = response.headers["ETag"] ?? answered?.control.etag else { continue }
            try await store.write { writer in
                _ = try writer.setState(in: set, key: key, etag: .some(etag))
                try RequestQueue(writer, model: model, serviceRoot: root).renewKeptETag(
                    etag, in: set,
                    predicate: Keys.predicate(key, in: set, model: model))
            }
        }
    }
}
