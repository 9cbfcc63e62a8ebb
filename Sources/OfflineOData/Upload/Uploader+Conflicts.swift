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
        /// Requests dropped for the backend's copy: their entity takes it.
        var backendWon: [Int64: (entitySet: String, predicate: String, backend: Entity?)] = [:]
        var resolved: [OfflineODataConflictResolved] = []
    }

    /// Reads the backend's copy of the entity of every request of the batch refused with 412 or
    /// 428 and applies the conflict policy to it (SPEC §15). A request is sent again at most
    /// once per upload: a second refusal archives it. Requests inside a change set of several
    /// requests are archived (the change set would have to go again whole).
    func resolveConflicts(
        _ results: [SentResult], batch: UploadPlanner.Batch, on provider: isolated OfflineODataProvider
    ) async throws -> ConflictOutcome {
        var outcome = ConflictOutcome(results: results)
        let single = Set(batch.units.filter { $0.count == 1 }.flatMap { $0.map(\.id) })
        let model = self.model
        for index in results.indices {
            let result = results[index]
            let request = result.request
            // An update or delete refused for its ETag, or a create whose key the backend has.
            let isConflict =
                request.isCreate ? result.status == 409 && !request.localKey : [412, 428].contains(result.status)
            guard isConflict, result.dependencyOf == nil, request.mediaType == nil, let set = request.entitySet,
                let localKey = request.entityKey, !request.url.contains("/$ref"), !request.url.contains("/$links")
            else { continue }
            let read = try await store.read { reader -> (Entity?, Entity?, String)? in
                let keyMap = try RequestQueue.keyMap(reader.connection)
                let reference = keyMap[set + localKey] ?? set + localKey
                guard let (_, key) = Keys.parse(reference, model: model, serviceRoot: "") else { return nil }
                let predicate = Keys.predicate(key, in: set, model: model)
                let kept = try RequestQueue.keptEntity(reader.connection, in: set, predicate: predicate, model: model)
                return (try reader.entity(in: set, key: key), kept?.entity, predicate)
            }
            guard let (local, original, predicate) = read else { continue }
            let backend = try await backendCopy(of: set + predicate, entitySet: set, on: provider)
            outcome.copies[request.id] = (set, backend, original)
            let policy = parameters.conflictPolicy(for: set)
            // A create is archived with the copies (which entity it should have been is the
            // app's call); so is a request inside a change set of several.
            guard single.contains(request.id), !request.isCreate else { continue }
            if case .archive = policy { continue }
            let localChanges = Self.localChanges(of: request, local: local, original: original, model: model)
            var backendChanges = ConflictCopies.differences(backend?.entity, from: original)
            if let type = model.entityType(ofEntitySet: set) {
                backendChanges.subtract(model.key(of: type).map(\.name))
            }
            let conflict = OfflineODataConflict(
                requestID: request.id, method: request.method, url: request.url, entitySet: set,
                httpStatus: result.status, local: local, backend: backend?.entity, original: original,
                localChanges: localChanges, backendChanges: backendChanges)
            let decision: OfflineODataConflictResolution
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
            case .custom(let resolve): decision = await resolve(conflict)
            }
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
                // Without the backend's copy there is no ETag to send it with.
                guard let backendEntity = backend?.entity else { continue }
                var method = request.method
                var body = request.body
                var kind = OfflineODataConflictResolved.Outcome.resent
                if case .merged(let values) = decision {
                    var changed = Entity()
                    let keys = Set(model.entityType(ofEntitySet: set).map { model.key(of: $0).map(\.name) } ?? [])
                    for property in values.properties
                    where !keys.contains(property.name) && backendEntity[property.name] != property.value {
                        changed.properties.append(property)
                    }
                    method = model.version.isLegacy ? "MERGE" : "PATCH"
                    body = model.version.requestBody(changed)
                    kind = .merged
                }
                var headers = ["Accept": "application/json"]
                if !body.isEmpty { headers["Content-Type"] = "application/json" }
                if let etag = backend?.etag { headers["If-Match"] = etag }
                if parameters.enableRepeatableRequests {
                    // Derived from the request's own ID: sent again after a lost answer (the
                    // request is still queued), the resend is recognized as the same request.
                    let id = request.repeatID.map(Self.resendID) ?? GuidValue.random().description
                    let time = UploadPlanner.httpDate()
                    headers["Repeatability-Request-ID"] = id
                    headers["Repeatability-First-Sent"] = time
                    headers["RequestID"] = id
                    headers["RepeatabilityCreation"] = time
                }
                for (name, value) in request.headers { headers[name] = value }
                let answer = try await provider.send(method: method, url: set + predicate, headers: headers, body: body)
                outcome.results[index] = SentResult(
                    request: request, status: answer.status, headers: answer.headers, body: answer.body)
                if answer.status < 400 {
                    outcome.copies[request.id] = nil
                    outcome.resolved.append(resolved(kind))
                }
            case .takeBackend:
                var headers = ODataCore.HTTPHeaders()
                if let etag = backend?.etag { headers["ETag"] = etag }
                outcome.results[index] = SentResult(request: request, status: 204, headers: headers, body: [])
                outcome.backendWon[request.id] = (set, predicate, backend?.entity)
                outcome.copies[request.id] = nil
                outcome.resolved.append(resolved(.backendWins))
            }
        }
        return outcome
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
    func backendCopy(
        of url: String, entitySet: String, on provider: isolated OfflineODataProvider
    ) async throws -> BackendCopy? {
        let response = try await provider.send(method: "GET", url: url, headers: ["Accept": "application/json"])
        if response.status == 404 { return BackendCopy(entity: nil, etag: nil) }
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

    /// The properties a queued request sets: a PATCH's or MERGE's body; for a PUT, those in
    /// which its body differs from the original; for a delete, every property.
    static func localChanges(of request: QueuedRequest, local: Entity?, original: Entity?, model: Model) -> Set<String>
    {
        let type = request.entitySet.flatMap { model.entitySet($0)?.entityType }
        guard request.method.uppercased() != "DELETE",
            let body = try? model.readEntity(request.body, entityType: type)
        else { return Set((original ?? local)?.properties.map(\.name) ?? []) }
        if request.method.uppercased() == "PUT" { return ConflictCopies.differences(body, from: original) }
        return Set(body.properties.map(\.name))
    }
}
