import Foundation
import ODataCore
import ODataStore

/// Sends a copy of the store for support (``OfflineODataProvider/sendStore(to:supportKey:chunkSize:)``):
/// a consistent copy, re-keyed with the support key, in chunks with `Content-Range`, through
/// the provider's transport. The copy is deleted afterwards whatever happens.
struct StoreSender {
    let store: Store
    let storeFile: String
    let progress: ProgressReporter

    func send(
        to url: String, supportKey: String?, chunkSize: Int, on provider: isolated OfflineODataProvider
    ) async throws {
        let copy = storeFile + ".support-\(GuidValue.random())"
        defer {
            for suffix in ["", "-journal", "-wal", "-shm"] {
                try? FileManager.default.removeItem(atPath: copy + suffix)
            }
        }
        do {
            try await store.exportCopy(to: copy, key: supportKey)
        } catch {
            throw OfflineODataError(.store, "A copy of the store for support could not be made: \(error)")
        }
        try await sendFile(copy, to: url, chunkSize: chunkSize, on: provider)
    }

    /// Sends the file at `copy` to `url` in chunks (the provider logs it as `SendStore`).
    func sendFile(
        _ copy: String, to url: String, chunkSize: Int, on provider: isolated OfflineODataProvider
    ) async throws {
        guard let handle = FileHandle(forReadingAtPath: copy),
            let total = (try? FileManager.default.attributesOfItem(atPath: copy)[.size] as? NSNumber)?.int64Value,
            total > 0
        else {
            throw OfflineODataError(.store, "The copy of the store for support at \(copy) cannot be read")
        }
        defer { try? handle.close() }
        var sent: Int64 = 0
        provider.report(progress, .sendingEntityStoreDatabase, ["sentBytes": "0", "totalBytes": "\(total)"])
        while sent < total {
            let chunk: Data
            do {
                chunk = try handle.read(upToCount: chunkSize) ?? Data()
            } catch {
                throw OfflineODataError(
                    .store, "The copy of the store for support could not be read at byte \(sent): \(error)")
            }
            guard !chunk.isEmpty else {
                throw OfflineODataError(.store, "The copy of the store for support ended at byte \(sent) of \(total)")
            }
            let last = sent + Int64(chunk.count) - 1
            _ = try await provider.send(
                method: "POST", url: url,
                headers: [
                    "Content-Type": "application/octet-stream", "Content-Range": "bytes \(sent)-\(last)/\(total)",
                ],
                body: Array(chunk), expect: 200)
            sent = last + 1
            provider.report(progress, .sendingEntityStoreDatabase, ["sentBytes": "\(sent)", "totalBytes": "\(total)"])
        }
        try await provider.logEvent(in: store, type: "SendStore", details: "\(total) bytes sent to \(url)")
    }
}
