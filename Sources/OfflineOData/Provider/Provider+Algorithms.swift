import Foundation
import ODataCore
import ODataStore

extension OfflineODataProvider {
    /// Runs the queue algorithms the parameters turn on (SPEC §6.1 and §6.2) now rather than
    /// at the next upload, so that the RequestQueue shows their result. Returns how many
    /// queued requests they removed.
    @discardableResult
    public func applyQueueAlgorithms() async throws -> Int {
        let store = try beginExclusive()
        defer { busy = false }
        let before = try await store.read { reader in try Self.loadQueue(reader.connection, status: "pending").count }
        var plan: [OfflineODataProgressStep] = []
        if parameters.enableRequestQueueOptimization { plan.append(.performingRequestQueueMerge) }
        if parameters.enableUndoLocalCreation { plan.append(.performingCreateDeleteMerge) }
        if parameters.enableTransactionBuilder { plan.append(.performingTransactionMerge) }
        let units = try await prepareQueue(store: store, model: store.model, categories: nil, progress: reporter(.upload, plan))
        return before - units.reduce(0) { $0 + $1.count }
    }

    /// Loads the requests to upload and runs the queue algorithms the parameters turn on, in
    /// SPEC §6's order; what they change is written back to the queue (and so shows in the
    /// RequestQueue entity set). Returns the requests grouped into change sets.
    func prepareQueue(store: Store, model: Model, categories: [String]?, progress: ProgressReporter) async throws -> [[QueueEntry]] {
        let root = serviceRoot
        var entries = try await store.read { reader -> [QueueEntry] in
            var queue = try Self.loadQueue(reader.connection, status: "pending")
            if let categories { queue = queue.filter { $0.options.uploadCategory.map(categories.contains) ?? false } }
            return QueueEntry.analyse(queue, model: model, serviceRoot: root, keyMap: try Self.keyMap(reader.connection))
        }
        if parameters.enableRequestQueueOptimization {
            report(progress, .performingRequestQueueMerge)
            let (after, rewrite) = QueueAlgorithms.optimize(entries, model: model)
            try await persist(rewrite, before: entries, store: store)
            entries = after
        }
        if parameters.enableUndoLocalCreation {
            report(progress, .performingCreateDeleteMerge)
            let (after, rewrite) = QueueAlgorithms.undoLocalCreations(entries)
            try await persist(rewrite, before: entries, store: store)
            entries = after
        }
        if parameters.enableTransactionBuilder { report(progress, .performingTransactionMerge) }
        return QueueAlgorithms.units(entries, builder: parameters.enableTransactionBuilder)
    }

    /// Writes an algorithm's result to the queue in one transaction: removed requests leave
    /// the queue and the RequestQueue, combined ones get their new method, URL, body and tag.
    /// An entity no request changes any more loses its pending state.
    func persist(_ rewrite: QueueRewrite, before entries: [QueueEntry], store: Store) async throws {
        guard !rewrite.isEmpty else { return }
        let model = store.model
        let root = serviceRoot
        try await store.write { writer in
            var affected: Set<String> = []
            for entry in entries where rewrite.removed.contains(entry.id) {
                affected.formUnion(entry.changed)
                try Self.removeQueued(entry.id, writer: writer)
            }
            for (id, request) in rewrite.changed.sorted(by: { $0.key < $1.key }) {
                let cascade: DatabaseValue = request.cascade.isEmpty ? .null : .text(JSONValue.array(request.cascade.map { .string($0) }).serialized)
                _ = try writer.connection.execute("UPDATE oo_queue SET method = ?, url = ?, body = ?, custom_tag = ?, cascade = ?, headers = ?, media_type = ? WHERE id = ?",
                                                  [.text(request.method), .text(request.url), .blob(request.body),
                                                   request.options.customTag.map { .text($0) } ?? .null, cascade, .text(request.headersJSON),
                                                   request.mediaType.map { .text($0) } ?? .null, .integer(id)])
            }
            guard !affected.isEmpty else { return }
            let keyMap = try Self.keyMap(writer.connection)
            let left = QueueEntry.analyse(try Self.loadQueue(writer.connection, statuses: ["pending", "failed"]), model: model, serviceRoot: root, keyMap: keyMap)
            for reference in affected where !left.contains(where: { $0.changed.contains(reference) }) {
                guard let (set, key) = Keys.parse(reference, model: model, serviceRoot: "") else { continue }
                let predicate = Keys.predicate(key, in: set, model: model)
                try Self.forgetKeptState(set, predicate: predicate, writer: writer)
                try writer.setState(in: set, key: key, isLocal: false, pending: false, inError: false)
            }
        }
    }
}
