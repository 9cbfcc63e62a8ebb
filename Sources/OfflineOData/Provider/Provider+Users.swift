import Foundation
import ODataCore
import ODataStore

/// Shared devices (SPEC §16): one store, several users in turn.
extension OfflineODataProvider {
    /// The user the store belongs to now (``OfflineODataParameters/currentUser`` once the store
    /// is open); nil for a store without users.
    public func currentUser() async throws -> String? {
        let store = try openStore()
        return try await store.read { reader in try StoreUsers.load(reader.connection) }.current
    }

    /// The user who had the store before the current one (SAP's `getPreviousUser()`); nil when
    /// it never changed hands.
    public func previousUser() async throws -> String? {
        let store = try openStore()
        return try await store.read { reader in try StoreUsers.load(reader.connection) }.previous
    }

    /// How many requests of users other than the current one wait, set aside, for their user
    /// (``OfflineODataUserSwitchPolicy/keepForTheirUser``), by user.
    public func requestsKeptForOtherUsers() async throws -> [String: Int] {
        let store = try openStore()
        return try await store.read { reader in try RequestQueue.parkedCounts(reader.connection) }
    }

    /// Makes the open store ``OfflineODataParameters/currentUser``'s, right after it opened or
    /// was created. Any failure closes the store again: it must not be read by a user whose
    /// data it does not hold yet.
    func followCurrentUser() async throws {
        guard let opened = store else { return }
        do {
            try await followCurrentUser(opened)
        } catch {
            store?.close()
            store = nil
            throw error
        }
    }

    private func followCurrentUser(_ opened: Store) async throws {
        let users = try await opened.read { reader in try StoreUsers.load(reader.connection) }
        let path = parameters.storeFile
        guard let wanted = parameters.currentUser else {
            if let current = users.current {
                throw OfflineODataError(
                    .invalidParameter,
                    "The store \(path) is shared by users in turn (its current user is \(current)): open it with "
                        + "currentUser set, so that changes are recorded as their user's")
            }
            return
        }
        guard let current = users.current else {
            // A new store, or one made without users: it is this user's from now on, with the
            // requests it holds.
            try await opened.write { writer in
                _ = try writer.connection.execute("UPDATE oo_queue SET owner = ? WHERE owner IS NULL", [.text(wanted)])
                try StoreUsers(current: wanted, previous: users.previous).save(writer)
            }
            return
        }
        if current != wanted { try await switchUser(from: current, to: wanted, store: opened, previous: users) }
        CrashPoint.reach("user-switch-parked")
        // Every defining query is read again as the new user; the open returns after it.
        let started = ContinuousClock.now
        try await runDownload(definingQueries: nil)
        CrashPoint.reach("user-switch-downloaded")
        guard let refreshed = store else { return }
        try await refreshed.write { writer in
            var done = try StoreUsers.load(writer.connection)
            done.switching = false
            try done.save(writer)
        }
        let elapsed = (ContinuousClock.now - started).components
        operationSummary["user-switch-ms"] = .stringConvertible(
            elapsed.seconds * 1000 + elapsed.attoseconds / 1_000_000_000_000_000)
        logger.info(
            "The store changed hands; every defining query was read again as the new user",
            metadata: ["previous-user": .string(current == wanted ? users.previous ?? "" : current)])
    }

    /// Hands the store from `previous` to `next`: the previous user's pending requests are
    /// uploaded with their credentials or dealt with by the policy, their requests are set aside
    /// and the next user's brought back, and every delta link is forgotten, so that the
    /// download that follows reads each defining query whole as the next user.
    private func switchUser(
        from previous: String, to next: String, store: Store, previous users: StoreUsers
    )
        async throws
    {
        var pending = try await store.read { reader in try RequestQueue.load(reader.connection, status: "pending") }
            .count
        if pending > 0, parameters.forceUploadOnUserSwitch, let credentials = parameters.userAuthenticators[previous] {
            try await uploadAsAnotherUser(previous, credentials)
            CrashPoint.reach("user-switch-uploaded")
            pending = try await store.read { reader in try RequestQueue.load(reader.connection, status: "pending") }
                .count
        }
        if pending > 0, parameters.userSwitchPolicy == .refuse {
            let how =
                parameters.forceUploadOnUserSwitch
                ? "give their credentials in userAuthenticators[\"\(previous)\"] to upload them"
                : "set forceUploadOnUserSwitch and give their credentials in userAuthenticators[\"\(previous)\"]"
            throw OfflineODataError(
                .pendingChanges,
                "The store \(parameters.storeFile) holds \(pending) pending request\(pending == 1 ? "" : "s") of user "
                    + "\(previous) that \(next) may not send: \(previous) must upload them first, or \(how), or "
                    + "choose the userSwitchPolicy keepForTheirUser. Nothing was changed")
        }
        let model = store.model
        let root = serviceRoot
        let names = definingQueries.map(\.name)
        let (kept, returned) = try await store.write { writer in
            let queue = RequestQueue(writer, model: model, serviceRoot: root)
            let kept = try queue.park(owner: previous)
            let returned = try queue.unpark(owner: next)
            try StoreUsers(current: next, previous: previous, switching: true).save(writer)
            try DefiningQueries.forgetDeltaLinks(named: names, writer)
            return (kept, returned)
        }
        keyMapCache = nil
        operationSummary["requests-kept-for-previous-user"] = .stringConvertible(kept)
        operationSummary["requests-returned"] = .stringConvertible(returned)
    }

    /// Uploads the queue with another user's credentials, on a session of its own (its own
    /// cookies and CSRF token), then goes back to the provider's.
    private func uploadAsAnotherUser(_ user: String, _ credentials: any ODataAuthenticator) async throws {
        let own = session
        let ownUser = sessionUser
        session = BackendSession(
            transport: transport, serviceRoot: serviceRoot, authenticator: credentials,
            csrfProtection: parameters.csrfProtection, maximumRetryAfter: parameters.maximumRetryAfter,
            logger: parameters.logger)
        sessionUser = user
        defer {
            session = own
            sessionUser = ownUser
        }
        try await runUpload(categories: nil)
    }
}
