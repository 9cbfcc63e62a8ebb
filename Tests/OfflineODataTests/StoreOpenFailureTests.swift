import Foundation
import ODataCore
import ODataServer
import ODataStore
import Testing
@testable import OfflineOData

/// Issue 19, defect 7: only a key problem is `wrongKey`. An empty, cut-off or damaged file is
/// `storeDamaged` and a locked one `storeBusy` (after waiting), so an app does not ask for the
/// passcode again — or wipe the store — when the file is merely busy or damaged.
@Suite(.serialized) struct StoreOpenFailureTests {
    /// A connection handed to one other task at a time.
    final class Holder: @unchecked Sendable {
        let connection: Connection
        init(_ connection: Connection) { self.connection = connection }
    }

    /// A filled, closed, keyed offline store; returns its file.
    static func filledStore(_ fixture: Fixture) async throws -> String {
        let provider = try await fixture.provider()
        try await provider.open()
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"1"}"#.utf8))
        await provider.close()
        return fixture.parameters().storeFile
    }

    /// The provider error of opening the store at its path with `key`.
    static func openError(_ fixture: Fixture, key: String? = "offline-key") async throws -> OfflineODataError? {
        let provider = try await fixture.provider(parameters: fixture.parameters(key: key))
        do {
            try await provider.open()
            await provider.close()
            return nil
        } catch let error as OfflineODataError {
            return error
        }
    }

    static func bytes(_ path: String) throws -> [UInt8] { [UInt8](try Data(contentsOf: URL(fileURLWithPath: path))) }
    static func write(_ bytes: [UInt8], _ path: String) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        // The damage is in the main file; no log may stand in for it.
        try? FileManager.default.removeItem(atPath: path + "-wal")
        try? FileManager.default.removeItem(atPath: path + "-shm")
    }

    @Test func eachFailureHasItsOwnCode() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let path = try await Self.filledStore(fixture)
        let good = try Self.bytes(path)
        #expect(good.count % Connection.cipherPageSize == 0 && good.count >= 4 * Connection.cipherPageSize)

        // A wrong key, and no key for a keyed store.
        let wrong = try #require(try await Self.openError(fixture, key: "not-the-key"))
        #expect(wrong.code == .wrongKey, "\(wrong)")
        #expect(try await Self.openError(fixture, key: nil)?.code == .wrongKey)
        #expect(try await Self.openError(fixture) == nil)

        // Zero bytes.
        try Self.write([], path)
        let empty = try #require(try await Self.openError(fixture))
        #expect(empty.code == .storeDamaged && empty.message.contains("empty (0 bytes)"), "\(empty)")

        // Cut off inside a page, and cut off at a page boundary.
        try Self.write(Array(good.dropLast(100)), path)
        let inPage = try #require(try await Self.openError(fixture))
        #expect(inPage.code == .storeDamaged && inPage.message.contains("cut off"), "\(inPage)")
        try Self.write(Array(good.prefix(good.count - 2 * Connection.cipherPageSize)), path)
        let atBoundary = try #require(try await Self.openError(fixture))
        // At a page boundary the file looks whole (WAL stores keep no valid page count in their
        // header): the missing pages show as a damaged database.
        #expect(atBoundary.code == .storeDamaged && atBoundary.message.contains("damaged"), "\(atBoundary.message)")

        // A damaged page after the first: the key is right (page 1 reads), the file is not.
        var damaged = good
        for page in 1..<(good.count / Connection.cipherPageSize) {
            damaged[page * Connection.cipherPageSize + 200] ^= 0xFF
        }
        try Self.write(damaged, path)
        let broken = try #require(try await Self.openError(fixture))
        #expect(broken.code == .storeDamaged, "\(broken)")

        // The original file opens again, with its queued change.
        try Self.write(good, path)
        let provider = try await fixture.provider()
        try await provider.open()
        #expect(try await !provider.isRequestQueueEmpty)
        await provider.close()
    }

    @Test func aLockedStoreIsWaitedForThenCalledBusy() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let path = try await Self.filledStore(fixture)
        // Another process's connection holds the store locked (an exclusive transaction).
        let holder = Holder(try Connection(path: path, options: .init(key: "offline-key")))
        try holder.connection.execute("PRAGMA locking_mode = EXCLUSIVE")
        try holder.connection.execute("BEGIN EXCLUSIVE")
        let busy = try #require(try await Self.openError(fixture))
        #expect(busy.code == .storeBusy, "\(busy)")
        #expect(busy.message.contains("locked"), "\(busy)")
        // Released while the open waits: the open succeeds. (A thread of its own: the open's
        // wait blocks a thread of the concurrency pool.)
        let release = Thread {
            Thread.sleep(forTimeInterval: 0.5)
            try? holder.connection.execute("COMMIT")
            holder.connection.close()
        }
        release.start()
        let provider = try await fixture.provider()
        try await provider.open()
        #expect(try await !provider.isRequestQueueEmpty)
        await provider.close()
    }
    /// Issue 19, defect 8: a first open that ended before the store was filled is made again
    /// by a provider with defining queries; one without them refuses (it would make the store
    /// complete and empty) — unless the unfinished fill had no defining queries either.
    @Test func anUnfinishedFirstOpenWithoutDefiningQueriesIsRedoneOnlyWhenItHadNone() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let path = fixture.parameters().storeFile
        func leaveUnfinished(queries: Int) throws {
            let connection = try Connection(path: path, options: .init(key: "offline-key"))
            try connection.execute("INSERT OR REPLACE INTO oo_meta (key, value) VALUES ('filling', '1')")
            connection.close()
            try Data("\(queries)".utf8).write(to: URL(fileURLWithPath: path + "-filling"))
        }
        // A store filled by three defining queries, whose first open "ended" half-way.
        let full = try await fixture.provider()
        try await full.open()
        await full.close()
        try leaveUnfinished(queries: 3)
        let bare = try await fixture.provider(queries: [])
        do {
            try await bare.open()
            Issue.record("a provider without defining queries made an unfinished store complete")
        } catch let error as OfflineODataError {
            #expect(error.message.contains("ended before the store was filled"), "\(error.message)")
        }
        // An app without defining queries, whose own first open was cut short, opens again.
        await full.clear()
        let empty = try await fixture.provider(queries: [])
        try await empty.open()
        await empty.close()
        try leaveUnfinished(queries: 0)
        let again = try await fixture.provider(queries: [])
        try await again.open()
        #expect(try await again.isRequestQueueEmpty)
        #expect(!FileManager.default.fileExists(atPath: path + "-filling"))
        await again.close()
    }
}
