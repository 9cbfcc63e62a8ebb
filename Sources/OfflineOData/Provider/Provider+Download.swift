import Foundation
import ODataCore
import ODataStore

extension OfflineODataProvider {
    /// Downloads the changes for every defining query, or only those named, then reapplies the
    /// pending local changes. A backend failure leaves the store as it was, and so does
    /// cancelling the `Task` (it ends with `CancellationError`).
    public func download(definingQueries names: [String]? = nil) async throws {
        try await tracked(.download) {
            try await logged("download") {
                try await cancellable { try await reportingDiskFull { try await runDownload(definingQueries: names) } }
            }
        }
    }

    private func runDownload(definingQueries names: [String]?) async throws {
        var store = try beginExclusive()
        defer { busy = false }
        cancelDownloadRequested = false
        operationSummary = [:]
        bytesSent = 0
        bytesReceived = 0
        if let names {
            let unknown = names.filter { name in !definingQueries.contains { $0.name == name } }
            if !unknown.isEmpty {
                throw OfflineODataError(
                    .unknownDefiningQuery, "No defining query named \(unknown.joined(separator: ", "))")
            }
        }
        // Every download checks the backend's $metadata first (SPEC §14); a change adds its
        // steps to the operation's total.
        var progress = reporter(.download, Downloader.plan)
        if let fetched = try await MetadataMigration.check(store: store, on: self) {
            // A new store, downloaded whole and with the queue replayed: nothing else to read.
            func rebuild(passed: Int) async throws {
                let rebuilding = ProgressReporter(
                    operation: .download, plan: MetadataMigration.breakingPlan, language: messageLanguage,
                    passed: passed)
                report(rebuilding, .loadingMetadata)
                let change = try await MetadataMigration.rebuild(fetched, old: store, progress: rebuilding, on: self)
                keyMapCache = nil
                metadataChanged(change)
            }
            if fetched.isBreaking { return try await rebuild(passed: 0) }
            progress = reporter(.download, MetadataMigration.additivePlan)
            report(progress, .loadingMetadata)
            report(progress, .buildingEntityStore)
            let migrated: Store
            let change: OfflineODataMetadataChange
            do {
                (migrated, change) = try await MetadataMigration.migrateInPlace(
                    fetched, store: store, queries: definingQueries)
            } catch let error as StoreError where error.code == .conflict {
                // The store's file cannot take it in place after all: a new store, then.
                logger.notice(
                    "The store cannot take the $metadata change in place; building a new store",
                    metadata: ["reason": .string(error.message)])
                return try await rebuild(passed: progress.passed)
            }
            store = migrated
            self.store = migrated
            serviceVersion = migrated.model.version
            coveredSetsCache = nil
            metadataChanged(change)
        }
        var selected = names.map { wanted in definingQueries.filter { wanted.contains($0.name) } } ?? definingQueries
        // Queries that no longer bind to the backend's model are left out, and said so.
        var leftOut: [String] = []
        selected.removeAll { query in
            guard let problem = DefiningQueries.bindingProblem(of: query.query, model: store.model) else {
                return false
            }
            logger.warning(
                "A defining query no longer binds to the backend's $metadata; it is left out of the download",
                metadata: ["defining-query": .string(query.name), "problem": .string(problem)])
            leftOut.append(query.name)
            return true
        }
        if !leftOut.isEmpty { operationSummary["left-out"] = .string(leftOut.joined(separator: ",")) }
        var downloader = Downloader(serviceRoot: serviceRoot, progress: progress)
        if parameters.durableDownloads { downloader.durability = .durable }
        try await downloader.run(selected, store: store, on: self)
        // The download forgot the local keys no queued request needs.
        keyMapCache = nil
    }

    /// Tells the app and the log what a migration to a changed `$metadata` did.
    private func metadataChanged(_ change: OfflineODataMetadataChange) {
        operationSummary["metadata"] = .string(change.summary)
        logger.notice(
            "The backend's $metadata changed; the store follows it",
            metadata: [
                "kind": .string(change.kind.rawValue),
                "changes": .string(change.changes.map(\.description).joined(separator: "; ")),
            ])
        emit(.metadataChanged(change))
    }

    /// Asks a running download to stop at the next safe point; nothing is half-applied.
    public func cancelDownload() { cancelDownloadRequested = true }
}
