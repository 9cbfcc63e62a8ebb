import Foundation
import Logging
import PostgresNIO

/// PostgreSQL did not answer in time: the server is down, restarting or unreachable, or every
/// connection is taken. Names the server, so that an operator knows which one.
public struct PostgresDeadlineExceeded: Error, CustomStringConvertible {
    /// The server, as `host:port, database NAME`.
    public var server: String
    public var seconds: Double
    public var description: String { "PostgreSQL (\(server)) did not answer within \(seconds) s" }
}

/// The gateway's PostgreSQL client: every statement sent on its own has a deadline, and so has
/// a probe (`SELECT 1`) before each lease of a connection (a request made while PostgreSQL is
/// down is answered, never left hanging). The lease itself then waits on the pool, which runs
/// dry only with every connection in use. Work on a leased connection (a refresh reading the
/// backend, a lock wait) has no deadline of its own: a connection whose server went away fails
/// it.
struct DeadlineClient: Sendable {
    let base: PostgresClient
    let deadline: Double
    /// Which server, for messages: `host:port, database NAME` (never the password).
    let server: String

    init(_ base: PostgresClient, deadline: Double, server: String) {
        self.base = base
        self.deadline = deadline
        self.server = server
    }

    /// One statement, answered within the deadline (its rows are read from the sequence).
    @discardableResult
    func query(_ query: PostgresQuery, logger: Logger? = nil) async throws -> PostgresRowSequence {
        let base = self.base
        return try await within { try await base.query(query, logger: logger) }
    }

    /// Runs `body` on a leased connection, once PostgreSQL answered within the deadline.
    func withConnection<Result: Sendable>(_ body: (PostgresConnection) async throws -> Result) async throws -> Result {
        try await reachable()
        return try await base.withConnection(body)
    }

    /// Runs `body` in a transaction, once PostgreSQL answered within the deadline.
    func withTransaction<Result: Sendable>(
        logger: Logger, _ body: (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        try await reachable()
        do {
            return try await base.withConnection { connection in
                try await connection.withTransaction(logger: logger) { try await body($0) }
            }
        } catch let error as PostgresTransactionError {
            // The body's own error (a backend's answer, a bad page) is what the caller handles;
            // the transaction was rolled back. A rollback that failed too goes with the
            // connection, and the error says so.
            if let closure = error.closureError, error.rollbackError == nil { throw closure }
            throw error
        }
    }

    /// Whether a connection can be leased and answers now (`SELECT 1` within the deadline).
    func reachable() async throws {
        let base = self.base
        _ = try await within { try await base.query("SELECT 1") }
    }

    /// `operation`'s result, or ``PostgresDeadlineExceeded`` after the deadline (the operation
    /// is cancelled and left to end on its own: a lease waiting in the pool may not end at once).
    func within<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) async throws -> T {
        try await Self.within(deadline, server: server, operation)
    }

    /// `operation`'s result, or ``PostgresDeadlineExceeded`` naming `server` after `deadline` seconds.
    static func within<T: Sendable>(
        _ deadline: Double, server: String, _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let once = Once()
        let failure = PostgresDeadlineExceeded(server: server, seconds: deadline)
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let work = Task {
                do {
                    let value = try await operation()
                    if await once.claim() { continuation.resume(returning: value) }
                } catch {
                    if await once.claim() { continuation.resume(throwing: error) }
                }
            }
            let timer = Task {
                guard await Self.waitOut(deadline) else { return }
                if await once.claim() {
                    work.cancel()
                    continuation.resume(throwing: failure)
                }
            }
            Task { await once.set(timer) }
        }
    }

    /// Sleeps `seconds`; false when cancelled first. Time this process could not run is not
    /// PostgreSQL's: a timer that wakes more than a quarter second late (every thread of the
    /// concurrency pool was busy, so an answer that came may not have been taken yet) waits as
    /// long again, at most three times. `sleep` sleeps until an instant and returns when it woke.
    static func waitOut(
        _ seconds: Double,
        sleep: @Sendable (ContinuousClock.Instant) async throws -> ContinuousClock.Instant = { wake in
            try await Task.sleep(until: wake, clock: ContinuousClock())
            return ContinuousClock.now
        }
    ) async -> Bool {
        var wake = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        for round in 0...3 {
            guard let woke = try? await sleep(wake) else { return false }
            let late = woke - wake
            guard late > .milliseconds(250), round < 3 else { break }
            wake = woke + late
        }
        return !Task.isCancelled
    }

    /// Lets one of two racers resume a continuation; the first to claim it stops the timer.
    actor Once {
        private var done = false
        private var timer: Task<Void, Never>?

        func set(_ timer: Task<Void, Never>) {
            if done { timer.cancel() } else { self.timer = timer }
        }

        func claim() -> Bool {
            defer { done = true }
            timer?.cancel()
            return !done
        }
    }

    /// How `configuration` names its server in messages.
    static func describe(_ configuration: PostgresClient.Configuration) -> String {
        let place =
            configuration.unixSocketPath ?? "\(configuration.host ?? "?"):\(configuration.port.map(String.init) ?? "?")"
        return "\(place), database \(configuration.database ?? configuration.username), user \(configuration.username)"
    }
}
