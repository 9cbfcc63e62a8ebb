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
        if let supportKey, supportKey == parameters.storeEncryptionKey {
            throw OfflineODataError(
                .invalidRequest,
                "The support key is the store's own key: the copy would open with the app's key; give a key of its own")
        }
        guard chunkSize > 0 else { throw OfflineODataError(.invalidRequest, "chunkSize must be positive") }
        let sender = StoreSender(
            store: store, storeFile: parameters.storeFile, progress: reporter(.sendStore, [.sendingEntityStoreDatabase])
        )
        try await sender.send(to: url, supportKey: supportKey, chunkSize: chunkSize, on: self)
    }
}
