public import Foundation
import ODataCore
public import ODataStore

/// A committed change of the offline store: which entity sets it may have touched and why.
public struct OfflineODataStoreChange: Sendable, Hashable {
    /// What changed the store.
    public enum Origin: String, Sendable, Hashable {
        /// A local create, update, delete, link or local `$batch`.
        case localWrite
        /// A download (or the first open, which downloads).
        case download
        /// An upload: backend keys, ETags and failed requests.
        case upload
        /// Undo of pending changes, or a deleted ErrorArchive entry that reverted its entity.
        case undo
        /// The store was closed: reads fail until it is opened again.
        case closed
        /// A defining query was removed with the rows only it covered.
        case definingQueryRemoved
    }

    /// What changed the store.
    public var origin: Origin
    /// The entity sets whose entities may have changed (with the system sets RequestQueue and
    /// ErrorArchive); nil when any may have.
    public var entitySets: Set<String>?

    /// Creates a value from its parts.
    public init(origin: Origin, entitySets: Set<String>?) {
        self.origin = origin
        self.entitySets = entitySets
    }

    /// Whether the change may touch an entity set of `sets` (nil: reads of every set).
    public func touches(_ sets: Set<String>?) -> Bool {
        guard let entitySets, let sets else { return true }
        return !entitySets.isDisjoint(with: sets)
    }
}

/// The state of synchronization an app shows: what waits, what failed, what runs, and when the
/// last upload and download succeeded. Observe it with
/// ``OfflineODataProvider/syncStatusUpdates()``.
public struct OfflineODataSyncStatus: Sendable, Hashable {
    /// Requests in the RequestQueue waiting for upload.
    public var pendingRequests: Int
    /// Requests in the ErrorArchive (rejected by the backend).
    public var failedRequests: Int
    /// The operation running now, if any.
    public var runningOperation: OfflineODataOperation?
    /// The step the running operation has reached.
    public var progressStep: OfflineODataProgressStep?
    /// Its progress message (localized like the progress events).
    public var progressMessage: String?
    /// When an upload last finished without failing (kept in the store).
    public var lastUpload: Date?
    /// When a download last finished without failing (kept in the store).
    public var lastDownload: Date?
    /// The failure of the last open, upload or download, until one succeeds.
    public var lastError: String?

    /// Whether an upload is running.
    public var isUploading: Bool { runningOperation == .upload }
    /// Whether a download (or the first open's download) is running.
    public var isDownloading: Bool { runningOperation == .download || runningOperation == .open }

    /// Creates a value from its parts.
    public init(
        pendingRequests: Int = 0, failedRequests: Int = 0, runningOperation: OfflineODataOperation? = nil,
        progressStep: OfflineODataProgressStep? = nil, progressMessage: String? = nil, lastUpload: Date? = nil,
        lastDownload: Date? = nil, lastError: String? = nil
    ) {
        self.pendingRequests = pendingRequests
        self.failedRequests = failedRequests
        self.runningOperation = runningOperation
        self.progressStep = progressStep
        self.progressMessage = progressMessage
        self.lastUpload = lastUpload
        self.lastDownload = lastDownload
        self.lastError = lastError
    }
}

/// A subscriber of store changes: the public stream of changes, or an observation's signal.
enum ChangeSubscriber {
    case changes(AsyncStream<OfflineODataStoreChange>.Continuation)
    /// Signalled (coalesced) when a change touches `readSets` (nil: every change).
    case signal(readSets: Set<String>?, AsyncStream<Void>.Continuation)
}

/// What the sync status holds besides the store's counts.
struct SyncState {
    var running: OfflineODataOperation?
    var progressStep: OfflineODataProgressStep?
    var progressMessage: String?
    var lastError: String?
    /// Numbers the statuses sent, so that one computed late never replaces a newer one.
    var sequence = 0
    var delivered = 0
}

extension OfflineODataProvider {
    // MARK: Store changes

    /// Every committed change of the store, as it happens; each call gives a new stream, which
    /// ends when the consuming task is cancelled.
    public func storeChanges() -> AsyncStream<OfflineODataStoreChange> {
        let (stream, continuation) = AsyncStream<OfflineODataStoreChange>.makeStream(
            bufferingPolicy: .bufferingNewest(1000))
        let id = UUID()
        changeSubscribers[id] = .changes(continuation)
        continuation.onTermination = { [weak self] _ in Task { await self?.removeChangeSubscriber(id) } }
        return stream
    }

    /// A signal each time a change touches `readSets`; several changes before the consumer
    /// looks give one signal.
    func changeSignals(readSets: Set<String>?) -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let id = UUID()
        changeSubscribers[id] = .signal(readSets: readSets, continuation)
        continuation.onTermination = { [weak self] _ in Task { await self?.removeChangeSubscriber(id) } }
        return stream
    }

    private func removeChangeSubscriber(_ id: UUID) { changeSubscribers[id] = nil }

    /// How many change subscriptions are alive (observations, ``storeChanges()`` streams).
    public var activeChangeSubscriptions: Int { changeSubscribers.count }

    /// Tells subscribers about a committed change, and the sync status its new counts.
    func publishChange(_ change: OfflineODataStoreChange) {
        for subscriber in changeSubscribers.values {
            switch subscriber {
            case .changes(let continuation): continuation.yield(change)
            case .signal(let readSets, let continuation):
                if change.touches(readSets) { continuation.yield(()) }
            }
        }
        publishStatus()
    }

    /// The entity sets a local write of `method` on `url` can change: the set the URL names;
    /// for creates, deletes and links also the sets its navigation properties lead to (deep
    /// inserts, cascades, the other end of a link); and the RequestQueue.
    func writtenSets(method: String, url: String, model: Model) -> Set<String>? {
        guard let set = try? DefiningQueries.entitySet(of: url, model: model) else { return nil }
        var sets: Set<String> = [set, LocalSchema.requestQueue]
        let verb = method.uppercased()
        if verb == "POST" || verb == "DELETE" || QueuedRequest.isLinkURL(url) {
            let first = url.split(separator: "(", maxSplits: 1).first.map { String($0.split(separator: "/")[0]) } ?? set
            for name in [first, set] {
                for binding in model.entitySet(name)?.navigationPropertyBindings ?? [] {
                    if let target = model.resolveBindingTarget(binding.target)?.name { sets.insert(target) }
                }
                sets.insert(name)
            }
        }
        return sets
    }

    // MARK: Observation

    /// The entity sets a read of `url` depends on: its set, the targets of its `$expand`s, and,
    /// when its `$filter` or `$orderby` follows navigation properties, the sets those lead to.
    /// Nil when the URL cannot be resolved (then every change counts).
    public func readSets(of url: String) throws -> Set<String>? {
        let model = try openStore().model
        let path = url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? ""
        let firstName = path.split(separator: "/").first.flatMap { $0.split(separator: "(").first }.map(String.init)
        if let firstName, LocalSchema.systemSets.contains(firstName) { return [firstName] }
        guard var sets = try? DefiningQueries.coveredSets(of: url, model: model) else { return nil }
        let query = url.split(separator: "?", maxSplits: 1).dropFirst().first.map(String.init) ?? ""
        if query.contains("/") {
            // Paths in $filter/$orderby may follow navigation properties any number of steps:
            // every set reachable through bindings counts.
            var pending = Array(sets)
            while let set = pending.popLast() {
                for binding in model.entitySet(set)?.navigationPropertyBindings ?? [] {
                    if let target = model.resolveBindingTarget(binding.target)?.name, sets.insert(target).inserted {
                        pending.append(target)
                    }
                }
            }
        }
        // A read through a navigation path depends on the sets along it.
        if let firstName, model.entitySet(firstName) != nil { sets.insert(firstName) }
        return sets
    }

    /// A live read of `url`: yields the current result at once, then again after every
    /// committed change (local write, download, upload, undo) that touches the entity sets the
    /// read depends on, and only when the result differs from the last one yielded. Several
    /// changes while a re-read runs cause one more re-read, not several.
    ///
    /// The sequence ends when the consuming task is cancelled, and throws when a read fails
    /// (the store was closed, say).
    public nonisolated func observe(_ url: String) -> AsyncThrowingStream<QueryResult, any Error> {
        observe(url) { $0 }
    }

    /// A live read of `url` whose results are transformed by `transform`.
    nonisolated func observe<T: Sendable & Equatable>(
        _ url: String, transform: @escaping @Sendable (QueryResult) throws -> T
    ) -> AsyncThrowingStream<T, any Error> {
        LiveQuery.run(subscribe: { await self.changeSignals(readSets: try await self.readSets(of: url)) }) {
            try transform(try await self.read(url))
        }
    }

    // MARK: Sync status

    /// The sync status now. Counts need an open store (zero before).
    public func syncStatus() async throws -> OfflineODataSyncStatus {
        var status = OfflineODataSyncStatus(
            runningOperation: syncState.running, progressStep: syncState.progressStep,
            progressMessage: syncState.progressMessage, lastError: syncState.lastError)
        guard let store else { return status }
        let counts = try await store.read { reader in try LocalSchema.syncCounts(reader.connection) }
        status.pendingRequests = counts.pending
        status.failedRequests = counts.failed
        status.lastUpload = counts.lastUpload
        status.lastDownload = counts.lastDownload
        return status
    }

    /// The sync status as an `AsyncSequence`: the current status at once, then each time it
    /// changes (a local write, an operation starting, its progress, its end). Ends when the
    /// consuming task is cancelled.
    public func syncStatusUpdates() -> AsyncStream<OfflineODataSyncStatus> {
        let (stream, continuation) = AsyncStream<OfflineODataSyncStatus>.makeStream(
            bufferingPolicy: .bufferingNewest(100))
        let id = UUID()
        statusSubscribers[id] = continuation
        continuation.onTermination = { [weak self] _ in Task { await self?.removeStatusSubscriber(id) } }
        syncState.sequence += 1
        let sequence = syncState.sequence
        Task { await self.sendStatus(to: id, sequence: sequence) }
        return stream
    }

    private func removeStatusSubscriber(_ id: UUID) { statusSubscribers[id] = nil }

    /// The first status of a new subscriber; dropped when a newer one went out meanwhile (the
    /// subscriber had that one).
    private func sendStatus(to id: UUID, sequence: Int) async {
        guard let status = try? await syncStatus(), sequence > syncState.delivered else { return }
        syncState.delivered = sequence
        statusSubscribers[id]?.yield(status)
    }

    /// Sends the status to its subscribers (the counts are read once for all of them). The
    /// counts are read after a suspension: a status that completes after a newer one is dropped.
    func publishStatus() {
        guard !statusSubscribers.isEmpty else { return }
        syncState.sequence += 1
        let sequence = syncState.sequence
        Task {
            guard let status = try? await self.syncStatus() else { return }
            self.deliver(status, sequence: sequence)
        }
    }

    private func deliver(_ status: OfflineODataSyncStatus, sequence: Int) {
        guard sequence > syncState.delivered else { return }
        syncState.delivered = sequence
        for continuation in statusSubscribers.values { continuation.yield(status) }
    }

    func progressChanged(_ progress: OfflineODataProgress) {
        // Steps of work outside an open, upload or download (the queue algorithms run alone).
        guard syncState.running != nil else { return }
        syncState.progressStep = progress.step
        syncState.progressMessage = progress.message
        publishStatus()
    }

    /// Runs an open, upload or download with its sync status: running while it runs; then
    /// its time (on success) or its failure, and a store change for the observers.
    func tracked(_ operation: OfflineODataOperation, _ body: () async throws -> Void) async throws {
        // Another upload or download runs: this one fails at once ("another … is running") and
        // must not change the status of the one that runs.
        if busy || syncState.running != nil {
            try await body()
            return
        }
        syncState.running = operation
        syncState.progressStep = nil
        syncState.progressMessage = nil
        publishStatus()
        let origin: OfflineODataStoreChange.Origin = operation == .upload ? .upload : .download
        // A first open downloads: it counts as a download.
        let firstOpen = operation == .open && !FileManager.default.fileExists(atPath: parameters.storeFile)
        defer {
            syncState.running = nil
            syncState.progressStep = nil
            syncState.progressMessage = nil
        }
        do {
            try await body()
            syncState = SyncState(
                lastError: nil, sequence: syncState.sequence, delivered: syncState.delivered)
            if operation != .open || firstOpen, let store {
                let upload = operation == .upload
                let now = Date()
                // A download's time is redone by the next download; an upload's waits for the disk.
                let durability: Store.CommitDurability =
                    operation == .download && !parameters.durableDownloads ? .redoable : .durable
                try? await store.write(durability) { writer in
                    try LocalSchema.recordSync(writer, upload: upload, at: now)
                }
            }
            publishChange(OfflineODataStoreChange(origin: origin, entitySets: nil))
        } catch {
            syncState = SyncState(
                lastError: nil, sequence: syncState.sequence, delivered: syncState.delivered)
            syncState.lastError = error is CancellationError ? "cancelled" : String(describing: error)
            publishChange(OfflineODataStoreChange(origin: origin, entitySets: nil))
            throw error
        }
    }
}
