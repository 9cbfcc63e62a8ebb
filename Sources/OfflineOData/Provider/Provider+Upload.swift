import Foundation
import ODataCore
import ODataStore

extension OfflineODataProvider {
    /// Sends the queue in order (only requests of `categories`, when given). Requests the
    /// backend rejects go to the ErrorArchive and the upload goes on; a dropped connection
    /// throws and leaves the unanswered requests queued, to be resent with the same
    /// repeatability IDs. Cancelling the `Task` aborts the batch in flight and ends the upload
    /// with `CancellationError`; what was not answered stays queued and is resent later with
    /// the same repeatability IDs (so the backend applies it once).
    public func upload(categories: [String]? = nil) async throws {
        try await tracked(.upload) {
            try await logged("upload") {
                try await cancellable { try await reportingDiskFull { try await runUpload(categories: categories) } }
            }
        }
    }

    func runUpload(categories: [String]?) async throws {
        let store = try beginExclusive()
        defer { busy = false }
        cancelUploadRequested = false
        operationSummary = [:]
        bytesSent = 0
        bytesReceived = 0
        let uploader = Uploader(
            store: store, serviceRoot: serviceRoot, parameters: parameters,
            progress: reporter(.upload, Uploader.plan(parameters)))
        try await uploader.run(categories: categories, on: self)
        try await finishRemovingDefiningQueries()
    }

    /// Asks a running upload to stop after the batch in flight; nothing is lost.
    public func cancelUpload() { cancelUploadRequested = true }

    /// Runs the queue algorithms the parameters turn on (SPEC §6.1 and §6.2) now rather than
    /// at the next upload, so that the RequestQueue shows their result. Returns how many
    /// queued requests they removed.
    @discardableResult
    public func applyQueueAlgorithms() async throws -> Int {
        let store = try beginExclusive()
        defer { busy = false }
        let before = try await store.read { reader in try RequestQueue.load(reader.connection, status: "pending").count
        }
        let uploader = Uploader(
            store: store, serviceRoot: serviceRoot, parameters: parameters,
            progress: reporter(.upload, Uploader.algorithmSteps(parameters)))
        let units = try await uploader.prepareQueue(categories: nil, on: self)
        return before - units.reduce(0) { $0 + $1.count }
    }
}
