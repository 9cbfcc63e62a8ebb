import Foundation
import ODataCore
import Testing
@testable import ODataStore

/// Write groups: the transactions of a bulk fill joined into one, without a savepoint each.
@Suite struct WriteGroupTests {
    struct Stop: Error {}

    static func values(_ db: Connection) throws -> [Int64] {
        try db.query("SELECT v FROM t ORDER BY v").compactMap { row -> Int64? in
            if case .integer(let value)? = row.first { return value }
            return nil
        }
    }

    /// A group's writes reach other connections only with its commit, all at once.
    @Test func theWritesOfAGroupShowAtItsCommit() throws {
        let dir = TemporaryDirectory()
        let db = try Connection(path: dir.path("t.sqlite"), options: Connection.Options(key: "k"))
        defer { db.close() }
        try db.execute("CREATE TABLE t (v INTEGER)")
        var readOnly = Connection.Options(key: "k")
        readOnly.readOnly = true
        let other = try Connection(path: dir.path("t.sqlite"), options: readOnly)
        defer { other.close() }
        try db.beginWriteGroup()
        try db.beginWriteGroup()  // one group: the second call changes nothing
        for value in 1...3 {
            try db.transaction { _ = try db.execute("INSERT INTO t VALUES (?)", [.integer(Int64(value))]) }
        }
        #expect(db.isInTransaction)
        #expect(try Self.values(other) == [])
        #expect(try Self.values(db) == [1, 2, 3])
        try db.commitWriteGroup()
        #expect(!db.isInTransaction)
        #expect(try Self.values(other) == [1, 2, 3])
        // After the group, a transaction is its own again.
        _ = try? db.transaction {
            try db.execute("INSERT INTO t VALUES (4)")
            throw Stop()
        }
        #expect(try Self.values(db) == [1, 2, 3])
        try db.commitWriteGroup()  // none open: nothing
    }

    /// A write that throws in a group undoes nothing by itself (it has no savepoint): later
    /// writes are refused, and the commit rolls the whole group back and says why.
    @Test func aFailedWriteRollsTheWholeGroupBack() throws {
        let dir = TemporaryDirectory()
        let db = try Connection(path: dir.path("t.sqlite"))
        defer { db.close() }
        try db.execute("CREATE TABLE t (v INTEGER UNIQUE)")
        try db.execute("INSERT INTO t VALUES (0)")
        try db.beginWriteGroup()
        try db.transaction { _ = try db.execute("INSERT INTO t VALUES (1)") }
        #expect(throws: DatabaseError.self) {
            try db.transaction {
                try db.execute("INSERT INTO t VALUES (2)")
                try db.execute("INSERT INTO t VALUES (0)")  // UNIQUE
            }
        }
        // No savepoint undid the failed write's first row: it stays until the group is rolled back.
        #expect(try Self.values(db) == [0, 1, 2])
        let refused = #expect(throws: DatabaseError.self) {
            try db.transaction { _ = try db.execute("INSERT INTO t VALUES (3)") }
        }
        #expect(refused?.message.contains("A write of this write group failed") == true, "\(String(describing: refused))")
        let commit = #expect(throws: DatabaseError.self) { try db.commitWriteGroup() }
        #expect(commit?.message.contains("rolled back, not committed") == true, "\(String(describing: commit))")
        #expect(commit?.message.contains("UNIQUE") == true, "\(String(describing: commit))")
        #expect(!db.isInTransaction)
        #expect(try Self.values(db) == [0])
        try db.transaction { _ = try db.execute("INSERT INTO t VALUES (5)") }
        #expect(try Self.values(db) == [0, 5])
    }

    /// A rollback undoes every write of the group; savepoints inside a group's writes still
    /// roll back alone; a group cannot begin inside a transaction.
    @Test func rollbacksAndSavepointsInAGroup() throws {
        let dir = TemporaryDirectory()
        let db = try Connection(path: dir.path("t.sqlite"))
        defer { db.close() }
        try db.execute("CREATE TABLE t (v INTEGER)")
        try db.beginWriteGroup()
        try db.transaction { _ = try db.execute("INSERT INTO t VALUES (1)") }
        db.rollbackWriteGroup()
        #expect(!db.isInTransaction)
        #expect(try Self.values(db) == [])

        try db.beginWriteGroup()
        try db.transaction {
            try db.execute("INSERT INTO t VALUES (1)")
            _ = try? db.transaction {
                try db.execute("INSERT INTO t VALUES (2)")
                throw Stop()
            }
            try db.execute("INSERT INTO t VALUES (3)")
        }
        try db.commitWriteGroup()
        #expect(try Self.values(db) == [1, 3])

        let inside = #expect(throws: DatabaseError.self) { try db.transaction { try db.beginWriteGroup() } }
        #expect(inside?.message.contains("cannot begin inside a transaction") == true)
        #expect(try Self.values(db) == [1, 3])
    }

    /// Through the store: writes between `beginWriteGroup` and `commitWriteGroup` reach its
    /// readers together.
    @Test func aStoresWriteGroup() async throws {
        let dir = TemporaryDirectory()
        let model = try MetadataParser().parse(RowPathTests.metadata)
        let store = try await Store.create(path: dir.path("s.sqlite"), model: model, key: "k")
        defer { store.close() }
        try await store.write { writer in _ = try writer.connection.execute("CREATE TABLE t (v INTEGER)") }
        try await store.beginWriteGroup()
        for value in 1...2 {
            try await store.write { writer in
                _ = try writer.connection.execute("INSERT INTO t VALUES (?)", [.integer(Int64(value))])
            }
        }
        #expect(try await store.read { reader in try Self.values(reader.connection) } == [])
        try await store.commitWriteGroup()
        #expect(try await store.read { reader in try Self.values(reader.connection) } == [1, 2])
    }
}
