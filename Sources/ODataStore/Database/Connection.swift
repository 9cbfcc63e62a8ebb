import CSQLCipher
import Foundation

/// A single SQLite/SQLCipher connection: the only place in the project that calls SQLite.
///
/// A connection has one owner at a time and is not `Sendable`: use it from one thread, or
/// through ``SerializedConnection`` / ``DatabasePool``, which confine it to a queue.
public final class Connection {
    /// How a connection is opened.
    public struct Options: Sendable {
        /// The SQLCipher key; nil opens an unencrypted file.
        public var key: String?
        public var readOnly = false
        /// Journal in write-ahead-log mode so readers do not wait for writers.
        public var walMode = true
        /// How long to wait for a lock before failing with `busy`, in milliseconds.
        public var busyTimeoutMilliseconds: Int32 = 5_000
        /// Page cache in KiB. Keyed stores get a larger one: every page miss costs a decrypt.
        public var cacheSizeKiB: Int?
        /// Create the file when it does not exist.
        public var create = true
        /// Creates a value from its parts.
        public init(key: String? = nil) { self.key = key }
    }

    /// Page size used for keyed stores (SQLCipher 3's default, matching the common 4 KiB
    /// file-system block).
    public static let cipherPageSize = 4096
    /// Default page cache for keyed stores: 32 MiB, against SQLite's 2 MiB default.
    public static let keyedCacheKiB = 32_768

    let handle: OpaquePointer
    public let path: String
    private var statements: [String: Statement] = [:]
    /// When set, every statement's SQL is appended here (for tests that count queries).
    var statementLog: [String]?
    private var isOpen = true
    private var savepointDepth = 0
    /// The rows a full read has seen so far, by table (see `StoreWriter.markSeen(in:rowid:)`):
    /// kept across the read's transactions, emptied by `StoreWriter.forgetSeen()`.
    var seenRows: [String: RowidSet] = [:]

    /// Opens (or creates) the database at `path`. With a key, the key is checked right away:
    /// a wrong or missing key is an `invalidEncryptionKey` error here, not at the first read.
    public init(path: String, options: Options = Options()) throws(DatabaseError) {
        var pointer: OpaquePointer?
        var flags = options.readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE
        if options.create && !options.readOnly { flags |= SQLITE_OPEN_CREATE }
        flags |= SQLITE_OPEN_NOMUTEX
        let status = sqlite3_open_v2(path, &pointer, flags, nil)
        guard let pointer else {
            throw DatabaseError(.sqlite, resultCode: status, message: "Cannot allocate a connection for \(path)")
        }
        self.handle = pointer
        self.path = path
        guard status == SQLITE_OK else {
            let error = Self.error(pointer, status, sql: nil)
            sqlite3_close_v2(pointer)
            throw DatabaseError(error.code, resultCode: status, message: "Cannot open \(path): \(error.message)")
        }
        sqlite3_extended_result_codes(pointer, 1)
        let registered = StoreFunctions.register(pointer)
        guard registered == SQLITE_OK else {
            let error = Self.error(pointer, registered, sql: nil)
            sqlite3_close_v2(pointer)
            throw DatabaseError(error.code, resultCode: registered, message: "Cannot open \(path): \(error.message)")
        }
        // Set before the first read: a store another process holds locked is waited for (for a
        // bounded time) at open too, and then reported as busy, not as a wrong key.
        sqlite3_busy_timeout(pointer, options.busyTimeoutMilliseconds)
        do throws(DatabaseError) {
            if let key = options.key {
                // If plain SQLite were linked instead of SQLCipher, keys would be ignored and
                // the file written in the clear: refuse to go on.
                guard case .text(let version)? = try query("PRAGMA cipher_version").first?.first, !version.isEmpty else {
                    throw DatabaseError(.invalidEncryptionKey, message: "This process is not linked with SQLCipher; a key cannot be applied")
                }
                let bytes = Array(key.utf8)
                let keyStatus = sqlite3_key(pointer, bytes, Int32(bytes.count))
                guard keyStatus == SQLITE_OK else { throw Self.error(pointer, keyStatus, sql: nil) }
                try execute("PRAGMA cipher_page_size = \(Self.cipherPageSize)")
            }
            try verifyReadable(keyed: options.key != nil)
            if let cache = options.cacheSizeKiB ?? (options.key != nil ? Self.keyedCacheKiB : nil) {
                try execute("PRAGMA cache_size = -\(cache)")
            }
            try execute("PRAGMA foreign_keys = ON")
            if options.walMode && !options.readOnly {
                _ = try query("PRAGMA journal_mode = WAL")
            }
            // The write-ahead log stays when the last connection closes (at the size it grew
            // to): while the log file grows, every commit's sync also writes file metadata,
            // which makes commits about twice as slow (see `Store.prepareLog`).
            var persist: Int32 = 1
            sqlite3_file_control(pointer, "main", SQLITE_FCNTL_PERSIST_WAL, &persist)
        } catch {
            sqlite3_close_v2(pointer)
            throw error
        }
    }

    deinit {
        if isOpen {
            statements.removeAll()
            sqlite3_close_v2(handle)
        }
    }

    /// Closes the connection; further use fails with `closed`.
    public func close() {
        guard isOpen else { return }
        statements.removeAll()
        sqlite3_close_v2(handle)
        isOpen = false
    }

    /// Reads the first page, which is where SQLCipher notices a wrong key, then the schema,
    /// where a damaged page shows (a good first page proves the key right).
    private func verifyReadable(keyed: Bool) throws(DatabaseError) {
        do {
            _ = try query("PRAGMA user_version")
        } catch {
            if error.resultCode & 0xFF == SQLITE_NOTADB {
                if keyed {
                    // A cut-off file is no question of the key.
                    if let size = Self.fileSize(path), size % Self.cipherPageSize != 0 {
                        throw DatabaseError(.truncated, resultCode: error.resultCode,
                                            message: "\(path) is cut off: \(size) bytes is not a whole number of "
                                                + "\(Self.cipherPageSize)-byte pages")
                    }
                    // SQLCipher cannot tell a wrong key from a damaged first page (both fail its
                    // page check); the message says both.
                    throw DatabaseError(.invalidEncryptionKey, resultCode: error.resultCode,
                                        message: "The encryption key is wrong, \(path) is not an encrypted store, "
                                            + "or its first page is damaged")
                }
                // A plain SQLite file starts with its magic string; an encrypted one is random
                // bytes in whole pages.
                if Self.looksEncrypted(path) {
                    throw DatabaseError(.invalidEncryptionKey, resultCode: error.resultCode,
                                        message: "\(path) is encrypted and needs its key")
                }
                throw DatabaseError(.notADatabase, resultCode: error.resultCode, message: "\(path) is not a SQLite database")
            }
            throw error
        }
        // A file that is not a whole number of pages was cut off (the page size never changes,
        // so this holds while other connections write).
        if case .integer(let pageSize)? = try query("PRAGMA page_size").first?.first, pageSize > 0,
           let size = Self.fileSize(path), size > 0, size % Int(pageSize) != 0 {
            throw DatabaseError(.truncated, message: "\(path) is cut off: \(size) bytes is not a whole number of "
                                + "\(pageSize)-byte pages")
        }
        do {
            _ = try query("SELECT count(*) FROM sqlite_master")
        } catch {
            guard error.code == .corrupt else { throw error }
            throw DatabaseError(.corrupt, resultCode: error.resultCode,
                                message: "\(path) has a damaged page (its schema cannot be read): \(error.message)")
        }
    }

    /// The size of the file at `path` in bytes; nil when there is none.
    public static func fileSize(_ path: String) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue
    }

    /// Whether a file that SQLite cannot read looks like an encrypted database: no SQLite
    /// header, and a size that is a whole number of pages.
    static func looksEncrypted(_ path: String) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? handle.close() }
        let header = (try? handle.read(upToCount: 16)) ?? Data()
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        return header != Data("SQLite format 3\u{0}".utf8) && size >= 1024 && size % 1024 == 0
    }

    // MARK: Errors

    static func error(_ handle: OpaquePointer?, _ status: Int32, sql: String?, arguments: [DatabaseValue] = []) -> DatabaseError {
        let message = handle.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(status))
        let code: DatabaseError.Code
        switch status & 0xFF {
        // After the open checked the first page, a page that fails SQLCipher's check (reported
        // as "not a database") is a damaged page; the open itself reports key problems.
        case SQLITE_NOTADB: code = .corrupt
        case SQLITE_CORRUPT: code = .corrupt
        case SQLITE_BUSY, SQLITE_LOCKED: code = .busy
        case SQLITE_CONSTRAINT: code = .constraint
        case SQLITE_MISUSE: code = .misuse
        default: code = .sqlite
        }
        return DatabaseError(code, resultCode: status, message: message, sql: sql, arguments: arguments)
    }

    func check(_ status: Int32, sql: String? = nil, arguments: [DatabaseValue] = []) throws(DatabaseError) {
        guard status == SQLITE_OK || status == SQLITE_DONE || status == SQLITE_ROW else {
            throw Self.error(handle, status, sql: sql, arguments: arguments)
        }
    }

    // MARK: Statements

    /// A prepared statement from the cache (prepared on first use).
    public func statement(_ sql: String) throws(DatabaseError) -> Statement {
        guard isOpen else { throw DatabaseError(.closed, message: "The connection is closed", sql: sql) }
        statementLog?.append(sql)
        if let cached = statements[sql] {
            cached.reset()
            return cached
        }
        let statement = try Statement(connection: self, sql: sql)
        statements[sql] = statement
        return statement
    }

    /// Runs one or more statements without results (no bound values).
    public func execute(_ sql: String) throws(DatabaseError) {
        guard isOpen else { throw DatabaseError(.closed, message: "The connection is closed", sql: sql) }
        var errorMessage: UnsafeMutablePointer<CChar>?
        let status = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if status != SQLITE_OK {
            let message = errorMessage.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(status))
            sqlite3_free(errorMessage)
            var error = Self.error(handle, status, sql: sql)
            error.message = message
            throw error
        }
    }

    /// Runs a statement with bound values; returns the number of rows changed.
    @discardableResult
    public func execute(_ sql: String, _ arguments: [DatabaseValue]) throws(DatabaseError) -> Int {
        let statement = try statement(sql, binding: arguments)
        while try statement.step() {}
        return Int(sqlite3_changes(handle))
    }

    /// Runs a query and returns every row.
    public func query(_ sql: String, _ arguments: [DatabaseValue] = []) throws(DatabaseError) -> [[DatabaseValue]] {
        let statement = try statement(sql, binding: arguments)
        var rows: [[DatabaseValue]] = []
        while try statement.step() { rows.append(statement.row()) }
        return rows
    }

    /// How many `?` parameters one statement may have (SQLite's `SQLITE_MAX_VARIABLE_NUMBER`
    /// in this build).
    public static let maxParameters = 999

    /// A statement with `arguments` bound. Past ``maxParameters`` (a filter with thousands of
    /// values), the values are written into the SQL as literals instead, in a statement that
    /// is not cached.
    public func statement(_ sql: String, binding arguments: [DatabaseValue]) throws(DatabaseError) -> Statement {
        guard arguments.count > Self.maxParameters else {
            let statement = try statement(sql)
            try statement.bind(arguments)
            return statement
        }
        guard isOpen else { throw DatabaseError(.closed, message: "The connection is closed", sql: sql) }
        let inlined = try Self.inline(arguments, into: sql)
        statementLog?.append(inlined)
        return try Statement(connection: self, sql: inlined)
    }

    /// `sql` with each `?` (outside quotes) replaced by the next argument as an SQL literal.
    static func inline(_ arguments: [DatabaseValue], into sql: String) throws(DatabaseError) -> String {
        var out = ""
        out.reserveCapacity(sql.utf8.count + arguments.count * 8)
        var next = 0
        var quote: Character?
        for c in sql {
            if let open = quote {
                if c == open { quote = nil }
                out.append(c)
            } else if c == "'" || c == "\"" {
                quote = c
                out.append(c)
            } else if c == "?" {
                guard next < arguments.count else { break }
                out += literal(arguments[next])
                next += 1
            } else {
                out.append(c)
            }
        }
        guard next == arguments.count else {
            throw DatabaseError(.misuse, message: "The statement's ? parameters do not match its \(arguments.count) values", sql: sql)
        }
        return out
    }

    /// An SQL literal for a value.
    static func literal(_ value: DatabaseValue) -> String {
        func hex(_ bytes: [UInt8]) -> String {
            let digits = Array("0123456789ABCDEF")
            return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] })
        }
        switch value {
        case .null: return "NULL"
        case .integer(let n): return String(n)
        case .real(let d) where d.isNaN: return "NULL"
        case .real(let d) where d.isInfinite: return d < 0 ? "-9e999" : "9e999"
        case .real(let d): return "(" + String(d) + ")"
        case .text(let s) where s.utf8.contains(0): return "CAST(X'" + hex(Array(s.utf8)) + "' AS TEXT)"
        case .text(let s): return "'" + s.replacingOccurrences(of: "'", with: "''") + "'"
        case .blob(let b): return "X'" + hex(b) + "'"
        }
    }

    /// The rowid of the last insert.
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// The bytes this connection's page cache holds now (`SQLITE_DBSTATUS_CACHE_USED`).
    public var pageCacheBytes: Int { status(SQLITE_DBSTATUS_CACHE_USED) }

    /// The pages this connection's page cache has written to the file since it opened, at
    /// commits and when the cache spilled (`SQLITE_DBSTATUS_CACHE_WRITE`).
    public var pagesWritten: Int { status(SQLITE_DBSTATUS_CACHE_WRITE) }

    /// The current value of one of SQLite's per-connection counters; 0 once closed.
    private func status(_ counter: Int32) -> Int {
        guard isOpen else { return 0 }
        var current: Int32 = 0
        var highest: Int32 = 0
        guard sqlite3_db_status(handle, counter, &current, &highest, 0) == SQLITE_OK else { return 0 }
        return Int(current)
    }

    // MARK: Transactions

    /// An open write group: one transaction that the writes until its commit join.
    private struct WriteGroup {
        /// What the first write that failed in the group threw.
        var failure: String?
    }
    private var writeGroup: WriteGroup?

    /// Opens a write group: the ``transaction(_:)`` calls until ``commitWriteGroup()`` join one
    /// transaction, each without a savepoint. A savepoint in a transaction copies every page it
    /// changes that the transaction changed before (so that it can roll back alone); a bulk
    /// fill, which starts again from nothing when any write fails, needs none of that. A write
    /// that throws leaves the group half done: later writes are refused, and the commit rolls
    /// the whole group back and throws (``rollbackWriteGroup()`` rolls it back unasked).
    /// Until the commit, everything the connection runs is inside the group's transaction:
    /// statements that cannot run in one (`journal_mode`, `synchronous`, `ATTACH`) fail.
    /// Nothing when a group is open already.
    public func beginWriteGroup() throws {
        guard writeGroup == nil else { return }
        guard !isInTransaction else {
            throw DatabaseError(.misuse, message: "A write group cannot begin inside a transaction")
        }
        try execute("BEGIN IMMEDIATE")
        writeGroup = WriteGroup()
    }

    /// Commits the open write group; nothing when none is open. When one of its writes failed,
    /// the group is rolled back instead and this throws.
    public func commitWriteGroup() throws {
        guard let group = writeGroup else { return }
        writeGroup = nil
        if let failure = group.failure {
            if isInTransaction { try? execute("ROLLBACK") }
            throw DatabaseError(.misuse, message: "The write group was rolled back, not committed: one of its writes "
                                + "failed (\(failure))")
        }
        guard isInTransaction else {
            throw DatabaseError(.misuse, message: "The write group's transaction ended before its commit: nothing "
                                + "of it was kept")
        }
        do {
            try execute("COMMIT")
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Rolls the open write group back, every write of it; nothing when none is open.
    public func rollbackWriteGroup() {
        guard writeGroup != nil else { return }
        writeGroup = nil
        if isInTransaction { try? execute("ROLLBACK") }
    }

    /// Whether a transaction is open (SQLite ends one by itself after some errors, such as a
    /// full disk: a caller that goes on after an error checks this first).
    public var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    /// Runs `body` in a transaction (a savepoint when one is already open): commits when it
    /// returns, rolls back when it throws. In an open write group (``beginWriteGroup()``) it
    /// joins the group's transaction without a savepoint of its own.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        if let group = writeGroup, savepointDepth == 0 {
            guard group.failure == nil, isInTransaction else {
                throw DatabaseError(.misuse, message: "A write of this write group failed (or its transaction "
                                    + "ended): roll the group back before writing again")
            }
            savepointDepth += 1
            defer { savepointDepth -= 1 }
            let result: T
            do {
                result = try body()
            } catch {
                writeGroup?.failure = "\(error)"
                throw error
            }
            // SQLite may have ended the transaction itself (a full disk) under an error the body
            // caught: what the body did after it was committed statement by statement.
            guard isInTransaction else {
                writeGroup?.failure = "the group's transaction ended during a write"
                throw DatabaseError(.misuse, message: "The write group's transaction ended during this write: "
                                    + "roll the group back")
            }
            return result
        }
        if savepointDepth > 0 || sqlite3_get_autocommit(handle) == 0 {
            return try savepoint(body)
        }
        try execute("BEGIN IMMEDIATE")
        savepointDepth += 1
        let result: T
        do {
            result = try body()
        } catch {
            savepointDepth -= 1
            try? execute("ROLLBACK")
            throw error
        }
        savepointDepth -= 1
        do {
            try execute("COMMIT")
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
        return result
    }

    /// Runs `body` inside a savepoint; a throw rolls back only what the savepoint covered.
    public func savepoint<T>(_ body: () throws -> T) throws -> T {
        let name = "sp\(savepointDepth)"
        try execute("SAVEPOINT \(name)")
        savepointDepth += 1
        let result: T
        do {
            result = try body()
        } catch {
            savepointDepth -= 1
            // What the savepoint covered must go; when it cannot, the caller hears of that, not
            // of the body's error (its own transaction would otherwise keep half the work).
            do {
                try execute("ROLLBACK TO \(name)")
            } catch let rollback {
                if isInTransaction { throw SavepointNotRolledBack(cause: rollback, bodyError: error) }
                throw error
            }
            try? execute("RELEASE \(name)")
            throw error
        }
        savepointDepth -= 1
        try execute("RELEASE \(name)")
        return result
    }

    /// A savepoint's work could not be rolled back after its body threw, while the transaction
    /// around it stays open: that transaction holds the half-done work and must not commit.
    public struct SavepointNotRolledBack: Error, CustomStringConvertible {
        /// Why the rollback failed.
        public var cause: any Error
        /// What the body threw.
        public var bodyError: any Error
        public var description: String {
            "A savepoint could not be rolled back (\(cause)) after \(bodyError); the transaction must not commit"
        }
    }

    // MARK: Keys

    /// Changes the key of an encrypted database (`PRAGMA rekey`).
    public func rekey(to newKey: String) throws(DatabaseError) {
        let bytes = Array(newKey.utf8)
        guard !bytes.isEmpty else {
            throw DatabaseError(.invalidEncryptionKey, message: "An empty key cannot be set; Connection.export(to:key:) with a nil key writes an unencrypted copy")
        }
        try check(sqlite3_rekey(handle, bytes, Int32(bytes.count)))
    }

    /// Writes a copy of this database to `path` with another key, or unencrypted when
    /// `key` is nil (SQLCipher cannot rekey to no key in place).
    public func export(to path: String, key: String?) throws(DatabaseError) {
        try execute("ATTACH DATABASE ? AS exported KEY ?", [.text(path), .text(key ?? "")])
        defer { try? execute("DETACH DATABASE exported") }
        // The copy gets the page size every keyed connection here opens with.
        if key != nil { try execute("PRAGMA exported.cipher_page_size = \(Self.cipherPageSize)") }
        _ = try query("SELECT sqlcipher_export('exported')")
        let version = try query("PRAGMA user_version").first?.first ?? .integer(0)
        if case .integer(let number) = version { try execute("PRAGMA exported.user_version = \(number)") }
    }
}

/// A prepared statement. Owned by its connection's cache; valid until the connection closes.
public final class Statement {
    let handle: OpaquePointer
    public let sql: String
    private unowned let connection: Connection
    private var arguments: [DatabaseValue] = []

    init(connection: Connection, sql: String) throws(DatabaseError) {
        var pointer: OpaquePointer?
        let status = sqlite3_prepare_v2(connection.handle, sql, -1, &pointer, nil)
        guard status == SQLITE_OK, let pointer else {
            throw Connection.error(connection.handle, status, sql: sql)
        }
        self.handle = pointer
        self.sql = sql
        self.connection = connection
    }

    deinit { sqlite3_finalize(handle) }

    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        arguments = []
    }

    /// Resets for the next run with the same parameters bound (each is bound again before it):
    /// what a loop that binds every parameter of every row uses instead of ``reset()``.
    func resetKeepingBindings() {
        sqlite3_reset(handle)
    }

    /// Drops the reference to the last bound values (kept for error messages).
    func forgetArguments() { arguments = [] }

    /// Binds values to `?` parameters in order.
    public func bind(_ values: [DatabaseValue]) throws(DatabaseError) {
        arguments = values
        let expected = Int(sqlite3_bind_parameter_count(handle))
        guard expected == values.count else {
            throw DatabaseError(.misuse, message: "The statement has \(expected) parameters, \(values.count) values were given", sql: sql, arguments: values)
        }
        for (index, value) in values.enumerated() {
            try bind(value, at: Int32(index + 1))
        }
    }

    /// Binds UTF-8 `bytes` as text (`blob` false) or as a blob at a 1-based position;
    /// SQLite copies them.
    public func bind(bytes: [UInt8], asBlob blob: Bool = false, at position: Int32) throws(DatabaseError) {
        let status = bytes.withUnsafeBufferPointer { buffer -> Int32 in
            // An empty value still needs a non-null pointer, or SQLite binds NULL.
            let count = Int32(buffer.count)
            if blob {
                guard let base = buffer.baseAddress, count > 0 else { return sqlite3_bind_zeroblob(handle, position, 0) }
                return sqlite3_bind_blob(handle, position, base, count, csqlcipher_transient())
            }
            return buffer.withMemoryRebound(to: CChar.self) { chars in
                guard let base = chars.baseAddress, count > 0 else { return sqlite3_bind_text(handle, position, "", 0, csqlcipher_transient()) }
                return sqlite3_bind_text(handle, position, base, count, csqlcipher_transient())
            }
        }
        try checkBinding(status)
    }

    /// Binds `buffer[start..<start + count]` as UTF-8 text (or a blob) at a 1-based position
    /// without SQLite copying it: the bytes must stay valid and unchanged until the statement is
    /// reset or the parameter bound again.
    public func bindInPlace(
        _ buffer: UnsafeBufferPointer<UInt8>, start: Int, count: Int, asBlob blob: Bool = false, at position: Int32
    ) throws(DatabaseError) {
        guard start >= 0, count >= 0, start + count <= buffer.count else {
            throw DatabaseError(
                .misuse,
                message: "\(blob ? "Blob" : "Text") \(start)..<\(start + count) is outside its buffer of "
                    + "\(buffer.count) bytes",
                sql: sql)
        }
        let status: Int32
        if count == 0 || buffer.baseAddress == nil {
            // An empty value still needs a non-null pointer, or SQLite binds NULL.
            status = blob ? sqlite3_bind_zeroblob(handle, position, 0) : sqlite3_bind_text(handle, position, "", 0, nil)
        } else if let base = buffer.baseAddress, blob {
            status = sqlite3_bind_blob(handle, position, base + start, Int32(count), nil)
        } else if let base = buffer.baseAddress {
            status = (base + start).withMemoryRebound(to: CChar.self, capacity: count) { sqlite3_bind_text(handle, position, $0, Int32(count), nil) }
        } else {
            status = SQLITE_MISUSE
        }
        try checkBinding(status)
    }

    /// Binds NULL at a 1-based position.
    public func bindNull(at position: Int32) throws(DatabaseError) {
        try checkBinding(sqlite3_bind_null(handle, position))
    }

    /// Binds an integer at a 1-based position.
    public func bind(integer: Int64, at position: Int32) throws(DatabaseError) {
        try checkBinding(sqlite3_bind_int64(handle, position, integer))
    }

    private func checkBinding(_ status: Int32) throws(DatabaseError) {
        guard status == SQLITE_OK else {
            throw Connection.error(connection.handle, status, sql: sql, arguments: arguments)
        }
    }

    /// Binds one value at a 1-based position.
    public func bind(_ value: DatabaseValue, at position: Int32) throws(DatabaseError) {
        let status: Int32
        switch value {
        case .null: status = sqlite3_bind_null(handle, position)
        case .integer(let v): status = sqlite3_bind_int64(handle, position, v)
        case .real(let v): status = sqlite3_bind_double(handle, position, v)
        case .text(let s):
            // With the byte count, so text with NUL characters survives; native strings are
            // bound from their own storage without a copy.
            if let bound = s.utf8.withContiguousStorageIfAvailable({ buffer -> Int32 in
                buffer.withMemoryRebound(to: CChar.self) { chars in
                    chars.isEmpty ? sqlite3_bind_text(handle, position, "", 0, csqlcipher_transient())
                        : sqlite3_bind_text(handle, position, chars.baseAddress, Int32(chars.count), csqlcipher_transient())
                }
            }) {
                status = bound
                break
            }
            let bytes = Array(s.utf8)
            status = bytes.withUnsafeBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { chars in
                    // An empty string still needs a non-null pointer, or SQLite binds NULL.
                    chars.isEmpty ? sqlite3_bind_text(handle, position, "", 0, csqlcipher_transient())
                        : sqlite3_bind_text(handle, position, chars.baseAddress, Int32(chars.count), csqlcipher_transient())
                }
            }
        case .blob(let b): status = b.withUnsafeBytes { sqlite3_bind_blob(handle, position, $0.baseAddress, Int32(b.count), csqlcipher_transient()) }
        }
        try checkBinding(status)
    }

    /// Advances; true while a row is available.
    public func step() throws(DatabaseError) -> Bool {
        let status = sqlite3_step(handle)
        switch status {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let error = Connection.error(connection.handle, status, sql: sql, arguments: arguments)
            sqlite3_reset(handle)
            throw error
        }
    }

    public var columnCount: Int { Int(sqlite3_column_count(handle)) }

    /// The name of a result column.
    public func columnName(_ index: Int) -> String { String(cString: sqlite3_column_name(handle, Int32(index))) }

    /// The value of a column of the current row.
    public func column(_ index: Int) -> DatabaseValue {
        let i = Int32(index)
        switch sqlite3_column_type(handle, i) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(handle, i))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(handle, i))
        case SQLITE_TEXT:
            guard let text = sqlite3_column_text(handle, i) else { return .text("") }
            let count = Int(sqlite3_column_bytes(handle, i))
            return .text(String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(handle, i))
            guard count > 0, let pointer = sqlite3_column_blob(handle, i) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: pointer, count: count)))
        default: return .null
        }
    }

    /// A column of the current row as an integer, when it holds one.
    public func integer(_ index: Int) -> Int64? {
        guard sqlite3_column_type(handle, Int32(index)) == SQLITE_INTEGER else { return nil }
        return sqlite3_column_int64(handle, Int32(index))
    }

    /// Hands a text column of the current row to `body` as UTF-8 without copying it; nil when
    /// the column is not text. The bytes are valid only inside `body`.
    public func withText<R>(_ index: Int, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R? {
        let i = Int32(index)
        guard sqlite3_column_type(handle, i) == SQLITE_TEXT else { return nil }
        guard let text = sqlite3_column_text(handle, i) else { return body(UnsafeBufferPointer(start: nil, count: 0)) }
        return body(UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(handle, i))))
    }

    /// Hands a blob column of the current row to `body` without copying it; nil when the
    /// column is not a blob. The bytes are valid only inside `body`.
    public func withBlob<R>(_ index: Int, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R? {
        let i = Int32(index)
        guard sqlite3_column_type(handle, i) == SQLITE_BLOB else { return nil }
        guard let blob = sqlite3_column_blob(handle, i) else { return body(UnsafeBufferPointer(start: nil, count: 0)) }
        return body(UnsafeBufferPointer(start: blob.assumingMemoryBound(to: UInt8.self), count: Int(sqlite3_column_bytes(handle, i))))
    }

    /// Every column of the current row.
    public func row() -> [DatabaseValue] { (0..<columnCount).map(column) }
}

/// A set of rowids as a bitmap in chunks of 65,536 rowids (8 KiB each), made as rows are
/// added: 3,000,000 rowids in a row take 46 chunks, 368 KiB. A full read records every row it
/// sees here; as a temporary table in memory, the same rows had taken 25–30 MiB at 3M.
struct RowidSet {
    private var chunks: [Int64: [UInt64]] = [:]
    private static let chunkShift: Int64 = 16
    private static let wordsPerChunk = 1 << 10

    /// How many rowids the set holds.
    private(set) var count = 0

    private static let emptyChunk = [UInt64](repeating: 0, count: wordsPerChunk)

    mutating func insert(_ rowid: Int64) {
        let offset = Int(rowid & ((1 << Self.chunkShift) - 1))
        let (word, bit) = (offset >> 6, UInt64(1) << UInt64(offset & 63))
        let before = chunks[rowid >> Self.chunkShift, default: Self.emptyChunk][word]
        guard before & bit == 0 else { return }
        chunks[rowid >> Self.chunkShift, default: Self.emptyChunk][word] = before | bit
        count += 1
    }

    func contains(_ rowid: Int64) -> Bool {
        guard let words = chunks[rowid >> Self.chunkShift] else { return false }
        let offset = Int(rowid & ((1 << Self.chunkShift) - 1))
        return words[offset >> 6] & (UInt64(1) << UInt64(offset & 63)) != 0
    }
}
