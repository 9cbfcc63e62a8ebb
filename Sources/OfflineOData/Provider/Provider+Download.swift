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
        let store = try beginExclusive()
        defer { busy = false }
        cancelDownloadRequested = false
        operationSummary = [:]
        bytesSent = 0
        bytesReceived = 0
        let selected = names.map { wanted in definingQueries.filter { wanted.contains($0.name) } } ?? definingQueries
        if let names, selected.count != names.count {
            let unknown = names.filter { name in !definingQueries.contains { $0.name == name } }
            throw OfflineODataError(.unknownDefiningQuery, "No defining query named \(unknown.joined(separator: ", "))")
        }
        let downloader = Downloader(
            serviceRoot: serviceRoot, progress: reporter(.download, Downloader.plan))
        try await downloader.run(selected, store: store, on: self)
        // The download forgot the local keys no queued request needs.
        keyMapCache = nil
    }

    /// Asks a running download to stop at the next safe point; nothing is half-applied.
    public func cancelDownload() { cancelDownloadRequested = true }
}
