import Foundation
import ODataCore

/// The configuration in force as the admin API shows it: every secret left out.
public struct ConfigurationSummary: Sendable, Codable, Equatable {
    public struct Backend: Sendable, Codable, Equatable {
        public var name: String
        public var url: String
        public var trackDeltas: String
        public var sharedQueries: [String]
        public var sharedAuthorization: Bool
        public var jwtIssuers: [String]
        public var identityCookies: [String]
        public var prepopulate: String
        public var supportsBatch: Bool
        public var deviceThrottle: String?
        public var userThrottle: String?
        /// The largest support store, in bytes, how long one is kept, in seconds, and the most
        /// bytes all of the endpoint's stores take together.
        public var supportStoreLimit: Int64
        public var supportStoreRetention: Double
        public var supportStoreTotalLimit: Int64
    }

    public var backends: [Backend]
    public var refreshInterval: Double
    public var tombstoneRetention: Double
    public var scopeRetention: Double
    public var requestRetention: Double
    public var inDoubtAfter: Double
    public var pageSize: Int
    public var postgresTimeout: Double
    public var backendTimeout: Double
    /// How the admin API is reached: `token`, `basic`, or both.
    public var adminAccess: [String]
}

/// What `POST /api/scopes/<id>/refresh` did.
public struct AdminRefreshOutcome: Sendable, Codable, Equatable {
    public var scope: Int64
    /// `refreshed` (this instance held credentials for it and refreshed it now), or `markedDue`
    /// (the next device read, on any instance, refreshes it; as does a refresher that holds its
    /// credentials).
    public var outcome: String
    public var rows: Int?
    public var changed: Int?
    public var removed: Int?
    public var error: String?
}

extension GatewayConfiguration {
    /// The configuration without its secrets.
    public var summary: ConfigurationSummary {
        ConfigurationSummary(
            backends: backends.map { backend in
                .init(
                    name: backend.name, url: backend.url, trackDeltas: backend.trackDeltas.rawValue,
                    sharedQueries: backend.sharedQueries.sorted(),
                    sharedAuthorization: backend.sharedAuthorization != nil,
                    jwtIssuers: backend.jwtVerification.map(\.issuer), identityCookies: backend.identityCookies,
                    prepopulate: backend.prepopulate.rawValue, supportsBatch: backend.supportsBatch,
                    deviceThrottle: backend.deviceThrottle?.description,
                    userThrottle: backend.userThrottle?.description,
                    supportStoreLimit: backend.supportStoreLimit, supportStoreRetention: backend.supportStoreRetention,
                    supportStoreTotalLimit: backend.supportStoreTotalLimit
                )
            },
            refreshInterval: refreshInterval, tombstoneRetention: tombstoneRetention, scopeRetention: scopeRetention,
            requestRetention: requestRetention, inDoubtAfter: inDoubtAfter, pageSize: pageSize,
            postgresTimeout: postgresTimeout, backendTimeout: backendTimeout,
            adminAccess: (admin?.token != nil ? ["token"] : []) + (admin?.user != nil ? ["basic"] : []))
    }
}

extension Gateway {
    /// Puts this instance on standby (`/readyz` answers 503, so that load balancers send no new
    /// devices) or back; requests that come are still served.
    public func setStandby(_ standby: Bool) async {
        await operations.setStandby(standby)
        logger.notice(standby ? "On standby: /readyz answers 503" : "Back from standby")
    }

    /// Whether this instance is on standby.
    public var isOnStandby: Bool { get async { await operations.standby } }

    /// Makes scope `id` due and refreshes it now when this instance holds credentials for it
    /// (a device read it through this instance within ``GatewayConfiguration/refresherKeeps``,
    /// or it is shared data); otherwise the next read of it, on any instance, refreshes it. Nil
    /// when there is no such scope.
    public func refreshNow(scope id: Int64) async throws -> AdminRefreshOutcome? {
        guard let marked = try await store.markDue(scope: id) else { return nil }
        var job = await refreshJobs.job(id)
        if job == nil, marked.user.isEmpty,
            let backend = configuration.backends.first(where: { $0.url == marked.backend }),
            backend.isShared(marked.query)
        {
            // Shared data: the gateway's own credentials read it, whoever asked last.
            let model = try await models.model(for: backend, credentials: Self.shared(backend), gateway: self)
            let tracked = try TrackedQuery(target: marked.query)
            let set = tracked.path.removingPercentEncoding ?? tracked.path
            if let type = model.entityType(ofEntitySet: set) {
                job = RefreshJob(
                    scope: id, backend: backend.url, query: tracked, keyNames: model.key(of: type).map(\.name),
                    legacy: model.version.isLegacy, authorization: Self.shared(backend),
                    interval: backend.refreshInterval(marked.query, default: configuration.refreshInterval),
                    shared: true)
            }
        }
        guard let job, let backend = configuration.backends.first(where: { $0.url == job.backend }),
            let scope = try await store.scope(id: id)
        else { return AdminRefreshOutcome(scope: id, outcome: "markedDue") }
        do {
            let summary = try await refresh(
                scope, query: job.query, backend: backend, keyNames: job.keyNames, legacy: job.legacy,
                authorization: job.credentials(for: backend), interval: 0)
            metrics.refreshes.increment()
            return AdminRefreshOutcome(
                scope: id, outcome: "refreshed", rows: summary.rows, changed: summary.changed,
                removed: summary.removed)
        } catch let answer as BackendAnswer {
            let status = answer.response.status
            let refusedShared = job.shared && [401, 403].contains(status)
            if refusedShared { logSharedRefusal(status, backend: backend, query: job.query.canonical) }
            let said = "the backend answered \(status)" + (refusedShared ? " to shared_authorization" : "")
            try? await store.noteRefreshError(scope: id, said)
            return AdminRefreshOutcome(scope: id, outcome: "markedDue", error: said)
        } catch {
            try? await store.noteRefreshError(scope: id, "\(error)")
            return AdminRefreshOutcome(scope: id, outcome: "markedDue", error: "\(error)")
        }
    }
}

extension Gateway {
    /// Records an operator's word on a request in doubt of `backend` (with or without its final
    /// `/`): false when it is not in doubt (decided already, unknown, or forwarded right now).
    public func resolveInDoubt(backend: String, requestID: String, applied: Bool) async throws -> Bool {
        let root = backend.hasSuffix("/") ? backend : backend + "/"
        guard try await store.resolveInDoubt(backend: root, requestID: requestID, applied: applied) else {
            return false
        }
        logger.notice(
            "An operator resolved a request in doubt",
            metadata: ["request": .string(requestID), "applied": .stringConvertible(applied)])
        return true
    }
}
