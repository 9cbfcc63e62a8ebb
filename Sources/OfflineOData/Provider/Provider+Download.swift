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

    func runDownload(definingQueries names: [String]?) async throws {
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
        // Queries being removed are not read again (their data goes once the queue is empty),
        // except by a user switch: every row the new user keeps must be theirs to read.
        var selected = (names.map { wanted in definingQueries.filter { wanted.contains($0.name) } } ?? definingQueries)
            .filter { !$0.isRemoving || UserSwitchTurn.held }
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
        await refreshSharedDevicePolicy(store)
        try await finishRemovingDefiningQueries()
        await noteInDoubtResolutions(store: store)
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

extension OfflineODataProvider {
    /// Through a sync gateway: asks it what an operator decided of the requests in the
    /// ErrorArchive as `RequestInDoubt` (`GET $oodata/requests/<repeatable-request ID>`, which
    /// answers only this device's credentials), and writes the answer into each entry's
    /// `Message`. Best effort, after the download succeeded: a failure is logged.
    func noteInDoubtResolutions(store: Store) async {
        guard throughGateway else { return }
        let prefix = Self.resolvedInDoubtPrefix
        let entries: [(request: Int64, repeatID: String, message: String)]
        do {
            entries = try await store.read { reader in
                guard let table = reader.schema.table(forEntitySet: LocalSchema.errorArchive)?.name else { return [] }
                let rows = try reader.connection.query(
                    """
                    SELECT e."RequestID", q.repeat_id, coalesce(e."Message", '') FROM \(StoreSchema.quote(table)) AS e
                    JOIN oo_queue AS q ON q.id = e."RequestID"
                    WHERE e."Code" = 'RequestInDoubt' AND q.repeat_id IS NOT NULL
                      AND substr(coalesce(e."Message", ''), 1, ?) <> ?
                    LIMIT 100
                    """, [.integer(Int64(prefix.count)), .text(prefix)])
                return rows.compactMap { row in
                    guard case .integer(let id) = row[0], case .text(let repeatID) = row[1],
                        case .text(let message) = row[2]
                    else { return nil }
                    return (id, repeatID, message)
                }
            }
        } catch {
            logger.notice("The ErrorArchive's requests in doubt could not be read", metadata: ["error": "\(error)"])
            return
        }
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/?#%")
        // A download is not held up by it: ten seconds in all (each request within what is
        // left), and a throttled gateway (429) ends it until the next download.
        let deadline = ContinuousClock.now + .seconds(10)
        for entry in entries {
            let left = deadline - ContinuousClock.now
            guard left > .milliseconds(100) else { break }
            let seconds = min(5, Double(left.components.seconds) + Double(left.components.attoseconds) / 1e18)
            guard let path = entry.repeatID.addingPercentEncoding(withAllowedCharacters: allowed),
                let response = try? await send(
                    method: "GET", url: "$oodata/requests/" + path, timeout: seconds, retryThrottled: false)
            else { continue }
            if response.status == 429 { break }
            guard response.status == 200,
                let object = try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any],
                let word = object["resolution"] as? String, word == "applied" || word == "notApplied"
            else { continue }
            let when = (object["resolvedAt"] as? String).map { " on \($0)" } ?? ""
            let said =
                word == "applied"
                ? "applied: the change is in the backend; nothing needs to be sent again"
                : "not applied: the backend does not have the change; make it again if it is still wanted"
            let message = prefix + said + when + ". " + entry.message
            do {
                try await store.write { writer in
                    guard let table = writer.schema.table(forEntitySet: LocalSchema.errorArchive)?.name else { return }
                    _ = try writer.connection.execute(
                        "UPDATE \(StoreSchema.quote(table)) SET \"Message\" = ? WHERE \"RequestID\" = ?",
                        [.text(message), .integer(entry.request)])
                }
                logger.notice(
                    "A request in doubt was resolved by the gateway's operator",
                    metadata: ["request": .stringConvertible(entry.request), "resolution": .string(word)])
            } catch {
                logger.notice("An ErrorArchive entry could not be updated", metadata: ["error": "\(error)"])
            }
        }
    }

    /// How an ErrorArchive entry's `Message` starts once the gateway's operator resolved it.
    static let resolvedInDoubtPrefix = "Resolved by the gateway's operator as "
}
