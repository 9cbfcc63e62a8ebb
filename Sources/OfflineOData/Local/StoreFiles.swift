import Foundation
import ODataStore

/// The files of an offline store: opening one with errors an app can act on, the marker of
/// an unfinished first fill, and removing a store with its journals.
enum StoreFiles {
    /// Opens the store at `path`; a failure says whether the key is wrong, the file busy or
    /// damaged (see ``openFailure(_:_:)``).
    static func open(_ path: String, key: String?) async throws -> Store {
        do {
            return try await Store.open(path: path, key: key)
        } catch let error as DatabaseError {
            throw openFailure(error, path)
        } catch let error as StoreError {
            throw OfflineODataError(.store, "The store \(path) cannot be opened: \(error)")
        }
    }

    /// The provider error for a store that cannot be opened: only a key problem is `wrongKey`,
    /// so that an app does not ask for the passcode again (or wipe the store) when the file is
    /// merely busy or damaged.
    static func openFailure(_ error: DatabaseError, _ path: String) -> OfflineODataError {
        switch error.code {
        case .invalidEncryptionKey:
            return OfflineODataError(
                .wrongKey, "The store \(path) cannot be opened with the given key: \(error.message)")
        case .busy:
            return OfflineODataError(
                .storeBusy, "The store \(path) is locked by another process or connection: \(error.message)")
        case .emptyFile, .truncated, .corrupt:
            return OfflineODataError(.storeDamaged, "The store \(path) is damaged: \(error.message)")
        default:
            return OfflineODataError(.store, "The store \(path) cannot be opened: \(error.message)")
        }
    }

    /// The file that exists while a first open fills the store at `path`.
    static func fillingMarker(_ path: String) -> String { path + "-filling" }

    /// Where a migration to a changed `$metadata` builds the new store (SPEC §14).
    static func migratingStore(_ path: String) -> String { path + "-migrating" }

    /// The file that exists while a migration may have a new store beside the store at `path`:
    /// an open that finds it removes that new store (see `MetadataMigration`).
    static func migrationMarker(_ path: String) -> String { path + "-migration" }

    /// Deletes the store at `path` with its journals and its filling marker.
    static func remove(_ path: String) {
        for suffix in ["", "-wal", "-shm", "-journal", "-filling"] {
            try? FileManager.default.removeItem(atPath: path + suffix)
        }
    }
}
