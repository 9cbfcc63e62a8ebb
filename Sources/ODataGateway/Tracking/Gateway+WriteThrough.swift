import Foundation
import ODataCore
import OfflineOData

extension Gateway {
    /// How long a write-through waits for a refresh of the same scope under way before it makes
    /// the scope due instead.
    static let writeThroughLockTimeout = 5.0

    /// How long all of one upload's write-through may take: the scopes not reached by then are
    /// made due.
    static let writeThroughBudget = Duration.seconds(10)

    /// Writes what the backend now holds of the entities `applied` changed into every scope of
    /// the device's user and every shared scope that holds them or now matches them (removing
    /// them from those they left), before the device gets its answer (SPEC §13,
    /// "Write-through"): its next download holds its own changes with their new ETags, whatever
    /// the refresh target. A scope whose rows cannot be read back is made due. Throws only when
    /// neither could be done (PostgreSQL cannot be reached): the device must not be told that
    /// its next download holds its change.
    func writeThrough(
        _ applied: [AppliedRequest], request: GatewayRequest, backend: GatewayBackend, model: Model
    ) async throws {
        let plan = WriteThroughPlan(
            applied: applied, gatewayRoot: request.gatewayRoot, backendRoot: backend.url, model: model)
        guard !plan.isEmpty else { return }
        let scopes: [GatewayStore.ScopeEntry]
        do {
            scopes = try await store.scopes(backend: backend.url, user: request.user)
        } catch {
            logger.warning("Write-through found no scopes; all are made due", metadata: ["error": "\(error)"])
            try await store.markDue(backend: backend.url, user: request.user)
            return
        }
        let started = ContinuousClock.now
        var due: [Int64] = []
        let actions = plan.actions(for: scopes, uploader: request.user, isShared: backend.isShared)
        for action in actions {
            switch action {
            case .due(let scope): due.append(scope)
            case .write(let scope, let set, let entities):
                guard let entry = scopes.first(where: { $0.id == scope }),
                    ContinuousClock.now - started < Self.writeThroughBudget
                else {
                    due.append(scope)
                    continue
                }
                do {
                    let summary = try await store.writeThrough(scope: scope, lockTimeout: Self.writeThroughLockTimeout)
                    {
                        try await readBack(
                            entities, set: set, scope: entry, request: request, backend: backend, model: model)
                    }
                    metrics.writtenThrough.increment(by: summary.changed + summary.removed)
                } catch {
                    logger.notice(
                        "A change could not be written through; its scope is due",
                        metadata: ["scope": "\(scope)", "error": "\(error)"])
                    due.append(scope)
                }
            }
        }
        guard !due.isEmpty else { return }
        metrics.madeDue.increment(by: due.count)
        do {
            try await store.markDue(due)
        } catch {
            logger.warning("Scopes could not be made due; all are", metadata: ["error": "\(error)"])
            try await store.markDue(backend: backend.url, user: request.user)
        }
    }

    /// The rows scope `entry` holds of `entities` as the backend has them now, read with the
    /// scope's query and credentials (as its refresh reads, so that an unchanged row hashes the
    /// same), and the row keys of those it does not hold (deleted, or out of its query now).
    func readBack(
        _ entities: [WriteThroughPlan.Entity], set: String, scope entry: GatewayStore.ScopeEntry,
        request: GatewayRequest, backend: GatewayBackend, model: Model
    ) async throws -> (rows: [(key: String, keyMembers: String, payload: String)], gone: [String]) {
        guard let type = model.entityType(ofEntitySet: set) else {
            throw GatewayError(status: 502, code: "BackendMetadata", "The backend has no entity set \(set)")
        }
        let keyNames = model.key(of: type).map(\.name)
        let legacy = model.version.isLegacy
        // Shared data with the gateway's credentials; the uploader's own scopes with its own (the
        // plan makes anyone else's scope due instead).
        let authorization =
            backend.isShared(entry.query) ? Self.shared(backend) : credentials(of: request, backend: backend)
        var rows: [(key: String, keyMembers: String, payload: String)] = []
        let live = entities.filter { !$0.deleted }
        var start = 0
        while start < live.count {
            let chunk = Array(live[start..<min(live.count, start + WriteThroughPlan.keysPerRead)])
            start += chunk.count
            guard let target = WriteThroughPlan.target(query: entry.query, entities: chunk, version: model.version)
            else {
                throw GatewayError(status: 502, code: "WriteThrough", "A key of \(set) cannot be written in a filter")
            }
            var url: String? = backend.url + target
            var pages = 0
            while let current = url {
                pages += 1
                guard pages <= 100 else {
                    throw GatewayError(status: 502, code: "BackendPaging", "The read-back of \(set) does not end")
                }
                var headers = HTTPHeaders()
                headers["Accept"] = "application/json"
                for field in authorization { headers[field.name] = field.value }
                metrics.backendRequests("write-through").increment()
                let response = try await transport.send(
                    TransportRequest(method: "GET", url: current, headers: headers),
                    timeout: min(configuration.backendTimeout, 15))
                guard response.status == 200 else {
                    throw GatewayError(
                        status: 502, code: "BackendAnswer",
                        "The backend answered \(response.status) to the read-back of \(set)")
                }
                let (page, next) = try Self.rows(of: response.body, keyNames: keyNames, legacy: legacy, set: set)
                rows += page
                url = try next.map { try Self.nextPage($0, against: current, backend: backend) }
            }
        }
        let found = Set(rows.map(\.key))
        var gone: [String] = []
        for entity in entities {
            let keys = entity.rowKeys
            if entity.deleted || !keys.contains(where: found.contains) { gone += keys }
        }
        return (rows, gone)
    }
}
