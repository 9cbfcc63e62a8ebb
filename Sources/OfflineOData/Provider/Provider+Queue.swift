import Foundation
public import ODataCore
import ODataStore

extension OfflineODataProvider {
    /// Applies a modification to the store and appends it to the queue, in one transaction.
    func apply(_ change: LocalChange, store: Store) async throws -> Entity? {
        let model = store.model
        let root = serviceRoot
        let repeatable = parameters.enableRepeatableRequests
        if change.target.entitySet == LocalSchema.errorArchive {
            guard change.method == "DELETE" else {
                throw OfflineODataError(.invalidRequest, "ErrorArchive rows can only be deleted")
            }
            var id: Int64?
            if case .int64(let value)? = change.target.key?["RequestID"] { id = value }
            try await deleteFromErrorArchive(requestID: id)
            return nil
        }
        do {
            // One local change is a short transaction: run it here rather than hop to the writer.
            return try await store.writeInline { writer in
                try LocalExecutor(writer, model: model, serviceRoot: root).apply(change, repeatable: repeatable)
            }
        } catch let error as OfflineODataError {
            throw error
        } catch let error as DatabaseError where Self.isDiskFull(error) {
            throw error  // reported as diskFull, naming the store, by `execute`
        } catch {
            throw OfflineODataError(.store, "\(change.method) \(change.url) could not be applied locally: \(error)")
        }
    }

    // MARK: Cancelling requests

    /// Cancels pending requests together (SAP's `cancelPendingRequests`): nil cancels every
    /// pending request, an empty list none. Each goes with the requests that depend on it (a
    /// change of an entity it creates, a link to it), and the entities they changed go back to
    /// their downloaded state, with the requests that stay applied again on top. A request that
    /// is not pending (unknown, or failed: the ErrorArchive is where those go) is an
    /// `invalidRequest` error naming it, and nothing is cancelled. Refused while an upload or
    /// download runs. Returns how many requests went.
    @discardableResult
    public func cancelPendingRequests(_ requestIDs: [Int64]? = nil) async throws -> Int {
        try await gatedLocalWrite {
            let store = try openStore()
            guard !busy else {
                throw OfflineODataError(
                    .invalidRequest, "Pending requests cannot be cancelled while an upload or download runs")
            }
            let model = store.model
            let root = serviceRoot
            let removed = try await store.write { writer in
                try RequestQueue(writer, model: model, serviceRoot: root).cancel(requestIDs)
            }
            keyMapCache = nil
            if removed > 0 { publishChange(OfflineODataStoreChange(origin: .undo, entitySets: nil)) }
            return removed
        }
    }

    // MARK: Undo

    /// Undoes every pending change of one entity: an updated entity returns to its downloaded
    /// state, a created one disappears, a deleted one comes back; its queued requests go, and
    /// so do later requests that depend on them (a child created under it, a link to it).
    public func undoPendingChanges(for entitySet: String, key: [String: PrimitiveValue]) async throws {
        try await undoPendingChanges(for: [(entitySet, key)])
    }

    /// Undoes the pending changes of several entities at once (see
    /// ``undoPendingChanges(for:key:)``).
    public func undoPendingChanges(for entities: [(entitySet: String, key: [String: PrimitiveValue])]) async throws {
        try await gatedLocalWrite { try await undoPendingChangesNow(for: entities) }
    }

    private func undoPendingChangesNow(
        for entities: [(entitySet: String, key: [String: PrimitiveValue])]
    ) async throws {
        let store = try openStore()
        let model = store.model
        let root = serviceRoot
        let references = entities.map { $0.entitySet + Keys.predicate($0.key, in: $0.entitySet, model: model) }
        try await store.write { writer in try RequestQueue(writer, model: model, serviceRoot: root).undo(references) }
        keyMapCache = nil
        publishChange(OfflineODataStoreChange(origin: .undo, entitySets: nil))
    }

    /// Undoes the pending changes of the entity a URL such as `Customers('C1')` names (it may
    /// be deleted locally).
    public func undoPendingChanges(forURL url: String) async throws {
        try await undoPendingChanges(forURLs: [url])
    }

    /// Undoes the pending changes of every entity the URLs name, together.
    public func undoPendingChanges(forURLs urls: [String]) async throws {
        let store = try openStore()
        var entities: [(entitySet: String, key: [String: PrimitiveValue])] = []
        for url in urls {
            let mapped = try await rewriteLocalKeys(url, store: store)
            guard let (set, key) = Keys.parse(mapped, model: store.model, serviceRoot: serviceRoot) else {
                throw OfflineODataError(.invalidRequest, "\(url) does not name one entity by key")
            }
            entities.append((set, key))
        }
        try await undoPendingChanges(for: entities)
    }

    /// Deleting from the ErrorArchive (SPEC §7; see ``RequestQueue/deleteFromErrorArchive(requestID:individual:)``).
    func deleteFromErrorArchive(requestID: Int64?) async throws {
        let store = try openStore()
        let model = store.model
        let root = serviceRoot
        let individual = parameters.enableIndividualErrorArchiveDeletion
        try await store.write { writer in
            try RequestQueue(writer, model: model, serviceRoot: root).deleteFromErrorArchive(
                requestID: requestID, individual: individual)
        }
    }
}
