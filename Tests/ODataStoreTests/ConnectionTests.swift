import Dispatch
import Foundation
import Testing
@testable import ODataStore

/// A temporary folder removed when the test ends.
final class TemporaryDirectory {
    let url: URL
    init() {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("odatastore-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    func path(_ name: String) -> String { url.appendingPathComponent(name).path }
    deinit { try? FileManager.default.removeItem(at: url) }
}

@Suite struct ConnectionTests {
    @Test func typedBindsAndColumnsRoundTrip() throws {
        let dir = TemporaryDirectory()
        let db = try Connection(path: dir.path("t.sqlite"))
        try db.execute("CREATE TABLE t (i INTEGER, r REAL, s TEXT, b BLOB, n)")
        let values: [DatabaseValue] = [.integer(.min), .real(-1.5e300), .text("héllo ' \" \u{0}x"), .blob([0, 1, 255]), .null]
        try db.execute("INSERT INTO t VALUES (?, ?, ?, ?, ?)", values)
        #expect(try db.query("SELECT i, r, s, b, n FROM t") == [values])
        // The statement cache hands back the same prepared statement.
        #expect(try db.statement("SELECT 1") === db.statement("SELECT 1"))
    }

    /// A range outside the buffer is refused before SQLite sees a pointer, and named as text
    /// or blob as it was bound.
    @Test func bytesBoundInPlaceAreCheckedAgainstTheirBuffer() throws {
        let dir = TemporaryDirectory()
        let db = try Connection(path: dir.path("t.sqlite"))
        try db.execute("CREATE TABLE t (s TEXT, b BLOB)")
        let bytes: [UInt8] = Array("abcdef".utf8)
        let statement = try db.statement("INSERT INTO t VALUES (?, ?)")
        try bytes.withUnsafeBufferPointer { buffer in
            try statement.bindInPlace(buffer, start: 1, count: 3, at: 1)
            try statement.bindInPlace(buffer, start: 4, count: 2, asBlob: true, at: 2)
            _ = try statement.step()
            statement.reset()
            for (blob, start, count) in [(false, 4, 3), (true, -1, 2), (true, 0, 7)] {
                do {
                    try statement.bindInPlace(buffer, start: start, count: count, asBlob: blob, at: blob ? 2 : 1)
                    Issue.record("\(start)..<\(start + count) of 6 bytes was bound")
                } catch let error as DatabaseError {
                    #expect(error.code == .misuse)
                    #expect(error.message.hasPrefix(blob ? "Blob " : "Text "), "\(error.message)")
                    #expect(error.message.contains("outside its buffer of 6 bytes"), "\(error.message)")
                }
            }
        }
        #expect(try db.query("SELECT s, b FROM t") == [[.text("bcd"), .blob(Array("ef".utf8))]])
    }

    @Test func errorsCarryCodeMessageAndSQLButHideValues() throws {
        let dir = TemporaryDirectory()
        let db = try Connection(path: dir.path("t.sqlite"))
        try db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
        do {
            try db.execute("INSERT INTO t (id, name) VALUES (?, ?)", [.integer(1), .null])
            Issue.record("expected a constraint error")
        } catch {
            #expect(error.code == .constraint)
            #expect(error.sql == "INSERT INTO t (id, name) VALUES (?, ?)")
            #expect(error.message.contains("NOT NULL"))
            #expect(!error.description.contains("NULL, ") && error.expandedDescription.contains("arguments"))
        }
        do {
            try db.execute("INSERT INTO t (id, name) VALUES (?, ?)", [.integer(1), .text("secret-value")])
            try db.execute("INSERT INTO t (id, name) VALUES (?, ?)", [.integer(1), .text("secret-value")])
            Issue.record("expected a key violation")
        } catch {
            #expect(!error.description.contains("secret-value"))
            #expect(error.expandedDescription.contains("secret-value"))
        }
        #expect(throws: DatabaseError.self) { try db.query("SELECT * FROM missing") }
    }

    @Test func transactionsAndSavepointsRollBack() throws {
        let dir = TemporaryDirectory()
        let db = try Connection(path: dir.path("t.sqlite"))
        try db.execute("CREATE TABLE t (v INTEGER)")
        struct Stop: Error {}
        _ = try? db.transaction {
            try db.execute("INSERT INTO t VALUES (?)", [.integer(1)])
            throw Stop()
        }
        #expect(try db.query("SELECT count(*) FROM t") == [[.integer(0)]])
        try db.transaction {
            try db.execute("INSERT INTO t VALUES (?)", [.integer(1)])
            _ = try? db.savepoint {
                try db.execute("INSERT INTO t VALUES (?)", [.integer(2)])
                throw Stop()
            }
            try db.execute("INSERT INTO t VALUES (?)", [.integer(3)])
        }
        #expect(try db.query("SELECT v FROM t ORDER BY v") == [[.integer(1)], [.integer(3)]])
    }

    static let secret = "Zanzibar-Confidential-4711"

    /// The error `body` throws, or nil.
    static func failure(_ body: () throws(DatabaseError) -> Void) -> DatabaseError? {
        do {
            try body()
            return nil
        } catch {
            return error
        }
    }

    static func fill(_ db: Connection) throws {
        try db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        try db.transaction {
            for i in 0..<200 { try db.execute("INSERT INTO customers (name) VALUES (?)", [.text("\(secret) #\(i)")]) }
        }
    }

    static func fileContains(_ path: String, _ needle: String) throws -> Bool {
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        // The WAL file holds recent pages too.
        if let wal = try? Data(contentsOf: URL(fileURLWithPath: path + "-wal")) { bytes += wal }
        let pattern = Array(needle.utf8)
        guard bytes.count >= pattern.count else { return false }
        for start in 0...(bytes.count - pattern.count) where bytes[start] == pattern[0] {
            if Array(bytes[start..<(start + pattern.count)]) == pattern { return true }
        }
        return false
    }

    @Test func keyedFilesHoldNoPlaintext() throws {
        let dir = TemporaryDirectory()
        let plain = try Connection(path: dir.path("plain.sqlite"))
        try Self.fill(plain)
        plain.close()
        #expect(try Self.fileContains(dir.path("plain.sqlite"), Self.secret), "control: the unkeyed file shows the value")
        let keyed = try Connection(path: dir.path("keyed.sqlite"), options: .init(key: "correct horse"))
        try Self.fill(keyed)
        #expect(try keyed.query("SELECT count(*) FROM customers") == [[.integer(200)]])
        keyed.close()
        #expect(try !Self.fileContains(dir.path("keyed.sqlite"), Self.secret))
        #expect(try !Self.fileContains(dir.path("keyed.sqlite"), "CREATE TABLE"))
    }

    @Test func theProcessUsesSQLCipher() throws {
        let dir = TemporaryDirectory()
        let db = try Connection(path: dir.path("v.sqlite"))
        guard case .text(let version)? = try db.query("PRAGMA cipher_version").first?.first else {
            Issue.record("PRAGMA cipher_version returned nothing: plain SQLite is linked")
            return
        }
        #expect(version.hasPrefix("3.4"))
        #expect(try db.query("SELECT sqlite_version()") == [[.text("3.15.2")]])
    }

    @Test func wrongOrMissingKeyFailsAtOpen() throws {
        let dir = TemporaryDirectory()
        let path = dir.path("keyed.sqlite")
        let keyed = try Connection(path: path, options: .init(key: "right"))
        try Self.fill(keyed)
        keyed.close()
        for options in [Connection.Options(key: "wrong"), Connection.Options(key: nil)] {
            do {
                _ = try Connection(path: path, options: options)
                Issue.record("open must fail")
            } catch {
                #expect(error.code == .invalidEncryptionKey, "\(error)")
            }
        }
        // A key for an unencrypted file is wrong too.
        let plainPath = dir.path("plain.sqlite")
        let plain = try Connection(path: plainPath)
        try Self.fill(plain)
        plain.close()
        #expect(throws: DatabaseError.self) { try Connection(path: plainPath, options: .init(key: "anything")) }
    }

    @Test func filesThatAreNotStoresAreRejected() throws {
        let dir = TemporaryDirectory()
        let text = dir.path("notes.txt")
        try Data("This is not a database, just some text that is long enough to look like something.".utf8).write(to: URL(fileURLWithPath: text))
        do {
            _ = try Connection(path: text)
            Issue.record("a text file must not open")
        } catch {
            #expect(error.code == .notADatabase)
            #expect(error.message.contains("notes.txt"))
        }
        // A damaged database: overwrite pages in the middle.
        let path = dir.path("damaged.sqlite")
        var options = Connection.Options()
        options.walMode = false
        let db = try Connection(path: path, options: options)
        try Self.fill(db)
        db.close()
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        for i in 100..<min(bytes.count, 3000) { bytes[i] = 0xA5 }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let failure = Self.failure { () throws(DatabaseError) in
            let damaged = try Connection(path: path, options: options)
            _ = try damaged.query("SELECT * FROM customers")
        }
        #expect(failure.map { [DatabaseError.Code.corrupt, .notADatabase].contains($0.code) } == true, "\(String(describing: failure))")
    }

    @Test func rekeyAndExport() throws {
        let dir = TemporaryDirectory()
        let path = dir.path("keyed.sqlite")
        let db = try Connection(path: path, options: .init(key: "one"))
        try Self.fill(db)
        try db.rekey(to: "two")
        db.close()
        #expect(throws: DatabaseError.self) { try Connection(path: path, options: .init(key: "one")) }
        let reopened = try Connection(path: path, options: .init(key: "two"))
        #expect(try reopened.query("SELECT count(*) FROM customers") == [[.integer(200)]])
        #expect(throws: DatabaseError.self) { try reopened.rekey(to: "") }
        // Removing the key: export an unencrypted copy.
        let plainPath = dir.path("plain.sqlite")
        try reopened.export(to: plainPath, key: nil)
        reopened.close()
        let plain = try Connection(path: plainPath)
        #expect(try plain.query("SELECT count(*) FROM customers") == [[.integer(200)]])
        #expect(try Self.fileContains(plainPath, Self.secret))
    }

    @Test func readersOpenAtTheirFirstReadAndNotAfterClose() async throws {
        let dir = TemporaryDirectory()
        let pool = try DatabasePool(path: dir.path("lazy.sqlite"), key: "k", readerCount: 2)
        #expect(pool.openedReaders == 0)
        try await pool.write { db in try db.execute("CREATE TABLE t (v INTEGER)") }
        #expect(pool.openedReaders == 0, "writes need no reader")
        #expect(try await pool.read { db in try db.query("SELECT count(*) FROM t") } == [[.integer(0)]])
        #expect(pool.openedReaders == 1)
        _ = try await pool.read { db in try db.query("SELECT 1") }
        _ = try await pool.read { db in try db.query("SELECT 1") }
        #expect(pool.openedReaders == 2)
        pool.close()
        #expect(pool.openedReaders == 0)
        await #expect(throws: DatabaseError.self) { _ = try await pool.read { db in try db.query("SELECT 1") } }
    }

    @Test func readersDoNotWaitForAWriter() async throws {
        let dir = TemporaryDirectory()
        let pool = try DatabasePool(path: dir.path("pool.sqlite"), key: "k", readerCount: 2)
        defer { pool.close() }
        try await pool.write { db in
            try db.execute("CREATE TABLE t (v INTEGER)")
            try db.execute("INSERT INTO t VALUES (?)", [.integer(1)])
        }
        let inserted = DispatchSemaphore(value: 0)
        let readDone = DispatchSemaphore(value: 0)
        // The writer inserts, then holds its transaction open until the read has finished.
        let writing = Task {
            try await pool.write { db in
                try db.execute("INSERT INTO t VALUES (?)", [.integer(2)])
                inserted.signal()
                if readDone.wait(timeout: .now() + 20) == .timedOut { throw DatabaseError(.busy, message: "the read never finished") }
            }
        }
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                inserted.wait()
                continuation.resume()
            }
        }
        let during = try await pool.read { db in try db.query("SELECT count(*) FROM t") }
        readDone.signal()
        try await writing.value
        #expect(during == [[.integer(1)]], "the reader sees the last committed state while the write is open")
        let after = try await pool.read { db in try db.query("SELECT count(*) FROM t") }
        #expect(after == [[.integer(2)]])
    }

    /// SQLite takes 999 parameters; longer lists (a filter with thousands of values) are
    /// written into the SQL as literals, and read back the same.
    @Test func moreParametersThanSQLiteTakes() throws {
        let dir = TemporaryDirectory()
        let db = try Connection(path: dir.path("many.sqlite"), options: .init(key: "k"))
        try db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
        try db.transaction {
            for id in 0..<2_000 { try db.execute("INSERT INTO t (id, name) VALUES (?, ?)", [.integer(Int64(id)), .text("n'\(id)?")]) }
        }
        let ids = (0..<1_500).map { DatabaseValue.integer(Int64($0 * 2)) }
        let sql = "SELECT count(*) FROM t WHERE id IN (" + Array(repeating: "?", count: ids.count).joined(separator: ", ") + ")"
        #expect(try db.query(sql, ids) == [[.integer(1_000)]])
        // Every kind of value survives the literal form, quotes and question marks included.
        let values: [DatabaseValue] = [.null, .integer(-42), .integer(Int64.min), .real(-1.5e-7), .real(.infinity), .text("it's ? \"x\""),
                                       .text("nul\u{0}byte"), .blob([0, 1, 0xAB, 0xFF])]
        let row = Array((0..<1_000).map { values[$0 % values.count] })
        let back = try db.query("SELECT " + Array(repeating: "?", count: row.count).joined(separator: ", ") + " WHERE 'a?' = 'a?'", row)
        #expect(back.first == row)
        #expect(try db.query("SELECT name FROM t WHERE id IN (" + Array(repeating: "?", count: 1_200).joined(separator: ",") + ") AND name = ?",
                             (0..<1_200).map { .integer(Int64($0)) } + [.text("n'7?")]) == [[.text("n'7?")]])
    }
}
