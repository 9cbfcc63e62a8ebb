import Foundation
import ODataCore
import ODataStore

/// The outcome of one sent request.
struct SentResult: Sendable {
    var request: QueuedRequest
    var status: Int
    var headers: ODataCore.HTTPHeaders
    var body: [UInt8]
    /// Not sent because a request it depends on failed.
    var dependencyOf: Int64?
}

extension OfflineODataProvider {
    /// Sends the queue in order (only requests of `categories`, when given). Requests the
    /// backend rejects go to the ErrorArchive and the upload goes on; a dropped connection
    /// throws and leaves the unanswered requests queued, to be resent with the same
    /// repeatability IDs. Cancelling the `Task` aborts the batch in flight and ends the upload
    /// with `CancellationError`; what was not answered stays queued and is resent later with
    /// the same repeatability IDs (so the backend applies it once).
    public func upload(categories: [String]? = nil) async throws {
        try await cancellable { try await runUpload(categories: categories) }
    }

    private func runUpload(categories: [String]?) async throws {
        let store = try beginExclusive()
        defer { busy = false }
        cancelUploadRequested = false
        bytesSent = 0
        bytesReceived = 0
        var plan: [OfflineODataProgressStep] = [.uploadPreprocessing]
        if parameters.enableRequestQueueOptimization { plan.append(.performingRequestQueueMerge) }
        if parameters.enableUndoLocalCreation { plan.append(.performingCreateDeleteMerge) }
        if parameters.enableTransactionBuilder { plan.append(.performingTransactionMerge) }
        plan += [.processingRequests, .sendingDataToServer, .receivingDataFromServer, .removingRemoveAfterUploadRequests]
        let progress = reporter(.upload, plan)
        report(progress, .uploadPreprocessing)
        let model = store.model
        let units = try await prepareQueue(store: store, model: model, categories: categories, progress: progress)
        let total = units.reduce(0) { $0 + $1.count }
        let builder = parameters.enableTransactionBuilder
        // Entities of requests still in the ErrorArchive: later requests on them wait until
        // the app resolves the failure (SPEC §7), and are archived as dependants.
        let root = serviceRoot
        var failedEntities = try await store.read { reader -> [String: Int64] in
            let failed = QueueEntry.analyse(try Self.loadQueue(reader.connection, status: "failed"), model: model, serviceRoot: root,
                                            keyMap: try Self.keyMap(reader.connection))
            var map: [String: Int64] = [:]
            for entry in failed { for reference in entry.produced where map[reference] == nil { map[reference] = entry.id } }
            return map
        }
        var sent = 0
        var succeeded = 0
        var failed = 0
        var index = 0
        while index < units.count {
            if cancelUploadRequested || Task.isCancelled { break }
            // One batch: up to maxRequestsPerBatch requests in whole change sets. An entity
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
            var hasTransaction = false
            while index < units.count {
                let unit = units[index]
                // A change set that depends on a failed request is not sent at all.
                if let failedID = unit.lazy.compactMap({ entry in entry.touched.lazy.compactMap { failedEntities[$0] }.first }).first {
                    for entry in unit {
                        skipped.append(SentResult(request: entry.request, status: 424, headers: ODataCore.HTTPHeaders(), body: [], dependencyOf: failedID))
                        for reference in entry.produced { failedEntities[reference] = failedID }
                    }
                    index += 1
                    continue
                }
                let isTransaction = unit.first?.request.options.transactionID != nil
                let changed = Set(unit.filter { $0.kind != .create }.flatMap(\.changed))
                if !batch.isEmpty {
                    if count + unit.count > max(1, parameters.maxRequestsPerBatch) { break }
                    if !touched.isDisjoint(with: changed) { break }
                    if builder && isTransaction && hasTransaction { break }
                    if unit.contains(where: { !$0.touched.isDisjoint(with: changedHere) }) { break }
                }
                batch.append(unit)
                count += unit.count
                touched.formUnion(changed)
                for entry in unit { changedHere.formUnion(entry.produced) }
                hasTransaction = hasTransaction || isTransaction
                index += 1
            }
            report(progress, .processingRequests, ["number": "\(sent + count + skipped.count)", "count": "\(total)"])
            var results = skipped
            var interruption: (any Error)?
            if !batch.isEmpty {
                do {
                    results += try await send(batch.map { $0.map(\.request) }, store: store, model: model, progress: progress)
                } catch let partial as PartlySent {
                    // Requests sent one by one: what the backend answered before the failure is
                    // recorded (never sent again); the failed request and the rest stay queued.
                    results += partial.results
                    interruption = partial.failure
                }
            }
            sent += count + skipped.count
            let failures = try await record(results, store: store, model: model)
            keyMapCache = nil
            try await refreshETags(afterLinkChangesIn: results, store: store)
            let entries = Dictionary(batch.joined().map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
            for result in results where result.status >= 400 {
                let failedID = result.dependencyOf ?? result.request.id
                for reference in entries[result.request.id]?.produced ?? [(result.request.entitySet ?? "") + (result.request.entityKey ?? "")] {
                    failedEntities[reference] = failedEntities[reference] ?? failedID
                }
            }
            failed += results.filter { $0.status >= 400 }.count
            succeeded += results.filter { $0.status < 400 }.count
            // One call per ErrorArchive row, dependants too, in queue order.
            for failure in failures.sorted(by: { $0.requestID < $1.requestID }) { emit(.requestFailed(failure)) }
            if let interruption {
                try await logEvent(in: store, type: "Upload", details: "\(succeeded) requests applied, \(failed) failed, \(total - succeeded - failed) not sent")
                throw interruption
            }
        }
        report(progress, .removingRemoveAfterUploadRequests)
        try await logEvent(in: store, type: "Upload", details: "\(succeeded) requests applied, \(failed) failed, \(total - succeeded - failed) not sent")
        if Task.isCancelled && index < units.count { throw CancellationError() }
        if cancelUploadRequested && index < units.count {
            throw OfflineODataError(.cancelled, "The upload was cancelled after \(succeeded + failed) requests; the rest stay queued")
        }
    }

    /// Asks a running upload to stop after the batch in flight; nothing is lost.
    public func cancelUpload() { cancelUploadRequested = true }

    /// Sends one batch, one change set per unit (or, without `$batch`, each request) and
    /// returns each request's answer.
    func send(_ units: [[QueuedRequest]], store: Store, model: Model, progress: ProgressReporter) async throws -> [SentResult] {
        let batch = Array(units.joined())
        let now = Self.httpDate()
        let firstSent = try await store.write { writer -> [Int64: String] in
            var times: [Int64: String] = [:]
            for request in batch {
                if let time = request.firstSent { times[request.id] = time; continue }
                _ = try writer.connection.execute("UPDATE oo_queue SET first_sent = ? WHERE id = ?", [.text(now), .integer(request.id)])
                times[request.id] = now
            }
            return times
        }
        // Local keys: Content-ID references inside this batch, the backend's key for earlier ones.
        let (keyMap, etags) = try await store.read { reader -> ([String: String], [String: String]) in
            var map: [String: String] = [:]
            for row in try reader.connection.query("SELECT entity_set, local_key, server_key FROM oo_key_map") {
                if case .text(let set) = row[0], case .text(let local) = row[1], case .text(let server) = row[2] { map[set + local] = set + server }
            }
            var etags: [String: String] = [:]
            for request in batch where !request.isCreate {
                guard let set = request.entitySet, let key = request.entityKey else { continue }
                let reference = map[set + key] ?? set + key
                if let (mappedSet, parsed) = Keys.parse(reference, model: model, serviceRoot: ""),
                   let etag = try reader.entity(in: mappedSet, key: parsed)?.control.etag {
                    etags[set + key] = etag
                }
            }
            return (map, etags)
        }
        var contentIDs: [String: String] = [:]
        var messages: [BatchMessage] = []
        var createdHere: Set<String> = []
        var matched: Set<String> = []
        for request in batch {
            var url = request.url
            // A media request's body is a stream: it goes as it is. JSON bodies name local
            // entities by reference; those references are rewritten like the URL.
            let isMedia = request.mediaType != nil
            var body = isMedia ? "" : String(decoding: request.body, as: UTF8.self)
            for (local, cid) in contentIDs {
                if url == local || url.hasPrefix(local + "/") { url = cid + url.dropFirst(local.count) }
                if !isMedia { body = body.replacingOccurrences(of: "\"\(local)\"", with: "\"\(cid)\"") }
            }
            for (local, server) in keyMap {
                if url == local || url.hasPrefix(local + "/") { url = server + url.dropFirst(local.count) }
                if !isMedia { body = body.replacingOccurrences(of: "\"\(local)\"", with: "\"\(server)\"") }
            }
            var headers = ODataCore.HTTPHeaders()
            if let mediaType = request.mediaType {
                headers["Content-Type"] = mediaType
            } else if !body.isEmpty {
                headers["Content-Type"] = "application/json"
            }
            if parameters.enableRepeatableRequests, let id = request.repeatID {
                let time = firstSent[request.id] ?? now
                headers["Repeatability-Request-ID"] = id
                headers["Repeatability-First-Sent"] = time
                headers["RequestID"] = id
                headers["RepeatabilityCreation"] = time
            }
            let reference = (request.entitySet ?? "") + (request.entityKey ?? "")
            // If-Match guards the first change of a downloaded entity in this batch with its ETag;
            // later ones (the ETag is new by then), entities created in this batch and entities
            // whose ETag is unknown send `*`: services such as SAP Gateway answer 428 without it.
            if !request.isCreate, !request.url.hasSuffix("/$ref") {
                if !createdHere.contains(reference), !matched.contains(reference), let etag = etags[reference] {
                    headers["If-Match"] = etag
                    // Later changes of this entity in the batch follow this checked one.
                    matched.insert(reference)
                } else {
                    headers["If-Match"] = "*"
                }
            }
            for (name, value) in request.headers { headers[name] = value }
            headers["Content-ID"] = "\(request.id)"
            if request.isCreate, request.localKey {
                contentIDs[reference] = "$\(request.id)"
            }
            if request.isCreate { createdHere.insert(reference) }
            // V2 has no PATCH: a partial update is a MERGE there.
            let method = model.version.isLegacy && request.method == "PATCH" ? "MERGE" : request.method
            messages.append(.request(method, url, headers: headers, body: isMedia ? request.body : Array(body.utf8)))
        }
        if !parameters.backendSupportsBatch {
            var results: [SentResult] = []
            var locations: [String: String] = [:]
            for (request, message) in zip(batch, messages) {
                var url = ContentIDReferences.resolve(url: message.url ?? "", locations)
                let body = ContentIDReferences.resolve(body: message.body, locations)
                if url.hasPrefix(serviceRoot) { url = String(url.dropFirst(serviceRoot.count)) }
                var headers: [String: String] = [:]
                for field in message.headers where field.name != "Content-ID" { headers[field.name] = field.value }
                let response: TransportResponse
                do {
                    response = try await send(method: message.method ?? request.method, url: url, headers: headers, body: body)
                } catch {
                    throw PartlySent(results: results, failure: error)
                }
                report(progress, .sendingDataToServer, ["sentBytes": "\(bytesSent)"])
                if let location = response.headers["Location"] { locations["\(request.id)"] = location }
                results.append(SentResult(request: request, status: response.status, headers: response.headers, body: response.body))
            }
            report(progress, .receivingDataFromServer, ["receivedBytes": "\(bytesReceived)"])
            return results
        }
        // One change set per unit.
        var parts: [BatchPart] = []
        var groups: [[Int]] = []
        var offset = 0
        for unit in units {
            groups.append(Array(offset..<(offset + unit.count)))
            offset += unit.count
        }
        for group in groups {
            parts.append(.changeSet(ChangeSet(operations: group.map { offset in
                var partHeaders = ODataCore.HTTPHeaders([("Content-Type", "application/http"), ("Content-Transfer-Encoding", "binary")])
                partHeaders["Content-ID"] = "\(batch[offset].id)"
                return BatchOperation(partHeaders: partHeaders, message: messages[offset])
            })))
        }
        let multipart = MultipartBatch(parts: parts)
        var headers = ["Content-Type": multipart.contentType]
        if !model.version.isLegacy { headers["Prefer"] = "odata.continue-on-error" }
        let response = try await send(method: "POST", url: "$batch", headers: headers, body: multipart.write())
        report(progress, .sendingDataToServer, ["sentBytes": "\(bytesSent)"])
        report(progress, .receivingDataFromServer, ["receivedBytes": "\(bytesReceived)"])
        guard response.status < 400 else { throw Self.backendError(response, method: "POST", url: absoluteURL("$batch")) }
        let answer: MultipartBatch
        do {
            answer = try MultipartBatch.read(response.body, boundary: response.headers["Content-Type"].flatMap { ODataCore.HTTPHeaders.parameter("boundary", in: $0) })
        } catch {
            throw OfflineODataError(.backend, "The $batch response is not valid multipart: \(error); the requests stay queued")
        }
        var results: [SentResult] = []
        for (groupIndex, group) in groups.enumerated() {
            guard groupIndex < answer.parts.count else {
                // The backend stopped early (no continue-on-error): the rest stays queued.
                break
            }
            switch answer.parts[groupIndex] {
            case .changeSet(let set):
                for (offset, operation) in zip(group, set.operations) {
                    let message = operation.message
                    results.append(SentResult(request: batch[offset], status: message.status ?? 500, headers: message.headers, body: message.body))
                }
            case .operation(let operation):
                let message = operation.message
                for offset in group {
                    results.append(SentResult(request: batch[offset], status: message.status ?? 500, headers: message.headers, body: message.body))
                }
            }
        }
        return results
    }

    /// A link change gave the entity holding the foreign key a new ETag on backends that renew
    /// it (the reference server, SAP Gateway). When the answer did not carry it, it is read
    /// now, right after the change, so that the entity's next change is checked against it: an
    /// old ETag would fail for certain, and `If-Match: *` could overwrite another user's change
    /// unseen. If the read fails, the known ETag stays (a 412 then shows, never a lost update).
    func refreshETags(afterLinkChangesIn results: [SentResult], store: Store) async throws {
        let linked = results.filter { $0.status < 400 && ($0.request.url.contains("$ref") || $0.request.url.contains("$links")) }
        guard !linked.isEmpty else { return }
        let root = serviceRoot
        let schema = store.schema
        let stale = try await store.read { reader -> [String] in
            let keyMap = try Self.keyMap(reader.connection)
            return linked.compactMap { result in
                guard let holder = Self.linkHolder(of: result.request, schema: schema, serviceRoot: root, keyMap: keyMap) else { return nil }
                return holder.isSource && result.headers["ETag"] != nil ? nil : holder.reference
            }
        }
        let model = store.model
        for reference in Set(stale).sorted() {
            guard let (set, key) = Keys.parse(reference, model: model, serviceRoot: ""),
                  let response = try? await send(method: "GET", url: reference, headers: ["Accept": "application/json"]),
                  response.status == 200 else { continue }
            let answered = try? model.readEntity(response.body, entityType: model.entitySet(set)?.entityType)
            guard let etag = response.headers["ETag"] ?? answered?.control.etag else { continue }
            try await store.write { writer in
                _ = try writer.setState(in: set, key: key, etag: .some(etag))
                try Self.renewKeptETag(etag, in: set, predicate: Keys.predicate(key, in: set, model: model), writer: writer, model: model)
            }
        }
    }

    /// Applies the answers in one transaction: successes leave the queue and bring the
    /// backend's key, ETag and values; failures go to the ErrorArchive.
    func record(_ results: [SentResult], store: Store, model: Model) async throws -> [OfflineODataFailedRequest] {
        let root = serviceRoot
        return try await store.write { writer in
            var failures: [OfflineODataFailedRequest] = []
            var touched: Set<String> = []
            // Entities created by this batch: the backend answered the create with the values
            // it had then, so later changes to them in the batch are applied again on top.
            var createdHere: Set<String> = []
            // Entities whose create the backend took in this batch (by their backend key).
            var createdNow: Set<String> = []
            // Requests the backend took, per entity: what its kept state advances by.
            var taken: [String: [(request: QueuedRequest, etag: String?, server: Entity?)]] = [:]
            for result in results {
                var request = result.request
                let set = request.entitySet
                let localReference = (set ?? "") + (request.entityKey ?? "")
                // An entity created earlier in this upload now has the backend's key.
                if let set, let local = request.entityKey {
                    let mapped = try writer.connection.query("SELECT server_key FROM oo_key_map WHERE entity_set = ? AND local_key = ?", [.text(set), .text(local)])
                    if case .text(let server)? = mapped.first?.first { request.entityKey = server }
                }
                let reference = (set ?? "") + (request.entityKey ?? "")
                touched.insert(reference)
                if result.status < 400 {
                    try Self.removeQueued(request.id, writer: writer)
                    guard let set, let localKey = request.entityKey, let (_, key) = Keys.parse(set + localKey, model: model, serviceRoot: "") else { continue }
                    if request.isCreate { createdHere.insert(localReference) }
                    if !request.isCreate, request.method != "DELETE", createdHere.contains(localReference),
                       let change = try? Self.localChange(from: result.request, model: model, serviceRoot: root, keyMap: Self.keyMap(writer.connection)), !change.target.isRef {
                        _ = try? writer.connection.savepoint { try Self.applyLocally(change, writer: writer, model: model, repeatable: false, replaying: result.request) }
                    }
                    let server = request.mediaType != nil && !request.isCreate ? nil : Self.serverEntity(result, set: set, model: model)
                    var predicate = localKey
                    if request.isCreate {
                        if let serverPredicate = try Self.takeOverCreated(result, set: set, localPredicate: localKey, localKey: key, writer: writer, model: model) {
                            touched.insert(set + serverPredicate)
                            predicate = serverPredicate
                        }
                        createdNow.insert(set + predicate)
                        let nestedNow = try Self.takeOverNested(result, set: set, writer: writer, model: model)
                        touched.formUnion(nestedNow)
                        createdNow.formUnion(nestedNow)
                    } else if let holder = Self.linkHolder(of: result.request, schema: writer.schema, serviceRoot: root,
                                                           keyMap: try Self.keyMap(writer.connection)) {
                        // A link change may give the end holding the foreign key a new ETag: the
                        // answer carries it for the URL's entity; otherwise the upload reads it
                        // (see `refreshETags`) before that entity's next change is sent.
                        if holder.isSource, let etag = result.headers["ETag"],
                           let (holderSet, holderKey) = Keys.parse(holder.reference, model: model, serviceRoot: "") {
                            try writer.setState(in: holderSet, key: holderKey, etag: .some(etag))
                            try Self.renewKeptETag(etag, in: holderSet, predicate: Keys.predicate(holderKey, in: holderSet, model: model),
                                                   writer: writer, model: model)
                        }
                    } else if request.method != "DELETE", let etag = result.headers["ETag"] ?? server?.control.etag {
                        try writer.setState(in: set, key: key, etag: .some(etag))
                    }
                    if !request.options.removeAfterUpload {
                        taken[set + predicate, default: []].append((request, result.headers["ETag"], server))
                    }
                    continue
                }
                // Failed, or not sent because a request it depends on failed.
                _ = try writer.connection.execute("UPDATE oo_queue SET status = 'failed' WHERE id = ?", [.integer(request.id)])
                var code = "DependencyFailed"
                var message = "Not sent: it depends on request \(result.dependencyOf ?? 0), which failed"
                var inner: String?
                if result.dependencyOf == nil {
                    if let error = try? ODataError.parse(result.body, httpStatus: result.status) {
                        code = error.code
                        message = error.message
                        inner = error.innerError?.serialized
                    } else {
                        code = "HTTP\(result.status)"
                        message = String(decoding: result.body.prefix(500), as: UTF8.self)
                    }
                }
                // A media request's body is a stream, not text: the archive names its type instead.
                let body = request.body.isEmpty || request.mediaType != nil ? nil : String(decoding: request.body, as: UTF8.self)
                let failure = OfflineODataFailedRequest(httpStatus: result.status, requestID: request.id, customTag: request.options.customTag, code: code,
                                                        message: message, innerError: inner, method: request.method, url: request.url, body: body)
                func text(_ value: String?) -> Value { value.map { .primitive(.string($0)) } ?? .null }
                try writer.insert(Entity(properties: [
                    NamedValue(name: "RequestID", value: .primitive(.int64(request.id))), NamedValue(name: "CustomTag", value: text(request.options.customTag)),
                    NamedValue(name: "HTTPStatusCode", value: .primitive(.int32(Int32(result.status)))), NamedValue(name: "Code", value: text(code)),
                    NamedValue(name: "Message", value: text(message)), NamedValue(name: "InnerError", value: text(inner)),
                    NamedValue(name: "Domain", value: text(result.dependencyOf == nil ? "Backend" : "OfflineOData")),
                    NamedValue(name: "RequestMethod", value: text(request.method)), NamedValue(name: "RequestURL", value: text(request.url)),
                    NamedValue(name: "RequestBody", value: text(body)),
                ]), into: LocalSchema.errorArchive)
                if let set, let localKey = request.entityKey, let (_, key) = Keys.parse(set + localKey, model: model, serviceRoot: "") {
                    try writer.setState(in: set, key: key, inError: true)
                }
                failures.append(failure)
            }
            // A created entity took the backend's answer, which predates its changes still
            // queued for later batches: they are applied on top again, so that it shows them.
            if !createdNow.isEmpty {
                // Only their requests are loaded (a large queue of creates would otherwise be read
                // whole after every batch).
                var ids: [Int64] = []
                for row in try writer.connection.query("SELECT id, entity_set, entity_key FROM oo_queue WHERE status = 'pending' AND is_create = 0") {
                    guard case .integer(let id) = row[0], case .text(let set) = row[1], case .text(let key) = row[2],
                          createdNow.contains(set + key) else { continue }
                    ids.append(id)
                }
                let keyMap = ids.isEmpty ? [:] : try Self.keyMap(writer.connection)
                let requests = try stride(from: 0, to: ids.count, by: 500).flatMap { start in
                    try Self.loadQueue(writer.connection, statuses: ["pending"], ids: Array(ids[start..<min(start + 500, ids.count)]))
                }
                for request in requests {
                    guard let change = try? Self.localChange(from: request, model: model, serviceRoot: root, keyMap: keyMap),
                          !change.target.isRef else { continue }
                    _ = try? writer.connection.savepoint {
                        try Self.applyLocally(change, writer: writer, model: model, repeatable: false, replaying: request)
                    }
                }
            }
            // Entities without queued requests are no longer pending, and need no kept state.
            // Those with requests left (waiting or failed) keep the backend's state after the
            // requests it took.
            // One pass over the queue answers for every entity (a query per entity scanned the
            // queue each time: an upload of 10,000 changes took 15 s instead of 7 s).
            var pendingLeft: Set<String> = []
            var anyLeft: Set<String> = []
            for row in try writer.connection.query("SELECT entity_set, entity_key, status FROM oo_queue WHERE entity_set IS NOT NULL AND entity_key IS NOT NULL") {
                guard case .text(let set) = row[0], case .text(let key) = row[1] else { continue }
                anyLeft.insert(set + key)
                if row[2] == .text("pending") { pendingLeft.insert(set + key) }
            }
            for reference in touched {
                guard let (set, key) = Keys.parse(reference, model: model, serviceRoot: "") else { continue }
                let predicate = Keys.predicate(key, in: set, model: model)
                if !pendingLeft.contains(set + predicate) {
                    try writer.setState(in: set, key: key, pending: false)
                    if !anyLeft.contains(set + predicate) {
                        try Self.forgetKeptState(set, predicate: predicate, writer: writer)
                        continue
                    }
                }
                for (request, etag, server) in taken[reference] ?? [] {
                    try Self.advanceKeptState(after: request, etag: etag, server: server, in: set, predicate: predicate, writer: writer, model: model)
                }
            }
            return failures
        }
    }

    static func serverEntity(_ result: SentResult, set: String, model: Model) -> Entity? {
        guard !result.body.isEmpty else { return nil }
        let type = model.entitySet(set)?.entityType
        return try? model.readEntity(result.body, entityType: type)
    }

    /// A create succeeded: the local entity takes the backend's key, ETag and values; later
    /// requests and read links that use the local key are mapped to the backend's. Returns the
    /// backend's key predicate when the response carried the entity.
    @discardableResult
    static func takeOverCreated(_ result: SentResult, set: String, localPredicate: String, localKey: [String: PrimitiveValue], writer: StoreWriter,
                                model: Model) throws -> String? {
        var server = serverEntity(result, set: set, model: model)
        if let etag = result.headers["ETag"] { server?.control.etag = etag }
        return try takeOverCreated(server, removeAfterUpload: result.request.options.removeAfterUpload, set: set, localPredicate: localPredicate,
                                   localKey: localKey, writer: writer, model: model)
    }

    /// The nested entities of a successful deep insert take the keys, ETags and values the
    /// backend answered with, found at the same place in its answer (the order of the request,
    /// as OData 4.01 §11.4.2.2 and SAP Gateway answer). Returns the entities touched.
    static func takeOverNested(_ result: SentResult, set: String, writer: StoreWriter, model: Model) throws -> Set<String> {
        let nested = result.request.nested
        guard !nested.isEmpty else { return [] }
        let removeAfterUpload = result.request.options.removeAfterUpload
        // The answer is used only when it has the nested entities where the request had them,
        // each with the values sent: matched by place, a backend that answers in another order
        // must not swap two entities' keys.
        var server = serverEntity(result, set: set, model: model)
        if let answered = server, let sent = try? model.readEntity(result.request.body, entityType: model.entitySet(set)?.entityType),
           !Self.answersInOrder(sent: sent, answered: answered) {
            server = nil
        }
        var touched: Set<String> = []
        for created in nested {
            guard let (nestedSet, localKey) = Keys.parse(created.entity, model: model, serviceRoot: "") else { continue }
            let localPredicate = String(created.entity.dropFirst(nestedSet.count))
            touched.insert(created.entity)
            guard let answered = server.flatMap({ Self.nestedEntity(at: created.path, in: $0) }) else {
                // A backend that answers without the nested entities: they keep their local keys
                // until a download brings the backend's (or go now, with removeAfterUpload).
                if removeAfterUpload { try writer.delete(from: nestedSet, key: localKey) }
                continue
            }
            if let serverPredicate = try takeOverCreated(answered, removeAfterUpload: removeAfterUpload, set: nestedSet,
                                                         localPredicate: localPredicate, localKey: localKey, writer: writer, model: model) {
                touched.insert(nestedSet + serverPredicate)
            }
        }
        return touched
    }

    /// Whether `answered` has the inline entities of `sent` at the same places (as many, in the
    /// same order), each with the primitive values sent.
    static func answersInOrder(sent: Entity, answered: Entity, depth: Int = 0) -> Bool {
        guard depth < 32 else { return false }
        for value in sent.navigation {
            guard let inline = value.inline else { continue }
            let pairs: [(Entity, Entity)]
            switch (inline, answered.navigation(value.name)?.inline) {
            case (.entity(let child?), .entity(let other?)?):
                pairs = [(child, other)]
            case (.entity(nil), _):
                continue
            case (.collection(let children), .collection(let others)?) where children.entities.count == others.entities.count:
                pairs = Array(zip(children.entities, others.entities))
            default:
                return false
            }
            for (child, other) in pairs {
                for property in child.properties {
                    guard case .primitive(let mine) = property.value, case .primitive(let theirs)? = other[property.name] else { continue }
                    if mine != theirs, Literal.convert(.primitive(theirs), to: mine.type) != .primitive(mine) { return false }
                }
                guard answersInOrder(sent: child, answered: other, depth: depth + 1) else { return false }
            }
        }
        return true
    }

    /// The entity at `path` (`Contacts/0`, `Items/1/Notes/0`, `Manager`) among the inline
    /// navigation values of `entity`.
    static func nestedEntity(at path: String, in entity: Entity) -> Entity? {
        var current = entity
        var parts = path.split(separator: "/")[...]
        while let name = parts.popFirst() {
            switch current.navigation(String(name))?.inline {
            case .entity(let child?)?:
                current = child
            case .collection(let children)?:
                guard let text = parts.popFirst(), let index = Int(text), children.entities.indices.contains(index) else { return nil }
                current = children.entities[index]
            default:
                return nil
            }
        }
        return current
    }

    /// The entity the backend answered a create with takes over the local one (see above).
    @discardableResult
    static func takeOverCreated(_ answered: Entity?, removeAfterUpload: Bool, set: String, localPredicate: String, localKey: [String: PrimitiveValue],
                                writer: StoreWriter, model: Model) throws -> String? {
        guard var server = answered, let serverKey = Keys.key(of: server, in: set, model: model) else {
            if removeAfterUpload {
                try writer.delete(from: set, key: localKey)
                _ = try writer.connection.execute("DELETE FROM oo_streams WHERE entity_set = ? AND entity_key = ?", [.text(set), .text(localPredicate)])
            }
            return nil
        }
        server.navigation = []
        let serverPredicate = Keys.predicate(serverKey, in: set, model: model)
        // An entity deleted locally since (its delete is queued after the create) has nothing
        // to take over; only its key is mapped.
        if try writer.rowid(in: set, key: localKey) != nil {
            if removeAfterUpload {
                try writer.delete(from: set, key: localKey)
                _ = try writer.connection.execute("DELETE FROM oo_streams WHERE entity_set = ? AND entity_key = ?", [.text(set), .text(localPredicate)])
            } else if serverPredicate != localPredicate {
                // The row takes the backend's key in place (its links stay, and the foreign keys
                // of children created under it follow), then the backend's values. A row that
                // still has that key is an older entity the backend has since deleted: it goes.
                if let stale = try writer.rowid(in: set, key: serverKey), stale != (try writer.rowid(in: set, key: localKey)) {
                    try writer.delete(from: set, key: serverKey)
                }
                try writer.changeKey(in: set, from: localKey, to: serverKey)
                try writer.update(server, in: set, replace: true)
                try writer.setState(in: set, key: serverKey, isLocal: true, pending: false, etag: .some(server.control.etag), localID: .some(localPredicate))
            } else {
                try writer.update(server, in: set, replace: false)
                try writer.setState(in: set, key: serverKey, etag: .some(server.control.etag))
            }
        }
        if serverPredicate != localPredicate {
            _ = try writer.connection.execute("INSERT OR REPLACE INTO oo_key_map (entity_set, local_key, server_key) VALUES (?, ?, ?)",
                                              [.text(set), .text(localPredicate), .text(serverPredicate)])
            _ = try writer.connection.execute("UPDATE oo_queue SET entity_key = ? WHERE entity_set = ? AND entity_key = ?",
                                              [.text(serverPredicate), .text(set), .text(localPredicate)])
            // A backend may give a key again after deleting its entity: what was kept for the old one is stale.
            _ = try writer.connection.execute("DELETE FROM oo_original WHERE entity_set = ? AND entity_key = ?", [.text(set), .text(serverPredicate)])
            _ = try writer.connection.execute("UPDATE oo_original SET entity_key = ? WHERE entity_set = ? AND entity_key = ?",
                                              [.text(serverPredicate), .text(set), .text(localPredicate)])
            try rekeyStreams(set, from: localPredicate, to: serverPredicate, writer: writer)
            let stillPending = try writer.connection.query("SELECT 1 FROM oo_queue WHERE entity_set = ? AND entity_key = ? AND status = 'pending'", [.text(set), .text(serverPredicate)])
            if !stillPending.isEmpty, !removeAfterUpload { try writer.setState(in: set, key: serverKey, pending: true) }
        }
        return serverPredicate
    }

    static func httpDate() -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: Date())
    }
}

/// Requests sent one by one (no `$batch`) that stopped at a failure: the answers received
/// before it, and the failure.
struct PartlySent: Error {
    var results: [SentResult]
    var failure: any Error
}
