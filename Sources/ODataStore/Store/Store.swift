import Foundation
public import ODataCore

/// A local OData store: a SQLite/SQLCipher file whose tables follow a model.
///
/// Reads run on a reader pool and see the last committed state; writes run on one writer, each
/// `write` call in one transaction.
public final class Store: Sendable {
    public let schema: StoreSchema
    public var model: Model { schema.model }
    let pool: DatabasePool

    init(schema: StoreSchema, pool: DatabasePool) {
        self.schema = schema
        self.pool = pool
    }

    /// Creates a new store at `path` for `model` (the file must not exist yet).
    ///
    /// With `deferringLookupIndexes`, the indexes that only speed up lookups (foreign keys, link
    /// targets, `indexes`) are left out until ``createLookupIndexes()``: a bulk fill of the new
    /// store is then cheaper. ``open(path:key:)`` creates any that are still missing.
    public static func create(path: String, model: Model, key: String? = nil, indexes: [String: [[String]]],
                              deferringLookupIndexes: Bool = false) async throws -> Store {
        try await create(path: path, model: model, key: key, indexes: StoreIndex.list(indexes),
                         deferringLookupIndexes: deferringLookupIndexes)
    }

    /// Creates a new store at `path` for `model` with the indexes an application asked for
    /// (see ``create(path:model:key:indexes:deferringLookupIndexes:)-(_,_,_,[String:[[String]]],_)``).
    public static func create(path: String, model: Model, key: String? = nil, indexes: [StoreIndex] = [],
                              deferringLookupIndexes: Bool = false) async throws -> Store {
        guard !FileManager.default.fileExists(atPath: path) else {
            throw StoreError(.conflict, "\(path) already exists")
        }
        let schema = try StoreSchema(model: model, indexes: indexes)
        let pool = try DatabasePool(path: path, key: key)
        let modelData = try JSONEncoder().encode(model)
        let indexData = try JSONEncoder().encode(indexes)
        let statements = deferringLookupIndexes ? schema.tableStatements() : schema.createStatements()
        try await pool.write { db in
            for statement in statements { try db.execute(statement) }
            try db.execute("INSERT INTO store_meta (key, value) VALUES (?, ?)", [.text("model"), .blob(Array(modelData))])
            try db.execute("INSERT INTO store_meta (key, value) VALUES (?, ?)", [.text("index-list"), .blob(Array(indexData))])
            try db.execute("PRAGMA user_version = \(StoreSchema.version)")
        }
        return Store(schema: schema, pool: pool)
    }

    /// Opens the connections on a thread of their own: opening may wait up to the busy timeout
    /// for a lock another process holds, which must not block a thread of the concurrency pool.
    static func openPool(path: String, key: String?) async throws -> DatabasePool {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global(qos: .userInitiated).async {
                do {
                    continuation.resume(returning: try DatabasePool(path: path, key: key))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    /// Opens an existing store; the key is checked here.
    ///
    /// `indexes`: the indexes the application asks for now. Those it no longer asks for are
    /// dropped and new ones built (before the store is returned); nil keeps the ones the
    /// store has. See also ``applying(indexes:)``.
    public static func open(path: String, key: String? = nil, indexes declared: [StoreIndex]? = nil) async throws -> Store {
        guard FileManager.default.fileExists(atPath: path) else { throw StoreError(.notFound, "No store at \(path)") }
        // SQLite would take an empty file for a new, empty database.
        if Connection.fileSize(path) == 0 {
            throw DatabaseError(.emptyFile, message: "\(path) is empty (0 bytes): it was created but never written")
        }
        let pool = try await openPool(path: path, key: key)
        do {
            let (version, modelBytes, indexBytes, listBytes) = try await pool.read { db -> (Int64, [UInt8]?, [UInt8]?, [UInt8]?) in
                guard case .integer(let version)? = try db.query("PRAGMA user_version").first?.first else { return (0, nil, nil, nil) }
                let hasMeta = try db.query("SELECT count(*) FROM sqlite_master WHERE name = 'store_meta'") == [[.integer(1)]]
                guard hasMeta else { return (version, nil, nil, nil) }
                var model: [UInt8]?
                var indexes: [UInt8]?
                var list: [UInt8]?
                for row in try db.query("SELECT key, value FROM store_meta") {
                    if case .text("model") = row[0], case .blob(let bytes) = row[1] { model = bytes }
                    if case .text("indexes") = row[0], case .blob(let bytes) = row[1] { indexes = bytes }
                    if case .text("index-list") = row[0], case .blob(let bytes) = row[1] { list = bytes }
                }
                return (version, model, indexes, list)
            }
            guard let modelBytes else { throw StoreError(.notAStore, "\(path) is a SQLite database but not an OData store") }
            guard version == StoreSchema.version else {
                throw StoreError(.schemaVersion, "\(path) has store schema version \(version); this release reads version \(StoreSchema.version)")
            }
            let model = try JSONDecoder().decode(Model.self, from: Data(modelBytes))
            // Stores made before issue 22 keep single-property indexes as a dictionary.
            var stored: [StoreIndex] = []
            if let listBytes {
                stored = try JSONDecoder().decode([StoreIndex].self, from: Data(listBytes))
            } else if let indexBytes {
                stored = StoreIndex.list(try JSONDecoder().decode([String: [[String]]].self, from: Data(indexBytes)))
            }
            let store = Store(schema: try StoreSchema(model: model, indexes: declared ?? stored), pool: pool)
            // Changed declarations; or the numbered indexes of an older store, named anew.
            if (declared ?? stored) != stored || (listBytes == nil && !stored.isEmpty) {
                try await store.replaceExtraIndexes(with: declared ?? stored)
            }
            // A store created with deferred indexes whose fill never finished.
            let present = try await pool.read { db in
                Set(try db.query("SELECT name FROM sqlite_master WHERE type = 'index'").compactMap { row -> String? in
                    if case .text(let name) = row[0] { return name }
                    return nil
                })
            }
            try await store.mergePartnerLinkTables()
            if store.schema.lookupIndexes().contains(where: { !present.contains($0.name) }) {
                try await store.createLookupIndexes()
            }
            try await store.prepareLog()
            return store
        } catch {
            pool.close()
            throw error
        }
    }

    /// Closes the store's connections.
    public func close() { pool.close() }

    /// This store with the indexes an application asks for now: those it no longer asks for are
    /// dropped and new ones built. Returns `self` when nothing changed; otherwise a store on the
    /// same connections (use it instead of this one, which must not be closed separately).
    public func applying(indexes declared: [StoreIndex]) async throws -> Store {
        let schema = try StoreSchema(model: model, indexes: declared)
        guard schema.lookupIndexes().map(\.name) != self.schema.lookupIndexes().map(\.name) else { return self }
        let store = Store(schema: schema, pool: pool)
        try await store.replaceExtraIndexes(with: declared)
        try await store.createLookupIndexes()
        return store
    }

    /// Drops the indexes an application asked for that the schema no longer has and records
    /// the new list; ``open(path:key:indexes:)`` then builds the missing ones.
    private func replaceExtraIndexes(with declared: [StoreIndex]) async throws {
        let wanted = Set(schema.lookupIndexes().map(\.name))
        let data = try JSONEncoder().encode(declared)
        try await pool.write { db in
            let present = try db.query("SELECT name FROM sqlite_master WHERE type = 'index'").compactMap { row -> String? in
                if case .text(let name) = row[0] { return name }
                return nil
            }
            for name in present where StoreSchema.isExtraIndexName(name) && !wanted.contains(name) {
                try db.execute("DROP INDEX \(StoreSchema.quote(name))")
            }
            try db.execute("DELETE FROM store_meta WHERE key = 'indexes'")
            try db.execute("INSERT OR REPLACE INTO store_meta (key, value) VALUES ('index-list', ?)", [.blob(Array(data))])
        }
    }

    /// Stores made before both ends of a relationship without a referential constraint shared
    /// one link table kept a table per end: the links of the end that now reads its partner's
    /// table move there (reversed), and its own table goes.
    func mergePartnerLinkTables() async throws {
        var moves: [(old: String, link: StoreSchema.LinkTable)] = []
        for table in schema.tables {
            for nav in table.navigation {
                if case .linkTable(let link) = nav.relation, link.reversed { moves.append(("lk_\(table.entitySet)/\(nav.name)", link)) }
            }
        }
        guard !moves.isEmpty else { return }
        let existing = try await read { reader in
            Set(try reader.connection.query("SELECT name FROM sqlite_master WHERE type = 'table'").compactMap { row -> String? in
                if case .text(let name) = row[0] { return name }
                return nil
            })
        }
        let stale = moves.filter { existing.contains($0.old) }
        guard !stale.isEmpty else { return }
        try await write { writer in
            let q = StoreSchema.quote
            for (old, link) in stale {
                try writer.connection.execute("INSERT OR IGNORE INTO \(q(link.name)) (source, target) SELECT target, source FROM \(q(old))")
                try writer.connection.execute("DROP TABLE \(q(old))")
            }
        }
    }

    /// How many frames the write-ahead log holds before SQLite copies it into the file
    /// (its `wal_autocheckpoint` default).
    static let logFrames = 1_000

    /// Makes the write-ahead log file as long as it gets before its first checkpoint, with
    /// zeros after whatever it holds (bytes past the log's valid frames are never read as
    /// frames: each frame carries the log's salt and a checksum). While the log file grows,
    /// each commit's sync must also write file metadata: commits of a few pages took about
    /// 400 µs here instead of 230 µs, for the first thousand frames after every open. With
    /// the log at its full length from the start (and kept when the store closes), they do
    /// not. Runs in a write transaction that writes nothing, so that no connection (of this
    /// process or another) appends a frame meanwhile.
    func prepareLog() async throws {
        try await pool.write { db in
            guard try db.query("PRAGMA journal_mode").first?.first == .text("wal"),
                  case .integer(let pageSize)? = try db.query("PRAGMA page_size").first?.first else { return }
            let path = db.path + "-wal"
            let target = UInt64(32 + Self.logFrames * (Int(pageSize) + 24))
            if !FileManager.default.fileExists(atPath: path) { _ = FileManager.default.createFile(atPath: path, contents: nil) }
            guard let handle = FileHandle(forWritingAtPath: path) else { return }
            defer { try? handle.close() }
            var size = try handle.seekToEnd()
            guard size < target else { return }
            let zeros = Data(count: 64 * 1024)
            while size < target {
                let chunk = zeros.prefix(Int(min(UInt64(zeros.count), target - size)))
                try handle.write(contentsOf: chunk)
                size += UInt64(chunk.count)
            }
            try handle.synchronize()
        }
    }

    /// Creates the lookup indexes a store made with `deferringLookupIndexes` left out (those
    /// that exist already are kept), in one transaction.
    ///
    /// Building an index sorts every key in memory (temporary data never goes to disk, where
    /// it would not be encrypted). The page cache, full after a bulk fill, is emptied first
    /// and kept small meanwhile, so that the sort does not come on top of it: the index
    /// only reads the table once, in order.
    public func createLookupIndexes() async throws {
        let statements = schema.lookupIndexStatements()
        try await pool.withWriter { db in
            var size: Int64 = -2_000
            if case .integer(let current)? = try db.query("PRAGMA cache_size").first?.first { size = current }
            try db.execute("PRAGMA cache_size = -2048")
            _ = try db.query("PRAGMA shrink_memory")
            defer { try? db.execute("PRAGMA cache_size = \(size)") }
            try db.transaction {
                for statement in statements { try db.execute(statement) }
            }
        }
    }

    /// Runs `body` in one write transaction: every change in it is applied, or none.
    public func write<T: Sendable>(_ body: @escaping @Sendable (StoreWriter) throws -> T) async throws -> T {
        let schema = self.schema
        return try await pool.write { db in try body(StoreWriter(db: db, schema: schema)) }
    }

    /// Frees what the readers' page caches hold; they fill again as reads need. A download
    /// calls it first: its reads and writes go through the writer, and three full caches at
    /// once were most of its peak memory.
    public func releaseReaderCaches() async { await pool.releaseReaderCaches() }

    /// Frees what the page caches of all the store's connections hold (with a key, up to
    /// 32 MiB each: the writer's and each reader's); they fill again as reads and writes need.
    /// A write in progress finishes first; nothing fails meanwhile.
    public func releaseMemory() async { await pool.releaseMemory() }

    /// The bytes the page caches of the store's connections hold now.
    public func pageCacheBytes() async -> Int { await pool.pageCacheBytes() }

    /// Limits the writer's page cache to `kibibytes` (a smaller cache stays as it is) and frees
    /// what it holds beyond that; returns the setting to give back to
    /// ``restoreWriterCache(_:)``. Other writes wait meanwhile.
    public func limitWriterCache(kibibytes: Int) async throws -> Int64 {
        try await pool.withWriter { db in
            guard case .integer(let current)? = try db.query("PRAGMA cache_size").first?.first,
                case .integer(let pageSize)? = try db.query("PRAGMA page_size").first?.first
            else { return -2_000 }
            // Negative: KiB; positive: pages.
            let currentKiB = current < 0 ? -current : current * pageSize / 1_024
            if currentKiB > Int64(kibibytes) {
                try db.execute("PRAGMA cache_size = -\(kibibytes)")
                _ = try db.query("PRAGMA shrink_memory")
            }
            return current
        }
    }

    /// Gives the writer's page cache the setting ``limitWriterCache(kibibytes:)`` returned.
    public func restoreWriterCache(_ setting: Int64) async throws {
        try await pool.withWriter { db in try db.execute("PRAGMA cache_size = \(setting)") }
    }

    /// How long a write transaction's commit waits for the disk.
    public enum CommitDurability: Sendable {
        /// Until the write-ahead log is on the disk (`synchronous = FULL`): the commit survives
        /// a power loss. For what cannot be made again: a person's change, a recorded answer.
        case durable
        /// Until the operating system has the log (`synchronous = NORMAL`): the commit survives
        /// the process being killed, and a power loss may undo it, never damage the file. For
        /// work that is done again when lost (a download: its next run fetches the same rows).
        /// The next durable commit makes it durable too, since the log is written in order.
        case redoable
    }

    /// Runs `body` in one write transaction whose commit waits for the disk as `durability`
    /// says. Other writes wait meanwhile, and run with their own durability after it.
    public func write<T: Sendable>(
        _ durability: CommitDurability, _ body: @escaping @Sendable (StoreWriter) throws -> T
    ) async throws -> T {
        guard durability == .redoable else { return try await write(body) }
        let schema = self.schema
        return try await pool.withWriter { db in
            // Only lowered from FULL or EXTRA (a bulk fill runs with less already), and set back.
            let level = try db.query("PRAGMA synchronous").first?.first
            var restore: Int64?
            // Not inside a write group (its transaction), where the level cannot change.
            if case .integer(let value)? = level, value >= 2, !db.isInTransaction {
                try db.execute("PRAGMA synchronous = NORMAL")
                restore = value
            }
            let result = Result { try db.transaction { try body(StoreWriter(db: db, schema: schema)) } }
            // A level not set back would leave later local changes without their sync: said,
            // never passed over.
            if let restore { try db.execute("PRAGMA synchronous = \(restore)") }
            return try result.get()
        }
    }

    /// Runs a short write transaction on the calling thread: no hop to the writer's queue and
    /// back (two thread switches, which cost more than a one-row change). It waits for a write
    /// in progress. Keep it to single changes; long work belongs in ``write(_:)``.
    public func writeInline<T: Sendable>(_ body: @escaping @Sendable (StoreWriter) throws -> T) async throws -> T {
        let schema = self.schema
        return try await pool.write(inline: true) { db in try body(StoreWriter(db: db, schema: schema)) }
    }

    /// Runs `body` on a consistent snapshot.
    public func read<T: Sendable>(_ body: @escaping @Sendable (StoreReader) throws -> T) async throws -> T {
        let schema = self.schema
        return try await pool.read { db in try body(StoreReader(db: db, schema: schema)) }
    }

    /// Writes a consistent copy of the store to a new file at `path`, encrypted with `key` or
    /// unencrypted when `key` is nil. Writes wait while the copy is made.
    public func exportCopy(to path: String, key: String?) async throws {
        try await pool.withWriter { db in try db.export(to: path, key: key) }
    }

    /// One table of a file ``exportTables(to:key:_:)`` writes: `name`, made from the rows
    /// `select` (an SQL query over the store, with `arguments` bound) gives.
    public struct ExportedTable: Sendable {
        /// The table's name in the new file.
        public var name: String
        /// The query whose rows the table holds (over the store's tables, as `main.…`).
        public var select: String
        /// The values bound to the query's `?` parameters.
        public var arguments: [DatabaseValue]

        /// Creates a value from its parts.
        public init(name: String, select: String, arguments: [DatabaseValue] = []) {
            self.name = name
            self.select = select
            self.arguments = arguments
        }
    }

    /// Writes a new file at `path`, encrypted with `key` or unencrypted when `key` is nil, that
    /// holds only `tables`, taken from one consistent state of the store. Writes wait meanwhile.
    public func exportTables(to path: String, key: String?, _ tables: [ExportedTable]) async throws {
        try await pool.withWriter { db in
            try db.execute("ATTACH DATABASE ? AS exported KEY ?", [.text(path), .text(key ?? "")])
            defer { try? db.execute("DETACH DATABASE exported") }
            if key != nil { try db.execute("PRAGMA exported.cipher_page_size = \(Connection.cipherPageSize)") }
            try db.transaction {
                for table in tables {
                    _ = try db.execute(
                        "CREATE TABLE exported.\(StoreSchema.quote(table.name)) AS \(table.select)", table.arguments)
                }
            }
        }
    }

    /// Whether the store is being filled in bulk, for a new store whose fill is started
    /// again from nothing when it is cut short (the caller must be able to tell, without
    /// reading the file). On, the writer keeps its rollback journal in memory instead of a
    /// write-ahead log and does not wait for the disk: each page is written once, to the
    /// file itself, instead of to the log and then to the file. A crash can then leave the
    /// file damaged, which is why only a fill that is redone may use it. Off (before the
    /// commit that completes the fill), the store is back in WAL mode with durable commits,
    /// and that commit makes everything before it durable. Nothing changes, and false is
    /// returned, while another connection has the file open.
    @discardableResult
    public func setBulkFill(_ on: Bool) async throws -> Bool {
        let changed = try await pool.withWriter { db in
            let mode: DatabaseValue?
            // The log is kept when it closes (`SQLITE_FCNTL_PERSIST_WAL`), frames and all: they
            // would be read again, over pages the fill writes to the file, when the store is
            // back in WAL mode. Leaving WAL mode empties it instead.
            if on { _ = try db.query("PRAGMA journal_size_limit = 0") }
            defer { if on { _ = try? db.query("PRAGMA journal_size_limit = -1") } }
            do {
                mode = try db.query("PRAGMA journal_mode = \(on ? "MEMORY" : "WAL")").first?.first
            } catch let error as DatabaseError where on && error.code == .busy {
                // Another connection has the file open: the log stays.
                mode = nil
            }
            let changed = mode == .text(on ? "memory" : "wal")
            // In WAL mode (when the journal could not change), commits wait for the operating
            // system only (`synchronous = NORMAL`).
            try db.execute("PRAGMA synchronous = \(!on ? "FULL" : changed ? "OFF" : "NORMAL")")
            // A fill appends rows in key order: it only touches the last pages of each table and
            // index, so a small page cache does (the full one is 32 MiB of memory for nothing).
            try db.execute("PRAGMA cache_size = -\(on ? 2_048 : self.pool.isEncrypted ? Connection.keyedCacheKiB : 2_000)")
            return changed
        }
        if !on { try await prepareLog() }
        return changed
    }

    /// Opens a write group on the writer: the writes that follow join one transaction, without
    /// a savepoint each, until ``commitWriteGroup()`` (see ``Connection/beginWriteGroup()``).
    /// For a bulk fill (``setBulkFill(_:)``) from small pages: each commit writes every page it
    /// changed, and an index whose new rows land all over it (a foreign key's) has many such
    /// pages. Committed once per page of 1,000 rows, the first open of 1M rows took 1.7 times
    /// as long as at 5,000 rows per page. Other connections see none of the group's writes
    /// before its commit (they may have to wait for the file's lock meanwhile); a write that
    /// fails leaves the group to be rolled back whole (closing the store does). Until the
    /// commit, `withWriter` work runs inside the group: no journal mode or key change then.
    /// In a bulk fill's memory journal the group keeps a copy of each page that existed when
    /// it began and that it changes: with a foreign key whose values come in random order,
    /// up to most of that key's index.
    package func beginWriteGroup() async throws {
        try await pool.withWriter { db in try db.beginWriteGroup() }
    }

    /// What the writer has written so far: the pages its cache wrote to the file (commits and
    /// spills, ``Connection/pagesWritten``) and the pages in use in the file (its size without
    /// its free pages, which an index dropped leaves). A bulk fill compares the two between
    /// commits: a fill that writes many more pages than the file grows by is rewriting index
    /// pages its cache cannot hold.
    package func writerPageCounts() async throws -> (written: Int, fileSize: Int) {
        try await pool.withWriter { db in
            guard case .integer(let pages)? = try db.query("PRAGMA page_count").first?.first,
                case .integer(let free)? = try db.query("PRAGMA freelist_count").first?.first
            else {
                return (db.pagesWritten, 0)
            }
            return (db.pagesWritten, Int(pages - free))
        }
    }

    /// Drops the lookup indexes (see ``createLookupIndexes()``) on the tables of `entitySets`
    /// (foreign keys, the indexes asked for), for a bulk fill to build them once at its end;
    /// returns their names. Link tables keep theirs: making a link deletes by its target.
    /// Outside a write group.
    package func dropLookupIndexes(ofEntitySets entitySets: Set<String>) async throws -> [String] {
        let tables = Set(entitySets.compactMap { schema.table(forEntitySet: $0)?.name })
        let names = schema.lookupIndexesByTable().filter { tables.contains($0.table) }.map(\.name)
        guard !names.isEmpty else { return [] }
        try await pool.write { db in
            for name in names { try db.execute("DROP INDEX IF EXISTS \(StoreSchema.quote(name))") }
        }
        return names
    }

    /// Commits the open write group (see ``beginWriteGroup()``); nothing when none is open.
    /// Throws, having rolled the group back, when one of its writes failed.
    package func commitWriteGroup() async throws {
        try await pool.withWriter { db in try db.commitWriteGroup() }
    }

    /// Changes the key of an encrypted store file (`nil` is not allowed; export to remove a
    /// key). An unencrypted store is refused: SQLCipher cannot key a plain file in place (it
    /// would stay plaintext); ``encrypt(path:key:)`` writes it encrypted.
    public func rekey(to newKey: String) async throws {
        guard pool.isEncrypted else {
            throw StoreError(.unsupported, "\(pool.path) is not encrypted, so it has no key to change; "
                             + "Store.encrypt(path:key:) (oodata store encrypt) encrypts it")
        }
        try await pool.write { db in try db.rekey(to: newKey) }
    }

    /// Encrypts the unencrypted store file at `path` with `key`: writes an encrypted copy beside
    /// it and moves it into place. No other connection or process may have the file open: writes
    /// made through one after the copy would be lost.
    public static func encrypt(path: String, key: String) throws {
        guard !key.isEmpty else { throw StoreError(.unsupported, "An empty key cannot encrypt \(path)") }
        let copy = path + ".encrypting"
        try? FileManager.default.removeItem(atPath: copy)
        do {
            // (Opened with the create flag: ATTACH creates the copy with the main file's flags.)
            var options = Connection.Options()
            options.walMode = false
            let plain = try Connection(path: path, options: options)
            defer { plain.close() }
            // Everything into the main file and out of WAL mode first: a plaintext log left
            // beside the encrypted file would be replayed over it.
            _ = try plain.query("PRAGMA wal_checkpoint(TRUNCATE)")
            _ = try plain.query("PRAGMA journal_mode = DELETE")
            try plain.export(to: copy, key: key)
        } catch {
            try? FileManager.default.removeItem(atPath: copy)
            throw error
        }
        // The copy is complete and keyed: check it, then replace the plain file and its log.
        var checkOptions = Connection.Options(key: key)
        checkOptions.walMode = false
        let check = try Connection(path: copy, options: checkOptions)
        check.close()
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: copy + suffix) }
        // rename(2) replaces the file in one step: the plain store is there until the encrypted
        // one is (FileManager.replaceItemAt on Linux removes the original first).
        guard rename(copy, path) == 0 else {
            let reason = String(cString: strerror(errno))
            try? FileManager.default.removeItem(atPath: copy)
            throw StoreError(.unsupported, "\(path) could not be replaced by its encrypted copy: \(reason)")
        }
        // The plain store's log and shared memory belong to the old file.
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }
}
