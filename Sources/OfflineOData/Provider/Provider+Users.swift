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
    ///
    /// While a switch runs, nothing else reaches the store (``openStore()`` refuses every call but
    /// the switch's own, and another `open()` waits): a read would see the previous user's rows,
    /// and a write would be recorded as theirs.
    func followCurrentUser() async throws {
        guard let opened = store else { return }
        switchingUsers = true
        defer { switchingUsers = false }
        do {
            try await UserSwitchTurn.$held.withValue(true) { try await followCurrentUser(opened) }
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
            // requests it holds and their ErrorArchive entries.
            try await opened.write { writer in
                _ = try writer.connection.execute("UPDATE oo_queue SET owner = ? WHERE owner IS NULL", [.text(wanted)])
                if let archive = writer.schema.table(forEntitySet: LocalSchema.errorArchive),
                    archive.columns.contains(where: { $0.name == "User" })
                {
                    _ = try writer.connection.execute(
                        "UPDATE \(StoreSchema.quote(archive.name)) SET \"User\" = ? WHERE \"User\" IS NULL",
                        [.text(wanted)])
                }
                try StoreUsers(current: wanted, previous: users.previous).save(writer)
            }
            await refreshSharedDevicePolicy(opened)
            return
        }
        // The same user again, with the last switch finished: an open like any other.
        guard current != wanted || users.switching else { return }
        if current != wanted {
            try await switchUser(from: current, to: wanted, store: opened)
            CrashPoint.reach("user-switch-parked")
        }
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
        operationSummary["user-switch-ms"] = .stringConvertible((ContinuousClock.now - started).milliseconds)
        logger.info(
            "The store changed hands; every defining query was read again as the new user",
            metadata: ["previous-user": .string(current == wanted ? users.previous ?? "" : current)])
    }

    /// Hands the store from `previous` to `next`: the previous user's pending requests are
    /// uploaded with their credentials or dealt with by the policy, their requests are set aside
    /// and the next user's brought back, and every delta link is forgotten, so that the
    /// download that follows reads each defining query whole as the next user.
    private func switchUser(from previous: String, to next: String, store: Store) async throws {
        // Counted, not loaded: the queue may be long.
        var pending = try await store.read { reader in try LocalSchema.syncCounts(reader.connection).pending }
        let force = try await forcesUploadOnUserSwitch(store)
        if pending > 0, force, let credentials = parameters.userAuthenticators[previous] {
            try await uploadAsAnotherUser(previous, credentials)
            CrashPoint.reach("user-switch-uploaded")
            pending = try await store.read { reader in try LocalSchema.syncCounts(reader.connection).pending }
        }
        let policy = try await userSwitchPolicy(store)
        if pending > 0, policy == .refuse {
            let how =
                force
                ? "give their credentials in userAuthenticators[\"\(previous)\"] to upload them"
                : "set forceUploadOnUserSwitch and give their credentials in userAuthenticators[\"\(previous)\"]"
            throw OfflineODataError(
                .pendingChanges,
                "The store \(parameters.storeFile) holds \(pending) pending request\(pending == 1 ? "" : "s") of user "
                    + "\(previous) that \(next) may not send: \(previous) must upload them first, or \(how), or "
                    + "choose the userSwitchPolicy keepForTheirUser or discardAfterBackup. None of their requests "
                    + "was changed")
        }
        let owned = try await store.read { reader in
            let counts = try LocalSchema.syncCounts(reader.connection)
            return counts.pending + counts.failed
        }
        let discarding = policy == .discardAfterBackup && owned > 0
        if discarding {
            try await backUpRequests(of: previous, count: owned, store: store)
            CrashPoint.reach("user-switch-backed-up")
        }
        let model = store.model
        let root = serviceRoot
        let names = definingQueries.map(\.name)
        let (kept, returned) = try await store.write { writer in
            let queue = RequestQueue(writer, model: model, serviceRoot: root)
            let kept = discarding ? 0 : try queue.park(owner: previous)
            if discarding { _ = try queue.discard(owner: previous) }
            let returned = try queue.unpark(owner: next)
            try StoreUsers(current: next, previous: previous, switching: true).save(writer)
            try DefiningQueries.forgetDeltaLinks(named: names, writer)
            return (kept, returned)
        }
        keyMapCache = nil
        operationSummary["requests-kept-for-previous-user"] = .stringConvertible(kept)
        operationSummary["requests-returned"] = .stringConvertible(returned)
    }

    /// The policy a switch follows: the sync gateway's, when it sent one (SPEC §16), else the
    /// parameters'.
    func userSwitchPolicy(_ store: Store) async throws -> OfflineODataUserSwitchPolicy {
        try await gatewayPolicy(store).policy ?? parameters.userSwitchPolicy
    }

    /// Whether a switch uploads the previous user's requests first: the gateway's setting when
    /// it sent one, else the parameters'.
    func forcesUploadOnUserSwitch(_ store: Store) async throws -> Bool {
        try await gatewayPolicy(store).force ?? parameters.forceUploadOnUserSwitch
    }

    /// The shared-device policy the gateway sent last (kept in the store, so that a switch
    /// follows it before anything is sent).
    private func gatewayPolicy(_ store: Store) async throws -> (policy: OfflineODataUserSwitchPolicy?, force: Bool?) {
        let text = try await store.read { reader in
            try reader.connection.query("SELECT value FROM oo_meta WHERE key = 'sharedDevicePolicy'").first?.first
        }
        guard case .text(let json)? = text, let parsed = try? JSONValue.parse(Array(json.utf8)) else {
            return (nil, nil)
        }
        let policy = parsed["userSwitchPolicy"]?.stringValue.flatMap(OfflineODataUserSwitchPolicy.init(rawValue:))
        var force: Bool?
        if case .bool(let value)? = parsed["forceUploadOnUserSwitch"] { force = value }
        return (policy, force)
    }

    /// Through a sync gateway: reads its shared-device policy (`GET $oodata/shared-device`) and
    /// keeps it in the store for the next user switch, when the store has users. Best effort,
    /// after a download or a first open: a failure is logged, and the policy kept before stays.
    func refreshSharedDevicePolicy(_ store: Store) async {
        // Only a store shared by users follows it.
        guard throughGateway, parameters.currentUser != nil else { return }
        do {
            let response = try await send(
                method: "GET", url: "$oodata/shared-device", headers: ["Accept": "application/json"], expect: 200)
            let parsed = try JSONValue.parse(response.body)
            var members: [JSONValue.Member] = []
            if let name = parsed["userSwitchPolicy"]?.stringValue {
                guard OfflineODataUserSwitchPolicy(rawValue: name) != nil else {
                    throw OfflineODataError(
                        .backend, "The gateway's userSwitchPolicy \(name) is not one this client knows")
                }
                members.append(JSONValue.Member("userSwitchPolicy", .string(name)))
            }
            if case .bool(let force)? = parsed["forceUploadOnUserSwitch"] {
                members.append(JSONValue.Member("forceUploadOnUserSwitch", .bool(force)))
            }
            let text = JSONValue.object(members).serialized
            try await store.write(.redoable) { writer in
                _ = try writer.connection.execute(
                    "INSERT OR REPLACE INTO oo_meta (key, value) VALUES ('sharedDevicePolicy', ?)", [.text(text)])
            }
        } catch {
            logger.warning(
                "The sync gateway's shared-device policy could not be read; the one kept before stays",
                metadata: ["error": .string("\(error)")])
        }
    }

    /// Sends the requests of `user` (or the whole store) for support, encrypted with the
    /// backup key, before they are discarded (``OfflineODataUserSwitchPolicy/discardAfterBackup``).
    private func backUpRequests(of user: String, count: Int, store: Store) async throws {
        guard let key = parameters.userSwitchBackupKey, !key.isEmpty else {
            throw OfflineODataError(
                .invalidParameter,
                "The userSwitchPolicy discardAfterBackup needs a userSwitchBackupKey: \(count) request"
                    + "\(count == 1 ? "" : "s") of user \(user) would be discarded without a backup; "
                    + "nothing was changed"
            )
        }
        guard key != parameters.storeEncryptionKey else {
            throw OfflineODataError(
                .invalidParameter,
                "The userSwitchBackupKey is the store's own key: the backup would open with the app's key; "
                    + "give a key of its own"
            )
        }
        let stamp = Int(Date().timeIntervalSince1970)
        let safe = String(user.map { $0.isASCII && ($0.isLetter || $0.isNumber) ? $0 : "_" }.prefix(60))
        let name = "user-switch-\(safe)-\(stamp)"
        let url = parameters.userSwitchBackupURL ?? "$oodata/support/" + name
        let file = parameters.storeFile + ".backup-\(GuidValue.random())"
        defer {
            for suffix in ["", "-journal", "-wal", "-shm"] {
                try? FileManager.default.removeItem(atPath: file + suffix)
            }
        }
        do {
            if parameters.userSwitchBackupIncludesStore {
                try await store.exportCopy(to: file, key: key)
            } else {
                let archive =
                    store.schema.table(forEntitySet: LocalSchema.errorArchive)?.name ?? LocalSchema.errorArchive
                let owned = "SELECT id FROM main.oo_queue WHERE owner = ?"
                try await store.exportTables(
                    to: file, key: key,
                    [
                        Store.ExportedTable(
                            name: "backup",
                            select: "SELECT ? AS user, ? AS service_root, ? AS made_at, ? AS client_instance_id",
                            arguments: [
                                .text(user), .text(serviceRoot), .text(ISO8601DateFormatter().string(from: Date())),
                                .text(clientInstanceID),
                            ]),
                        Store.ExportedTable(
                            name: "requests",
                            select: "SELECT id, method, url, body, headers, entity_set, entity_key, transaction_id, "
                                + "custom_tag, upload_category, repeat_id, first_sent, status, owner FROM main.oo_queue "
                                + "WHERE owner = ? ORDER BY id",
                            arguments: [.text(user)]),
                        Store.ExportedTable(
                            name: "error_archive",
                            select:
                                "SELECT * FROM main.\(StoreSchema.quote(archive)) WHERE \"RequestID\" IN (\(owned))",
                            arguments: [.text(user)]),
                    ])
            }
        } catch {
            throw OfflineODataError(
                .store, "The backup of user \(user)'s requests could not be made: \(error); nothing was discarded")
        }
        let sender = StoreSender(
            store: store, storeFile: parameters.storeFile, progress: reporter(.sendStore, [.sendingEntityStoreDatabase])
        )
        do {
            try await sender.sendFile(file, to: url, chunkSize: 1 << 20, on: self)
        } catch let error as OfflineODataError {
            throw OfflineODataError(
                error.code,
                "The backup of user \(user)'s \(count) request\(count == 1 ? "" : "s") was not taken at \(url), so "
                    + "they were not discarded and the switch did not happen: \(error.message)",
                httpStatus: error.httpStatus)
        }
        operationSummary["requests-discarded-after-backup"] = .stringConvertible(count)
        logger.notice(
            "The previous user's requests were backed up and are discarded",
            metadata: ["previous-user": .string(user), "requests": .stringConvertible(count), "backup": .string(url)])
    }

    /// Uploads the queue with another user's credentials, on a session of its own (its own
    /// cookies and CSRF token), then goes back to the provider's.
    ///
    /// The app's custom cookies and an `Authorization` among its custom headers are left out:
    /// they speak for the current user (a custom `Authorization` would even win over the
    /// credentials given).
    private func uploadAsAnotherUser(_ user: String, _ credentials: any ODataAuthenticator) async throws {
        let own = session
        let ownUser = sessionUser
        let ownHeaders = parameters.customHeaders
        let ownCookies = parameters.customCookies
        parameters.customHeaders = ownHeaders.filter { $0.key.lowercased() != "authorization" }
        parameters.customCookies = [:]
        session = BackendSession(
            transport: transport, serviceRoot: serviceRoot, authenticator: credentials,
            csrfProtection: parameters.csrfProtection, maximumRetryAfter: parameters.maximumRetryAfter,
            logger: parameters.logger)
        sessionUser = user
        defer {
            session = own
            sessionUser = ownUser
            parameters.customHeaders = ownHeaders
            parameters.customCookies = ownCookies
        }
        try await runUpload(categories: nil)
    }
}

/// Set for the task of a user switch: the one that may use the store while it changes hands.
enum UserSwitchTurn {
    @TaskLocal static var held = false
}

extension DataService {
    /// The offline provider behind this service, for what only it keeps.
    private func offlineProvider(_ what: String) throws(DataServiceError) -> OfflineODataProvider {
        guard let provider = handler as? OfflineODataProvider else {
            throw DataServiceError(
                .offlineStore, "\(what) is kept by the offline provider only; this service is online")
        }
        return provider
    }

    /// The user the offline store belongs to now (SPEC §16); nil for a store without users.
    public func currentUser() async throws(DataServiceError) -> String? {
        let provider = try offlineProvider("The current user")
        do { return try await provider.currentUser() } catch { throw DataServiceError.wrap(error, "currentUser") }
    }

    /// The user who had the offline store before the current one (SAP's `getPreviousUser()`).
    public func previousUser() async throws(DataServiceError) -> String? {
        let provider = try offlineProvider("The previous user")
        do { return try await provider.previousUser() } catch { throw DataServiceError.wrap(error, "previousUser") }
    }

    /// How many requests of other users wait, set aside, for their user, by user.
    public func requestsKeptForOtherUsers() async throws(DataServiceError) -> [String: Int] {
        let provider = try offlineProvider("Requests kept for other users")
        do {
            return try await provider.requestsKeptForOtherUsers()
        } catch {
            throw DataServiceError.wrap(error, "requestsKeptForOtherUsers")
        }
    }

    /// Cancels pending requests together (SAP's `cancelPendingRequests`): nil all, `[]` none
    /// (see ``OfflineODataProvider/cancelPendingRequests(_:)``). Returns how many went.
    @discardableResult
    public func cancelPendingRequests(_ requestIDs: [Int64]? = nil) async throws(DataServiceError) -> Int {
        let provider = try offlineProvider("The request queue")
        do {
            let removed = try await provider.cancelPendingRequests(requestIDs)
            return removed
        } catch {
            throw DataServiceError.wrap(error, "cancelPendingRequests")
        }
    }
}
