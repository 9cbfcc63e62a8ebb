import Foundation
import ODataCore
import OfflineOData

/// What the refresher needs to refresh one scope off the request path: its query, and the
/// credentials of the device that last read it through this instance (kept in memory only, for
/// ``GatewayConfiguration/refresherKeeps`` seconds after that read; the gateway's own for
/// shared data).
struct RefreshJob: Sendable {
    var scope: Int64
    var backend: String
    var query: TrackedQuery
    var keyNames: [String]
    var legacy: Bool
    var authorization: HTTPHeaders
    /// The scope's refresh target, seconds.
    var interval: Double
    /// Shared data: read with the gateway's own credentials as the configuration in force has
    /// them (a reload that changes `shared_authorization` takes effect on the next refresh).
    var shared = false
    var until = Date.distantFuture

    /// The credentials a refresh of it sends to `backend`.
    func credentials(for backend: GatewayBackend) -> HTTPHeaders {
        shared ? Gateway.shared(backend) : authorization
    }
}

/// The scopes this instance's refresher keeps fresh.
actor RefreshJobs {
    private var jobs: [Int64: RefreshJob] = [:]
    /// The most scopes one instance keeps fresh for its devices.
    static let limit = 10_000

    /// Keeps `job`'s scope fresh for `keep` seconds from now (the device's credentials replace
    /// those kept before).
    func note(_ job: RefreshJob, keep: Double) {
        var job = job
        job.until = Date().addingTimeInterval(keep)
        if jobs[job.scope] == nil, jobs.count >= Self.limit { dropExpired() }
        guard jobs[job.scope] != nil || jobs.count < Self.limit else { return }
        jobs[job.scope] = job
    }

    /// The job of `scope`, while this instance keeps it fresh.
    func job(_ scope: Int64) -> RefreshJob? {
        guard let job = jobs[scope], job.until > Date() else { return nil }
        return job
    }

    /// Stops keeping `scope` fresh (its credentials were refused).
    func forget(_ scope: Int64) { jobs[scope] = nil }

    /// The scopes to keep fresh now.
    func current() -> [RefreshJob] {
        dropExpired()
        return Array(jobs.values)
    }

    private func dropExpired() {
        let now = Date()
        jobs = jobs.filter { $0.value.until > now }
    }
}

/// When the refresher refreshes a scope: ahead of its target, so that a device reading it at
/// its target's end is answered at once; or at once when a change that could not be written
/// through made it due. A value type, tested without PostgreSQL.
struct RefreshSchedule: Sendable {
    /// The part of its target after which a scope is refreshed ahead of devices.
    static let ahead = 0.8

    /// Whether a scope whose last refresh began `age` seconds ago (nil: never) is due.
    static func isDue(age: Double?, marked: Bool, interval: Double) -> Bool {
        guard interval > 0 else { return false }
        guard let age else { return true }
        return marked || age >= interval * ahead
    }
}

extension Gateway {
    /// How often the refresher looks for due scopes, seconds.
    static let refresherTick = 1.0
    /// How many scopes one instance's refresher refreshes at once.
    static let refresherWidth = 4

    /// Refreshes the scopes this instance's devices read, each once per refresh target across all
    /// instances (the scope's lock is tried, never waited for, and a refresh another instance
    /// began within the target skips it), until the task is cancelled (SPEC §13, "Refresh").
    public func runRefresher() async {
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: .milliseconds(Int64(Self.refresherTick * 1000)))
            } catch {
                return
            }
            await refreshDueScopes()
        }
    }

    /// One round of the refresher.
    func refreshDueScopes() async {
        let jobs = await refreshJobs.current().filter { $0.interval > 0 }
        guard !jobs.isEmpty else { return }
        let states: [GatewayStore.RefreshState]
        do {
            states = try await store.refreshStates(jobs.map(\.scope))
        } catch {
            logger.notice("The refresher cannot read scope states", metadata: ["error": "\(error)"])
            return
        }
        let byScope = Dictionary(jobs.map { ($0.scope, $0) }, uniquingKeysWith: { a, _ in a })
        let due = states.compactMap { state -> (RefreshJob, GatewayStore.RefreshState)? in
            guard let job = byScope[state.id],
                RefreshSchedule.isDue(age: state.age, marked: state.marked, interval: job.interval)
            else { return nil }
            return (job, state)
        }
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            for (job, state) in due {
                if running >= Self.refresherWidth {
                    await group.next()
                    running -= 1
                }
                group.addTask { await self.refreshInBackground(job, state: state) }
                running += 1
            }
        }
    }

    func refreshInBackground(_ job: RefreshJob, state: GatewayStore.RefreshState) async {
        guard let backend = configuration.backends.first(where: { $0.url == job.backend }) else { return }
        let scope = GatewayStore.Scope(id: state.id, published: 0, floor: 0, due: true, arrival: state.now)
        let started = ContinuousClock.now
        do {
            let summary = try await refresh(
                scope, query: job.query, backend: backend, keyNames: job.keyNames, legacy: job.legacy,
                authorization: job.credentials(for: backend), interval: job.interval * RefreshSchedule.ahead,
                waits: false)
            guard summary.ran else { return }
            metrics.backgroundRefreshes.increment()
            metrics.refreshes.increment()
            metrics.rowsChanged.increment(by: summary.changed)
            metrics.rowsRemoved.increment(by: summary.removed)
            metrics.refreshTime.record(duration: ContinuousClock.now - started)
            await housekeep()
        } catch let answer as BackendAnswer {
            // Credentials refused: the scope waits for a device's next read (and its credentials).
            if [401, 403].contains(answer.response.status) {
                await refreshJobs.forget(job.scope)
                if job.shared { logSharedRefusal(answer.response.status, backend: backend, query: job.query.canonical) }
            }
            try? await store.noteRefreshError(
                scope: job.scope,
                "the backend answered \(answer.response.status)"
                    + (job.shared && [401, 403].contains(answer.response.status) ? " to shared_authorization" : ""))
        } catch {
            logger.notice(
                "A refresh off the request path failed",
                metadata: ["query": .string(job.query.canonical), "error": "\(error)"])
            try? await store.noteRefreshError(scope: job.scope, "\(error)")
        }
    }

    /// The endpoint's shared credentials were refused: the operator's to fix, said as an error.
    func logSharedRefusal(_ status: Int, backend: GatewayBackend, query: String) {
        logger.error(
            "The backend refused the shared credentials (shared_authorization)",
            metadata: ["backend": .string(backend.url), "query": .string(query), "status": "\(status)"])
    }
}
