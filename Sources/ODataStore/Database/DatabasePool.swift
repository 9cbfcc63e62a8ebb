import CSQLCipher
import Dispatch
import Foundation

/// A connection confined to its own serial queue. Work is sent to the queue and awaited, so the
/// connection is only ever touched by one thread at a time and never escapes the closure.
public final class SerializedConnection: @unchecked Sendable {
    // @unchecked Sendable: `connection` is only touched while holding `lock` (on `queue`, or
    // inline on the caller's thread), so no two threads touch it at once.
    private let connection: Connection
    private let queue: DispatchQueue
    private let lock = NSLock()

    /// Creates a value from its parts.
    public init(path: String, options: Connection.Options, label: String) throws(DatabaseError) {
        self.connection = try Connection(path: path, options: options)
        self.queue = DispatchQueue(label: label)
    }

    /// Runs `body` with the connection on its queue. With `inline`, `body` runs on the calling
    /// thread instead (still one at a time): for short work, where the two thread switches of
    /// the queue would cost more than the work itself.
    public func run<T: Sendable>(inline: Bool = false, _ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        if inline { return try lock.withLock { try body(connection) } }
        return try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result { try self.lock.withLock { try body(self.connection) } })
            }
        }
    }

    /// Runs `body` synchronously on the queue (for setup and tests).
    public func runSync<T>(_ body: (Connection) throws -> T) rethrows -> T {
        try queue.sync { try lock.withLock { try body(connection) } }
    }

    func close() { queue.sync { lock.withLock { connection.close() } } }
}

/// One writer and a small pool of readers over the same file in WAL mode: reads see the last
/// committed state and never wait for a long write.
public final class DatabasePool: Sendable {
    public let path: String
    /// Whether the file was opened with a key (is encrypted).
    public let isEncrypted: Bool
    private let writer: SerializedConnection
    private let readers: [LazyConnection]
    private let counter = RoundRobin()

    /// Opens the pool; with a key, the key is checked at open. Readers are opened at their
    /// first read: with a key, every connection derives it (64,000 PBKDF2 rounds), so an open
    /// that only writes, or reads little, does not pay for readers it does not use.
    public init(path: String, key: String? = nil, readerCount: Int = 2) throws(DatabaseError) {
        self.path = path
        self.isEncrypted = key != nil
        var options = Connection.Options(key: key)
        options.walMode = true
        self.writer = try SerializedConnection(path: path, options: options, label: "ODataStore.writer")
        var readerOptions = options
        readerOptions.create = false
        readerOptions.walMode = false
        self.readers = (0..<max(1, readerCount)).map { index in
            LazyConnection(path: path, options: readerOptions, label: "ODataStore.reader\(index)")
        }
    }

    /// Frees what the page caches of the readers opened so far hold (`PRAGMA shrink_memory`);
    /// they fill again as reads need. For long writes during which the readers are idle (a
    /// download), so that the writer's cache does not come on top of theirs.
    public func releaseReaderCaches() async {
        for reader in readers where reader.isOpened {
            guard let connection = try? reader.connection() else { continue }
            _ = try? await connection.run { db in try db.query("PRAGMA shrink_memory") }
        }
    }

    /// Frees what every page cache holds, the writer's (after the write in progress, if any)
    /// and the readers'; they fill again as reads and writes need. With glibc, the freed memory
    /// is also given back to the system (`malloc_trim`): glibc would otherwise keep it in its
    /// arenas for the process's next allocations, and the app's resident memory would barely fall.
    public func releaseMemory() async {
        await releaseReaderCaches()
        // On the writer's queue: trimming walks every arena, which may take milliseconds.
        _ = try? await writer.run { db in
            _ = try? db.query("PRAGMA shrink_memory")
            csqlcipher_return_free_memory()
        }
    }

    /// The bytes the page caches of the writer and of the readers opened so far hold.
    public func pageCacheBytes() async -> Int {
        var total = (try? await writer.run { db in db.pageCacheBytes }) ?? 0
        for reader in readers where reader.isOpened {
            guard let connection = try? reader.connection() else { continue }
            total += (try? await connection.run { db in db.pageCacheBytes }) ?? 0
        }
        return total
    }

    /// How many readers have been opened so far (for tests).
    var openedReaders: Int { readers.filter(\.isOpened).count }

    /// Runs `body` in a write transaction on the writer (`inline`: on the calling thread, for
    /// short transactions).
    public func write<T: Sendable>(inline: Bool = false, _ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        try await writer.run(inline: inline) { connection in try connection.transaction { try body(connection) } }
    }

    /// Runs `body` on the writer outside any transaction (for statements that cannot run in
    /// one, such as `ATTACH`); other writes wait.
    public func withWriter<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        try await writer.run { connection in try body(connection) }
    }

    /// Runs `body` on a reader, inside a read transaction so it sees one consistent snapshot.
    public func read<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        let reader = try readers[counter.next(readers.count)].connection()
        return try await reader.run { connection in
            try connection.execute("BEGIN DEFERRED")
            defer { try? connection.execute("COMMIT") }
            return try body(connection)
        }
    }

    /// Closes every connection.
    public func close() {
        for reader in readers { reader.close() }
        writer.close()
    }
}

/// A connection opened at its first use.
final class LazyConnection: @unchecked Sendable {
    // @unchecked Sendable: `opened` and `closed` are only read and written while holding `lock`.
    private let lock = NSLock()
    private var opened: SerializedConnection?
    private var closed = false
    private let path: String
    private let options: Connection.Options
    private let label: String

    init(path: String, options: Connection.Options, label: String) {
        self.path = path
        self.options = options
        self.label = label
    }

    var isOpened: Bool {
        lock.lock()
        defer { lock.unlock() }
        return opened != nil
    }

    /// The connection, opened now if this is its first use.
    func connection() throws(DatabaseError) -> SerializedConnection {
        lock.lock()
        defer { lock.unlock() }
        if let opened { return opened }
        guard !closed else { throw DatabaseError(.closed, message: "The connection pool of \(path) is closed") }
        let connection = try SerializedConnection(path: path, options: options, label: label)
        opened = connection
        return connection
    }

    func close() {
        lock.lock()
        let connection = opened
        opened = nil
        closed = true
        lock.unlock()
        connection?.close()
    }
}

/// A thread-safe counter for spreading reads over the readers.
final class RoundRobin: @unchecked Sendable {
    // @unchecked Sendable: `value` is only read and written while holding `lock`.
    private let lock = NSLock()
    private var value = 0

    func next(_ count: Int) -> Int {
        lock.lock()
        defer { lock.unlock() }
        value = (value + 1) % max(1, count)
        return value
    }
}
