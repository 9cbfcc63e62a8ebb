import Foundation
import ODataCore
import ODataStore

extension OfflineODataProvider {
    /// Sends a copy of the store to `url` for support (SPEC §3 `sendStore`): a consistent copy
    /// is made while the store stays usable, then sent in chunks of `chunkSize` bytes, each a
    /// `POST` with `Content-Range: bytes <first>-<last>/<total>` and the provider's custom
    /// headers and cookies (the reference server takes them at `/support/stores/<name>`).
    ///
    /// An encrypted store is never sent with the app's key: the copy is encrypted with
    /// `supportKey`, which must then be given. An unencrypted store is sent unencrypted, or
    /// encrypted with `supportKey` when one is given. Progress: `sendingEntityStoreDatabase`
    /// with sent and total bytes (the request queue is in the same file).
    public func sendStore(to url: String, supportKey: String? = nil, chunkSize: Int = 1 << 20) async throws {
        let store = try openStore()
        if parameters.storeEncryptionKey != nil, supportKey == nil {
            throw OfflineODataError(
                .invalidRequest,
                "The store is encrypted: sendStore sends a copy encrypted with a support key, never with the app's key; give supportKey"
            )
        }
        if supportKey?.isEmpty == true { throw OfflineODataError(.invalidRequest, "The support key must not be empty") }
        guard chunkSize > 0 else { throw OfflineODataError(.invalidRequest, "chunkSize must be positive") }
        let progress = reporter(.sendStore, [.sendingEntityStoreDatabase])
        let copy = parameters.storeFile + ".support-\(GuidValue.random())"
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
        guard let handle = FileHandle(forReadingAtPath: copy),
            let total = (try? FileManager.default.attributesOfItem(atPath: copy)[.size] as? NSNumber)?.int64Value,
            total > 0
        else {
            throw OfflineODataError(.store, "The copy of the store for support at \(copy) cannot be read")
        }
        defer { try? handle.close() }
        var sent: Int64 = 0
        report(progress, .sendingEntityStoreDatabase, ["sentBytes": "0", "totalBytes": "\(total)"])
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
            _ = try await send(
                method: "POST", url: url,
                headers: [
                    "Content-Type": "application/octet-stream", "Content-Range": "bytes \(sent)-\(last)/\(total)",
                ],
                body: Array(chunk), expect: 200)
            sent = last + 1
            report(progress, .sendingEntityStoreDatabase, ["sentBytes": "\(sent)", "totalBytes": "\(total)"])
        }
        try await logEvent(in: store, type: "SendStore", details: "\(total) bytes sent to \(url)")
    }
}
