public import Foundation
public import ODataCore
import ODataStore
import Logging

/// The offline OData provider: an encrypted local store filled by defining queries, local
/// reads and writes through OData requests, and upload/download against the backend.
///
/// ```swift
/// var parameters = OfflineODataParameters()
/// parameters.storeEncryptionKey = "secret"
/// let provider = OfflineODataProvider(serviceRoot: URL(string: "http://host/odata/v4/")!, parameters: parameters)
/// try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "Orders", query: "SalesOrders?$expand=Items"))
/// try await provider.open()
/// let orders = try await provider.read("SalesOrders?$filter=GrossAmount gt 100")
/// ```
///
/// The actor is the public facade and owns the provider's state: the store's lifecycle (open,
/// close, clear), the parameters and defining queries, the delegate and event streams, the
/// byte counters of the operation running and its cancellation flags, and the caches of the
/// key map and the covered sets. It holds no SQL and no batch logic: an upload runs in
/// `Uploader` with the `UploadPlanner`, a download in `Downloader`, local reads and writes
/// in `LocalReader` and `LocalExecutor`, and the queue and kept state are `RequestQueue`'s
/// (see "Architecture" in `docs/offline.md`).
public actor OfflineODataProvider {
    /// The service root, ending in `/`.
    public nonisolated let serviceRoot: String
    /// The parameters given at creation; `customHeaders` and `customCookies` can change later.
    public internal(set) var parameters: OfflineODataParameters
    let transport: any Transport
    /// Cookies, CSRF token and credentials across every request to the backend.
    var session: BackendSession
    /// The user whose credentials ``session`` sends (SPEC §16): an upload sends only that
    /// user's requests.
    var sessionUser: String?
    weak var delegate: (any OfflineODataDelegate)?
    var definingQueries: [OfflineODataDefiningQuery] = []
    var store: Store?
    var continuations: [UUID: AsyncStream<OfflineODataEvent>.Continuation] = [:]
    /// Observers of store changes (``storeChanges()``, `observe`), by subscription.
    var changeSubscribers: [UUID: ChangeSubscriber] = [:]
    /// Subscribers of ``syncStatusUpdates()``.
    var statusSubscribers: [UUID: AsyncStream<OfflineODataSyncStatus>.Continuation] = [:]
    /// What ``syncStatus()`` reports besides the counts.
    var syncState = SyncState()
    /// Local reads so far (tests count the re-reads of live queries).
    var localReadCount = 0
    var cancelUploadRequested = false
    var cancelDownloadRequested = false
    var busy = false
    /// Counts the running operation reports for its log record (see `logged`).
    var operationSummary: Logger.Metadata = [:]
    /// Where the provider logs: ``OfflineODataParameters/logger``.
    var logger: Logger { parameters.logger }
    /// Bytes sent and received during the current upload or download (for progress).
    var bytesSent: Int64 = 0
    /// This store's `Client-Instance-ID`, sent with every request (a sync gateway lists the
    /// devices it saw by it, as SAP's registration ID): made at random for a new store and
    /// kept in it; until the store is open, the one the new store will keep.
    var clientInstanceID = UUID().uuidString.lowercased()
    /// Whether the service root is a sync gateway (an answer carried `OOData-Gateway`): its
    /// server-side steps are pulled during uploads and downloads.
    var throughGateway = false
    /// The scope checksums the gateway sent in the running download, by defining query.
    var scopeChecksums: [String: String] = [:]
    var bytesReceived: Int64 = 0
    /// `Set(localKey)` → backend key predicate, loaded on first use and dropped after uploads.
    var keyMapCache: [String: String]?
    /// The backend's OData version, from its `$metadata` (decides headers and payload formats).
    var serviceVersion: ODataVersion?
    /// The store a first open is filling, once it exists (see `readyNewStore`).
    var newStore: Store?
    /// Whether a migration to a changed `$metadata` is carrying the queue over to a new store:
    /// local writes wait until it is done (see `MetadataMigration`).
    var migrating = false
    /// Whether the open store is being handed to another user (SPEC §16): only the switch's
    /// own task may use it meanwhile.
    var switchingUsers = false
    /// Local writes running now (a migration waits for them before it reads the queue).
    var localWritesInFlight = 0
    /// Whether a breaking migration runs (from its new store's download to the swap): the
    /// defining queries wait.
    var rebuildingStore = false
    /// Whether a breaking migration is swapping the stores (no store is open meanwhile):
    /// local reads wait.
    var swappingStores = false
    /// Entity sets the defining queries cover; nil after they change.
    var coveredSetsCache: Set<String>? {
        didSet { if coveredSetsCache == nil { definingSetsCache = nil } }
    }
    /// The entity sets the defining queries read (``definingQueryEntitySets()``); dropped
    /// with `coveredSetsCache`.
    var definingSetsCache: Set<String>?
    /// Language of the default progress messages; the device locale unless set.
    public var messageLanguage: String = ProgressMessages.shared.language(for: Locale.current)

    /// Creates a provider. Nothing touches the disk or network until `open()`. The provider
    /// holds `delegate` weakly (see ``OfflineODataDelegate``): keep a reference to it yourself.
    public init(
        serviceRoot: URL, parameters: OfflineODataParameters = OfflineODataParameters(),
        transport: (any Transport)? = nil,
        delegate: (any OfflineODataDelegate)? = nil
    ) {
        var root = serviceRoot.absoluteString
        if !root.hasSuffix("/") { root += "/" }
        self.serviceRoot = root
        self.parameters = parameters
        self.transport = transport ?? DefaultTransport.make(logger: parameters.logger)
        self.session = BackendSession(
            transport: self.transport, serviceRoot: root, authenticator: parameters.authenticator,
            csrfProtection: parameters.csrfProtection, maximumRetryAfter: parameters.maximumRetryAfter,
            logger: parameters.logger)
        self.delegate = delegate
        self.sessionUser = parameters.currentUser
    }

    /// Sets the delegate.
    public func setDelegate(_ delegate: (any OfflineODataDelegate)?) { self.delegate = delegate }

    /// Sets the language of progress messages (a code such as `de` or `zh-Hant`).
    public func setMessageLanguage(_ code: String) { messageLanguage = code }

    /// Replaces the custom headers; effective at the next upload or download.
    public func setCustomHeaders(_ headers: [String: String]) { parameters.customHeaders = headers }

    /// Replaces the custom cookies; effective at the next upload or download.
    public func setCustomCookies(_ cookies: [String: String]) { parameters.customCookies = cookies }

    // MARK: Events

    /// Progress and failures as an `AsyncSequence`; each call gives a new stream.
    public func events() -> AsyncStream<OfflineODataEvent> {
        let (stream, continuation) = AsyncStream<OfflineODataEvent>.makeStream(bufferingPolicy: .bufferingNewest(1000))
        let id = UUID()
        continuations[id] = continuation
        continuation.onTermination = { [weak self] _ in
            Task { await self?.removeContinuation(id) }
        }
        return stream
    }

    private func removeContinuation(_ id: UUID) { continuations[id] = nil }

    func emit(_ event: OfflineODataEvent) {
        for continuation in continuations.values { continuation.yield(event) }
        if case .progress(let progress) = event { progressChanged(progress) }
        guard let delegate else { return }
        switch event {
        case .progress(let progress):
            delegate.offlineODataProvider(didUpdate: progress)
            let shaped = progress.operationProgress
            switch progress.operation {
            case .open: delegate.offlineODataProvider(self, didUpdateOpenProgress: shaped)
            case .download: delegate.offlineODataProvider(self, didUpdateDownloadProgress: shaped)
            case .upload: delegate.offlineODataProvider(self, didUpdateUploadProgress: shaped)
            case .sendStore: delegate.offlineODataProvider(self, didUpdateSendStoreProgress: shaped)
            }
        case .requestFailed(let failure):
            delegate.offlineODataProvider(requestDidFail: failure)
            delegate.offlineODataProvider(self, requestDidFail: failure)
        case .metadataChanged(let change):
            delegate.offlineODataProvider(self, didChangeMetadata: change)
        case .conflictResolved(let resolution):
            delegate.offlineODataProvider(self, didResolveConflict: resolution)
        }
    }

    func reporter(_ operation: OfflineODataOperation, _ plan: [OfflineODataProgressStep]) -> ProgressReporter {
        ProgressReporter(operation: operation, plan: plan, language: messageLanguage)
    }

    /// Sends a progress update now, so updates arrive in the order the operation passes its steps.
    func report(_ progress: ProgressReporter, _ step: OfflineODataProgressStep, _ parameters: [String: String] = [:]) {
        emit(progress.event(step, parameters))
    }

    /// Runs `body`, one request of `progress`'s operation, given the operation's ID for the
    /// `OOData-Operation` header. Through a sync gateway, the gateway's status of that
    /// operation is pulled every ``OfflineODataParameters/cloudProgressPullInterval`` ms while
    /// the request runs, and reported as its steps (SPEC §13). Without a gateway, `body` runs
    /// alone and nothing else is sent.
    func withServerProgress<T: Sendable>(
        _ progress: ProgressReporter, _ body: (_ operation: String?) async throws -> T
    ) async throws -> T {
        guard throughGateway else { return try await body(nil) }
        let operation = UUID().uuidString
        let interval = UInt64(min(max(500, parameters.cloudProgressPullInterval), 3_600_000)) * 1_000_000
        let defaults = requestDefaults
        let poller = Task {
            var last: [String: String]?
            while !Task.isCancelled {
                try? await Task.sleep(nanoseconds: interval)
                guard !Task.isCancelled else { return }
                let request = defaults.request(
                    method: "GET", url: "$oodata/progress/" + operation, headers: ["Accept": "application/json"],
                    body: [])
                guard let response = try? await session.send(request, timeout: 10, tokenRequest: defaults.tokenRequest),
                    response.status == 200, let json = try? JSONValue.parse(response.body),
                    let name = json["step"]?.stringValue, let step = OfflineODataProgressStep(rawValue: name)
                else { continue }
                var parameters: [String: String] = [:]
                for name in ["number", "count"] {
                    if case .number(let text)? = json[name], let value = Int64(text) {
                        parameters[name] = String(value)
                    }
                }
                parameters["server"] = "true"
                let seen = parameters.merging(["step": name]) { $1 }
                // Only news, and never after the request ended (the operation has moved on).
                guard seen != last, !Task.isCancelled else { continue }
                last = seen
                emit(progress.serverEvent(step, parameters))
            }
        }
        defer { poller.cancel() }
        return try await body(operation)
    }

    // MARK: Defining queries

    /// Adds a defining query. Before the first open it is part of the initial download;
    /// afterwards it needs a `download()` to fill it. The same name or query twice is an error.
    public func add(definingQuery: OfflineODataDefiningQuery) async throws {
        // A breaking migration decides which queries its new store keeps: changes wait for it.
        while rebuildingStore { try await Task.sleep(nanoseconds: 10_000_000) }
        guard !definingQueries.contains(where: { $0.name == definingQuery.name }) else {
            throw OfflineODataError(
                .duplicateDefiningQuery, "A defining query named \(definingQuery.name) exists already")
        }
        guard !definingQueries.contains(where: { $0.query == definingQuery.query }) else {
            throw OfflineODataError(.duplicateDefiningQuery, "The defining query \(definingQuery.query) exists already")
        }
        try DefiningQueries.validate(definingQuery, version: store?.model.version)
        definingQueries.append(definingQuery)
        coveredSetsCache = nil
        if let store {
            let ordinal = definingQueries.count
            try await store.write { writer in try DefiningQueries.insert(definingQuery, ordinal: ordinal, writer) }
        }
    }

    /// Removes a defining query and the data of the entity sets it fills (its own and those of
    /// its expands) that no other defining query covers. While requests are pending (the data
    /// they change must stay until they are sent), the query is only marked
    /// ``OfflineODataDefiningQuery/isRemoving``, as SAP's: downloads leave it out, its data
    /// stays readable, and it goes with its data once the queue is empty (after the upload or
    /// download that finds it so, or at the next open).
    public func remove(definingQueryNamed name: String) async throws {
        while rebuildingStore { try await Task.sleep(nanoseconds: 10_000_000) }
        guard let index = definingQueries.firstIndex(where: { $0.name == name }) else {
            throw OfflineODataError(.unknownDefiningQuery, "No defining query named \(name)")
        }
        if let store, try await !isRequestQueueEmpty {
            try await store.write { writer in try DefiningQueries.markRemoving(named: name, writer) }
            definingQueries[index].isRemoving = true
            return
        }
        try await removeNow(index)
    }

    /// Removes the queries marked ``OfflineODataDefiningQuery/isRemoving`` once no request is
    /// pending.
    func finishRemovingDefiningQueries() async throws {
        guard store != nil, definingQueries.contains(where: \.isRemoving), try await isRequestQueueEmpty else { return }
        while let index = definingQueries.firstIndex(where: \.isRemoving) { try await removeNow(index) }
    }

    private func removeNow(_ index: Int) async throws {
        let removed = definingQueries[index]
        let name = removed.name
        if let store {
            let model = store.model
            // A query that no longer binds to the backend's model (SPEC §14) covers nothing.
            let stillCovered = definingQueries.filter { $0.name != name }
                .reduce(into: Set<String>()) {
                    $0.formUnion((try? DefiningQueries.coveredSets(of: $1.query, model: model)) ?? [])
                }
            // The query's own set and the sets of its expands that no other query covers.
            let orphaned = ((try? DefiningQueries.coveredSets(of: removed.query, model: model)) ?? [])
                .subtracting(stillCovered)
            try await store.write { writer in
                try DefiningQueries.delete(named: name, writer)
                for set in orphaned {
                    for (key, _) in try writer.keys(in: set) { try writer.delete(from: set, key: key) }
                }
            }
        }
        definingQueries.remove(at: index)
        coveredSetsCache = nil
        if store != nil { publishChange(OfflineODataStoreChange(origin: .definingQueryRemoved, entitySets: nil)) }
    }

    /// The defining queries in force.
    public var currentDefiningQueries: [OfflineODataDefiningQuery] { definingQueries }

    // MARK: Lifecycle

    /// Whether the store is open.
    public var isOpen: Bool { store != nil }

    /// Runs a long operation. When the Swift `Task` running it is cancelled, it stops at the
    /// next request or batch, cleans up as for any failure (an unfinished first open leaves no
    /// store, an upload keeps what was not answered queued, a download leaves the store as it
    /// was) and ends with `CancellationError`, whatever the transport threw meanwhile.
    func cancellable(_ body: () async throws -> Void) async throws {
        try Task.checkCancellation()
        do {
            try await body()
        } catch {
            // A failure caused by the cancellation (the transport's, a stop between pages)
            // is reported as the cancellation; an operation that completed is not.
            if Task.isCancelled { throw CancellationError() }
            throw error
        }
    }

    /// Runs an open, upload or download and logs how it ended: its summary at `info`, a
    /// failure at `error` (its code and status; the message, which may name keys, at `trace`),
    /// a cancellation at `notice`.
    func logged(_ operation: String, _ body: () async throws -> Void) async throws {
        let started = ContinuousClock.now
        // The summary and byte counts are this operation's once it runs (each operation resets
        // them when it starts); a failure may come before, or from another operation running
        // (busy), so its record carries none of them.
        func metadata(summary: Bool) -> Logger.Metadata {
            var metadata = summary ? operationSummary : [:]
            metadata["operation"] = .string(operation)
            metadata["duration-ms"] = .stringConvertible((ContinuousClock.now - started).milliseconds)
            if summary {
                metadata["bytes-sent"] = .stringConvertible(bytesSent)
                metadata["bytes-received"] = .stringConvertible(bytesReceived)
            }
            return metadata
        }
        do {
            try await body()
            logger.info("Offline operation finished", metadata: metadata(summary: true))
        } catch is CancellationError {
            logger.notice("Offline operation cancelled", metadata: metadata(summary: false))
            throw CancellationError()
        } catch {
            var details = metadata(summary: false)
            if let error = error as? OfflineODataError {
                details["error-code"] = .string(error.code.rawValue)
                if let status = error.httpStatus { details["status"] = .stringConvertible(status) }
            }
            logger.error("Offline operation failed", metadata: details)
            logger.trace("Offline operation failure detail", metadata: ["error": .string(String(describing: error))])
            throw error
        }
    }

    /// Opens the store. The first time: fetches `$metadata`, creates the store and runs every
    /// defining query. Later: only opens the file, checking the key. Cancelling the `Task`
    /// ends it with `CancellationError` and leaves no half-made store.
    public func open() async throws {
        // An open that is handing the store to its user finishes first.
        while switchingUsers { try await Task.sleep(nanoseconds: 10_000_000) }
        guard store == nil else { return }
        try await tracked(.open) { try await logged("open") { try await cancellable { try await openStoreFile() } } }
    }

    private func openStoreFile() async throws {
        guard store == nil else { return }
        operationSummary = [:]
        bytesSent = 0
        bytesReceived = 0
        _ = try parameters.extraStreamOptions()
        let path = parameters.storeFile
        let folder = (path as NSString).deletingLastPathComponent
        if !FileManager.default.fileExists(atPath: folder) {
            do {
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            } catch {
                throw OfflineODataError(
                    .invalidParameter, "The store folder \(folder) cannot be created: \(error.localizedDescription)")
            }
        }
        let migrationMarker = StoreFiles.migrationMarker(path)
        if FileManager.default.fileExists(atPath: migrationMarker) {
            // A migration to a changed $metadata ended before its new store replaced the old
            // one (which then has its whole queue), or just after (the marker outlived it): what
            // is left of the new store goes; the next download migrates again.
            logger.notice(
                "A store migration was interrupted; its new store is discarded", metadata: ["store": .string(path)])
            StoreFiles.remove(StoreFiles.migratingStore(path))
            try? FileManager.default.removeItem(atPath: migrationMarker)
        }
        if FileManager.default.fileExists(atPath: StoreFiles.fillingMarker(path)) {
            // A first open that never finished: its store may even be damaged (it is filled
            // without a durable journal). It is made again from the backend; nothing local
            // can be lost, since no local change can be made before the first open succeeds.
            try refuseUnfinishedWithoutDefiningQueries(path)
            StoreFiles.remove(path)
            try await createAndFill(path)
        } else if FileManager.default.fileExists(atPath: path) {
            operationSummary["store"] = "opened"
            try await openExisting(path)
            if parameters.checksMetadataAtOpen { try await followMetadataAtOpen(path) }
        } else {
            operationSummary["store"] = "created"
            try await createAndFill(path)
        }
        try await followCurrentUser()
        try await finishRemovingDefiningQueries()
        operationSummary["defining-queries"] = .stringConvertible(definingQueries.count)
    }

    /// Checks the backend's `$metadata` when an existing store opens and migrates the store when
    /// it changed (``OfflineODataParameters/checksMetadataAtOpen``). Any failure leaves the
    /// store open as it was: it is logged, and the next download checks again.
    private func followMetadataAtOpen(_ path: String) async throws {
        // Uploads, downloads and queue rewrites wait for the check, as for a download.
        guard let opened = store, !busy else { return }
        busy = true
        defer { busy = false }
        do {
            guard let fetched = try await MetadataMigration.check(store: opened, on: self) else { return }
            let change: OfflineODataMetadataChange
            if fetched.isBreaking {
                let progress = reporter(.open, MetadataMigration.breakingPlan)
                report(progress, .loadingMetadata)
                change = try await MetadataMigration.rebuild(fetched, old: opened, progress: progress, on: self)
            } else {
                let progress = reporter(.open, [.loadingMetadata, .buildingEntityStore])
                report(progress, .loadingMetadata)
                report(progress, .buildingEntityStore)
                let migrated: Store
                (migrated, change) = try await MetadataMigration.migrateInPlace(
                    fetched, store: opened, queries: definingQueries)
                store = migrated
                serviceVersion = migrated.model.version
                coveredSetsCache = nil
            }
            operationSummary["metadata"] = .string(change.summary)
            emit(.metadataChanged(change))
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            logger.warning(
                "Checking the backend's $metadata at open failed; the store opened as it was",
                metadata: ["error": .string("\(error)")])
            // A migration that failed after it closed the store reopens it; when even that
            // fails, the open fails with the reason.
            if store == nil { try await openExisting(path) }
        }
    }

    /// A store whose first fill never finished is made again from the defining queries; a
    /// provider without them (a tool that only reads or uploads) must not make it complete and
    /// empty: it says what happened and leaves the store for an open with its queries.
    private func refuseUnfinishedWithoutDefiningQueries(_ path: String) throws {
        guard definingQueries.isEmpty else { return }
        // The unfinished fill had no defining queries either (an app that starts from an empty
        // store): making it again with none loses nothing.
        if let marker = FileManager.default.contents(atPath: StoreFiles.fillingMarker(path)),
            String(decoding: marker, as: UTF8.self) == "0"
        {
            return
        }
        throw OfflineODataError(
            .store,
            "The first open of \(path) ended before the store was filled; open it again with its "
                + "defining queries to fill it (no local change was made before, so nothing is lost)")
    }

    /// Opens the store at `path`. `installing`: a store file from a gateway, marked unfinished
    /// until the download of what it lacks completes (see ``fillFromServerBuiltStore``).
    func openExisting(_ path: String, installing: Bool = false) async throws {
        var opened = try await StoreFiles.open(path, key: parameters.storeEncryptionKey)
        // A first open that never finished (the process ended while it filled the store) left
        // a store without all its data: it is made again from the backend. Nothing local is
        // lost, since no local change can be made before the first open succeeds.
        let state = try await opened.read { reader in try LocalSchema.state(reader.connection) }
        guard state.isOfflineStore else {
            opened.close()
            throw OfflineODataError(
                .store,
                "\(path) is not an offline store, or its first open ended before the store was set up; clear() removes it"
            )
        }
        if state.unfinished, !installing {
            opened.close()
            try refuseUnfinishedWithoutDefiningQueries(path)
            StoreFiles.remove(path)
            try await createAndFill(path)
            return
        }
        let stored = try await opened.read { reader in try DefiningQueries.load(reader.connection) }
        do {
            let proposed = clientInstanceID
            clientInstanceID = try await opened.write { writer in
                try LocalSchema.upgrade(writer)
                // A store built on a gateway came with the builder's: this device takes its own.
                return try LocalSchema.clientInstanceID(writer, proposed: proposed, replacing: installing)
            }
            opened = try await LocalSchema.addingUserProperties(to: opened)
        } catch let error as DatabaseError where Self.isDiskFull(error) {
            // A full disk must not lock the user out of the data: the store opens for reading
            // (the upgrade is made at the next open with space; writes report `diskFull`).
            logger.warning(
                "The disk that holds the store is full: opened without its upgrade step; writes will fail",
                metadata: ["store": .string(path)])
        }
        let added = definingQueries.filter { query in !stored.contains { $0.name == query.name } }
        for (offset, query) in added.enumerated() {
            let ordinal = stored.count + offset + 1
            try await opened.write { writer in try DefiningQueries.insert(query, ordinal: ordinal, writer) }
        }
        definingQueries = stored + added
        coveredSetsCache = nil
        // The indexes asked for now, and those of the defining queries: changed declarations
        // drop or build indexes here.
        if let declared = parameters.indexes {
            do {
                opened = try await opened.applying(
                    indexes: DefiningQueries.indexes(declared: declared, queries: definingQueries, model: opened.model))
            } catch {
                opened.close()
                throw error
            }
        }
        serviceVersion = opened.model.version
        store = opened
    }

    private func createAndFill(_ path: String) async throws {
        // Steps in the order they happen. Pages go into the new store as they arrive (memory
        // stays flat); any failure deletes the file, so a backend error leaves nothing behind.
        var progress = reporter(
            .open,
            [
                .loadingMetadata, .creatingBootStrapDatabase, .creatingRequestQueueDatabase, .processingDefiningQueries,
                .receivingDataFromServer, .buildingEntityStore, .analyzingReceivedData,
            ])
        report(progress, .loadingMetadata)
        let metadata = try await send(
            method: "GET", url: try withStreamParameters("$metadata"), headers: ["Accept": "application/xml"],
            expect: 200)
        // Downloads compare the backend's $metadata with this one (SPEC §14).
        let metadataHash = MetadataMigration.hash(metadata.body)
        let metadataETag = metadata.headers["ETag"]
        func recordMetadata() async throws {
            try await store?.write { writer in
                try LocalSchema.recordMetadata(writer, hash: metadataHash, etag: metadataETag)
            }
        }
        let backendModel: Model
        do {
            backendModel = try MetadataParser().parse(Data(metadata.body))
        } catch {
            throw OfflineODataError(
                .backend, "The backend's $metadata at \(serviceRoot)$metadata is not valid: \(error)")
        }
        serviceVersion = backendModel.version
        let model = try LocalSchema.extend(backendModel)
        for query in definingQueries { _ = try DefiningQueries.entitySet(of: query.query, model: model) }
        // Through a sync gateway, the store may come built (issue 37): the open's steps then
        // include its download, and those of the download of what it lacks.
        if throughGateway, parameters.acceptsServerBuiltStore, !definingQueries.isEmpty {
            progress = ProgressReporter(
                operation: .open, plan: Self.gatewayOpenPlan, language: messageLanguage, passed: progress.passed)
            if try await fillFromServerBuiltStore(at: path, model: model, progress: progress) {
                try await recordMetadata()
                return
            }
        }
        report(progress, .creatingBootStrapDatabase)
        let downloader = Downloader(serviceRoot: serviceRoot, progress: progress)
        store = try await downloader.fillNewStore(at: path, model: model, key: parameters.storeEncryptionKey, on: self)
        try await recordMetadata()
        // A store file a gateway offered and that was not taken is of no use any more.
        ServerBuiltStore.removeDownload(path)
    }

    /// The steps of a first open through a sync gateway: those of a paged open, and those of a
    /// store file built by the gateway followed by the download of what it lacks.
    public static let gatewayOpenPlan: [OfflineODataProgressStep] = [
        .loadingMetadata, .creatingBootStrapDatabase, .downloadingEntityStore, .creatingRequestQueueDatabase,
        .processingDefiningQueries, .receivingDataFromServer, .buildingEntityStore, .analyzingReceivedData,
        .removingDeletedRelationships, .reapplyingChanges,
    ]

    /// Frees the memory the store's page caches hold (with a key, up to 32 MiB for each of its
    /// connections, which keep what reads and writes brought in). Nothing is closed: reads and
    /// writes go on, and the caches fill again as they need. Call it when the system asks the
    /// app for memory (a memory warning, the app going to the background), as with GRDB's
    /// `releaseMemory()`. A download frees the readers' caches itself when it starts. Does
    /// nothing while the store is closed.
    public func releaseMemory() async {
        await store?.releaseMemory()
    }

    /// The bytes the store's page caches hold now; 0 while the store is closed.
    public func storeCacheBytes() async -> Int {
        await store?.pageCacheBytes() ?? 0
    }

    /// Closes the store; a later `open()` reopens it.
    public func close() {
        keyMapCache = nil
        coveredSetsCache = nil
        let wasOpen = store != nil
        store?.close()
        store = nil
        // Live queries read again, fail (the store is closed) and end with that error.
        if wasOpen { publishChange(OfflineODataStoreChange(origin: .closed, entitySets: nil)) }
    }

    /// Closes and deletes the store files, without contacting anyone.
    public func clear() {
        close()
        StoreFiles.remove(parameters.storeFile)
        StoreFiles.remove(StoreFiles.migratingStore(parameters.storeFile))
        try? FileManager.default.removeItem(atPath: StoreFiles.migrationMarker(parameters.storeFile))
        ServerBuiltStore.removeDownload(parameters.storeFile)
    }

    func openStore() throws -> Store {
        guard let store else { throw OfflineODataError(.notOpen, "The offline store is not open; call open() first") }
        if switchingUsers, !UserSwitchTurn.held {
            throw OfflineODataError(
                .notOpen,
                "The offline store is changing hands to user \(parameters.currentUser ?? "?"); wait for open()")
        }
        return store
    }

    /// The open store, for an upload, a download or a queue rewrite: only one of them runs at a
    /// time. Marks it running; the caller clears `busy` when it ends.
    func beginExclusive() throws -> Store {
        let store = try openStore()
        guard !busy else { throw OfflineODataError(.invalidRequest, "Another upload or download is running") }
        busy = true
        return store
    }

    /// The store's model: the backend's, with ErrorArchive, RequestQueue and EventLog.
    public var model: Model {
        get throws { try openStore().model }
    }

    // MARK: Queue state

    /// Whether no request waits for upload.
    public var isRequestQueueEmpty: Bool {
        get async throws {
            let store = try openStore()
            return try await store.read { reader in try LocalSchema.isQueueEmpty(reader.connection) }
        }
    }

    /// Whether changes wait for upload (the same as `!isRequestQueueEmpty`).
    public var hasPendingUpload: Bool {
        get async throws { try await !isRequestQueueEmpty }
    }

    /// Adds an EventLog row; a download's (redoable: the next download writes its own) does
    /// not wait for the disk.
    func logEvent(
        in store: Store, type: String, details: String, durability: Store.CommitDurability = .durable
    ) async throws {
        let now = Self.timestamp()
        try await store.write(durability) { writer in
            try LocalSchema.logEvent(writer, type: type, details: details, time: now)
        }
    }

    /// Now, to the second, in UTC (built without a Foundation formatter, which loads ICU).
    static func timestamp() -> Value {
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        return .primitive(.dateTimeOffset(DateTimeOffsetValue(now)))
    }
}

extension OfflineODataProvider {
    /// The service root an existing store was created for (nil when there is no store yet).
    public static func storedServiceRoot(parameters: OfflineODataParameters) async throws -> URL? {
        try await storedSummary(parameters: parameters)?.serviceRoot
    }

    /// What an existing store says of itself, read in one transaction without opening it as a
    /// provider (nothing is changed, fetched or filled): the service root it was made for and
    /// the names of its defining queries. Nil when there is no store yet. Throws when the first
    /// open of the store was stopped before it was filled (open it again with its defining
    /// queries), or when the file is not an offline store.
    public static func storedSummary(
        parameters: OfflineODataParameters
    ) async throws -> (serviceRoot: URL?, definingQueryNames: [String])? {
        let path = parameters.storeFile
        if let marker = FileManager.default.contents(atPath: StoreFiles.fillingMarker(path)) {
            // A fill that had no defining queries is made again by `open` without them: no store yet.
            if String(decoding: marker, as: UTF8.self) == "0" { return nil }
            throw OfflineODataError(
                .store,
                "The first open of \(path) was stopped before the store was filled; open it again with its defining "
                    + "queries (`oodata offline open … --define …`) to fill it: no local change was made before, so nothing is lost"
            )
        }
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        let store: Store
        do {
            store = try await StoreFiles.open(path, key: parameters.storeEncryptionKey)
        } catch let error as OfflineODataError {
            throw error
        } catch {
            throw OfflineODataError(.store, "The store \(path) cannot be opened: \(error)")
        }
        defer { store.close() }
        let state = try await store.read { reader in try LocalSchema.state(reader.connection) }
        guard state.isOfflineStore else {
            throw OfflineODataError(
                .store,
                "\(path) is not an offline store: it has no request queue or defining queries (a store made by "
                    + "`oodata store init` is read with `oodata store query`), or its first open ended before it was set up"
            )
        }
        let (root, names) = try await store.read { reader in
            (try LocalSchema.serviceRoot(reader.connection), try DefiningQueries.load(reader.connection).map(\.name))
        }
        return (root.flatMap(URL.init(string:)), names)
    }
}
