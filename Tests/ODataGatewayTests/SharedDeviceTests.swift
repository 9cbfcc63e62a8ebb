import Foundation
import ODataCore
import ODataGateway
import ODataServer
import ODataStore
import OfflineOData
import Testing

/// Issue 58: one store, several users in turn (SPEC §16). The backend is the reference server
/// with users who see different rows (alice: partner BP0 and its contacts; bob: BP1 and its);
/// the device talks to it directly and through a gateway on real PostgreSQL, V4 and V2. Each
/// test checks what the backend received and with whose `Authorization`, and what the store
/// lets the new user read.
@Suite(.serialized) struct SharedDeviceTests {
    static let cases: [(v2: Bool, gateway: Bool)] = [(false, false), (true, false), (false, true), (true, true)]
    static let alice = StaticCredentials(.basic(user: "alice", password: "alice-pw"))
    static let bob = StaticCredentials(.basic(user: "bob", password: "bob-pw"))

    struct Device {
        let setup: GatewayDeltaTests.Setup
        let gateway: Bool
        let v2: Bool

        /// Another gateway to talk to (one with an admin port).
        var through: RunningGateway?

        var root: String {
            through?.root.absoluteString ?? (gateway ? setup.gateways[0].root.absoluteString : setup.backendRoot)
        }

        /// Opens the shared store as `user`.
        func open(
            _ user: String, _ credentials: StaticCredentials, transport: (any Transport)? = nil,
            configure: (inout OfflineODataParameters) -> Void = { _ in }
        ) async throws -> OfflineODataProvider {
            let provider = try await make(user, credentials, transport: transport, configure: configure)
            try await provider.open()
            return provider
        }

        /// The provider of the shared store for `user`, not opened yet.
        func make(
            _ user: String, _ credentials: StaticCredentials, transport: (any Transport)? = nil,
            configure: (inout OfflineODataParameters) -> Void = { _ in }
        ) async throws -> OfflineODataProvider {
            var parameters = OfflineODataParameters()
            parameters.storePath = setup.folder
            parameters.storeName = "shared"
            parameters.currentUser = user
            parameters.authenticator = credentials
            configure(&parameters)
            let provider = OfflineODataProvider(
                serviceRoot: try #require(URL(string: root)), parameters: parameters, transport: transport)
            for query in ["BusinessPartners", "Contacts"] {
                try await provider.add(definingQuery: OfflineODataDefiningQuery(name: query, query: query))
            }
            return provider
        }

        /// What the backend holds for `credentials`, read directly (V4): partners, then contacts.
        func truth(_ credentials: StaticCredentials) async throws -> [String] {
            try await GatewayDeltaTests.truth(setup, authorization: credentials.credentials.authorization)
        }

        /// The `Authorization` of every `$batch` the backend received since the journal was cleared.
        func batchAuthorizations() async -> [String] {
            await setup.backend.service.journal.requestHeaders().filter { $0.request.hasPrefix("POST $batch") }.map {
                $0.headers["Authorization"] ?? "none"
            }
        }

        /// A contact's key in this root's syntax.
        func contact(_ id: Int) -> String { v2 ? "Contacts(\(id)L)" : "Contacts(\(id))" }
        var update: String { v2 ? "MERGE" : "PATCH" }
    }

    static func withDevice(
        v2: Bool, gateway: Bool, backendOptions: (inout ODataService.Options) -> Void = { _ in },
        configure: @escaping (inout GatewayConfiguration) -> Void = { _ in },
        _ body: (Device) async throws -> Void
    ) async throws {
        let setup = try await GatewayIsolationTests.start(
            v2: v2, backendOptions: backendOptions, configure: configure)
        do {
            try await body(Device(setup: setup, gateway: gateway, v2: v2))
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    static func partnersAndContacts(_ provider: OfflineODataProvider) async throws -> [String] {
        try await GatewayDeltaTests.held(provider)
    }

    /// Every row a provider can read, rendered, for checking that none of a user's appear.
    static func everything(_ provider: OfflineODataProvider) async throws -> String {
        var text = ""
        for set in ["BusinessPartners", "Contacts", "RequestQueue", "ErrorArchive"] {
            for entity in try await provider.readEntities(set) {
                text += entity.properties.map { "\($0.name)=\($0.value)" }.joined(separator: ",") + "\n"
            }
        }
        return text
    }

    /// Alice leaves an update and a create; bob opens with her credentials for the forced
    /// upload: both reach the backend in a `$batch` sent as alice before bob's download, and
    /// bob then reads exactly his own rows and none of hers.
    @Test(arguments: cases)
    func aSwitchUploadsThePreviousUsersRequestsWithTheirCredentials(v2: Bool, gateway: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: gateway) { device in
            let aliceProvider = try await device.open("alice", Self.alice)
            #expect(try await Self.partnersAndContacts(aliceProvider) == (try await device.truth(Self.alice)))
            #expect(try await aliceProvider.currentUser() == "alice")
            #expect(try await aliceProvider.previousUser() == nil)
            _ = try await aliceProvider.execute(
                method: device.update, url: device.contact(1), body: Array(#"{"LastName":"EditedByAlice"}"#.utf8))
            _ = try await aliceProvider.execute(
                method: "POST", url: "Contacts",
                body: Array(#"{"PartnerID":"BP0","FirstName":"New","LastName":"CreatedByAlice"}"#.utf8))
            let queued = try await aliceProvider.readEntities("RequestQueue")
            #expect(queued.map { $0.string("User") } == ["alice", "alice"])
            await aliceProvider.close()

            await device.setup.backend.service.journal.clear()
            let bobProvider = try await device.open("bob", Self.bob) { parameters in
                parameters.forceUploadOnUserSwitch = true
                parameters.userAuthenticators = ["alice": Self.alice]
            }
            #expect(await device.batchAuthorizations() == [Self.alice.credentials.authorization])
            let aliceNow = try await device.truth(Self.alice)
            #expect(aliceNow.contains { $0.hasSuffix(" EditedByAlice BP0") })
            #expect(aliceNow.contains { $0.hasSuffix(" CreatedByAlice BP0") })
            #expect(try await bobProvider.currentUser() == "bob")
            #expect(try await bobProvider.previousUser() == "alice")
            #expect(try await Self.partnersAndContacts(bobProvider) == (try await device.truth(Self.bob)))
            let seen = try await Self.everything(bobProvider)
            for word in ["BP0", "EditedByAlice", "CreatedByAlice", "alice"] {
                #expect(!seen.contains(word), "bob reads \(word): \(seen)")
            }
            // Bob's own change is his, and goes as bob.
            _ = try await bobProvider.execute(
                method: device.update, url: device.contact(3), body: Array(#"{"LastName":"EditedByBob"}"#.utf8))
            #expect(try await bobProvider.readEntities("RequestQueue").map { $0.string("User") } == ["bob"])
            await device.setup.backend.service.journal.clear()
            try await bobProvider.upload()
            #expect(await device.batchAuthorizations() == [Self.bob.credentials.authorization])
            #expect(try await device.truth(Self.bob).contains { $0.hasSuffix(" EditedByBob BP1") })
            await bobProvider.close()
        }
    }

    /// Without alice's credentials (and with the default policy) bob's open is refused, naming
    /// her and her pending count; nothing changes, and alice finds her change and uploads it.
    @Test(arguments: cases)
    func aSwitchWithoutThePreviousUsersCredentialsIsRefused(v2: Bool, gateway: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: gateway) { device in
            let aliceProvider = try await device.open("alice", Self.alice)
            _ = try await aliceProvider.execute(
                method: device.update, url: device.contact(2), body: Array(#"{"LastName":"Waiting"}"#.utf8))
            await aliceProvider.close()
            await device.setup.backend.service.journal.clear()
            for force in [false, true] {
                do {
                    let opened = try await device.open("bob", Self.bob) { $0.forceUploadOnUserSwitch = force }
                    Issue.record("bob's open succeeded")
                    await opened.close()
                } catch let error as OfflineODataError {
                    #expect(error.code == .pendingChanges)
                    #expect(error.message.contains("1 pending request of user alice"), "\(error.message)")
                }
            }
            #expect(await device.batchAuthorizations().isEmpty, "nothing was sent")
            let again = try await device.open("alice", Self.alice)
            #expect(try await again.previousUser() == nil)
            #expect(try await again.readEntities(device.contact(2)).first?.string("LastName") == "Waiting")
            try await again.upload()
            #expect(await device.batchAuthorizations() == [Self.alice.credentials.authorization])
            #expect(try await device.truth(Self.alice).contains { $0.hasSuffix(" Waiting BP0") })
            await again.close()
        }
    }

    /// With `keepForTheirUser`, alice's requests wait for her: bob neither reads nor sends them
    /// (his upload sends only his own), and when alice opens again they are back, applied, and
    /// go with her credentials.
    @Test(arguments: cases)
    func keptRequestsWaitForTheirUser(v2: Bool, gateway: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: gateway) { device in
            let keep = { (parameters: inout OfflineODataParameters) in parameters.userSwitchPolicy = .keepForTheirUser }
            let aliceProvider = try await device.open("alice", Self.alice, configure: keep)
            _ = try await aliceProvider.execute(
                method: device.update, url: device.contact(1), body: Array(#"{"LastName":"KeptEdit"}"#.utf8))
            _ = try await aliceProvider.execute(
                method: "POST", url: "Contacts",
                body: Array(#"{"PartnerID":"BP0","FirstName":"Kept","LastName":"KeptCreate"}"#.utf8))
            await aliceProvider.close()
            await device.setup.backend.service.journal.clear()

            let bobProvider = try await device.open("bob", Self.bob, configure: keep)
            #expect(await device.batchAuthorizations().isEmpty, "alice's requests were not sent")
            #expect(try await bobProvider.requestsKeptForOtherUsers() == ["alice": 2])
            #expect(try await bobProvider.isRequestQueueEmpty)
            #expect(try await Self.partnersAndContacts(bobProvider) == (try await device.truth(Self.bob)))
            let seen = try await Self.everything(bobProvider)
            for word in ["BP0", "KeptEdit", "KeptCreate", "alice"] {
                #expect(!seen.contains(word), "bob reads \(word): \(seen)")
            }
            _ = try await bobProvider.execute(
                method: device.update, url: device.contact(4), body: Array(#"{"LastName":"BobsOwn"}"#.utf8))
            try await bobProvider.upload()
            #expect(await device.batchAuthorizations() == [Self.bob.credentials.authorization])
            let aliceBackend = try await device.truth(Self.alice)
            #expect(!aliceBackend.contains { $0.contains("Kept") }, "alice's requests wait for her")
            await bobProvider.close()

            await device.setup.backend.service.journal.clear()
            let back = try await device.open("alice", Self.alice, configure: keep)
            #expect(try await back.previousUser() == "bob")
            #expect(try await back.requestsKeptForOtherUsers().isEmpty)
            let queue = try await back.readEntities("RequestQueue")
            #expect(queue.count == 2)
            #expect(queue.allSatisfy { $0.string("User") == "alice" })
            #expect(try await back.readEntities(device.contact(1)).first?.string("LastName") == "KeptEdit")
            #expect(try await back.readEntities("Contacts?$filter=LastName eq 'KeptCreate'").count == 1)
            #expect(!(try await Self.everything(back)).contains("BobsOwn"), "bob's rows are gone for alice")
            #expect(await device.batchAuthorizations().isEmpty)
            try await back.upload()
            #expect(await device.batchAuthorizations() == [Self.alice.credentials.authorization])
            try await back.download()
            #expect(try await Self.partnersAndContacts(back) == (try await device.truth(Self.alice)))
            let applied = try await device.truth(Self.alice)
            #expect(applied.contains { $0.hasSuffix(" KeptEdit BP0") })
            #expect(applied.filter { $0.hasSuffix(" KeptCreate BP0") }.count == 1)
            await back.close()
        }
    }

    /// A request of another user in the queue (put there behind the provider's back) stops the
    /// upload before anything is sent: it would go with the wrong credentials.
    @Test(arguments: [false, true])
    func aRequestIsNeverSentWithAnotherUsersCredentials(v2: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: false) { device in
            let aliceProvider = try await device.open("alice", Self.alice)
            _ = try await aliceProvider.execute(
                method: device.update, url: device.contact(1), body: Array(#"{"LastName":"NotMine"}"#.utf8))
            await aliceProvider.close()
            let file = device.setup.folder.appendingPathComponent("shared.db").path
            let connection = try Connection(path: file)
            #expect(try connection.execute("UPDATE oo_queue SET owner = 'mallory'", []) == 1)
            connection.close()
            await device.setup.backend.service.journal.clear()
            let reopened = try await device.open("alice", Self.alice)
            do {
                try await reopened.upload()
                Issue.record("the upload sent mallory's request with alice's credentials")
            } catch let error as OfflineODataError {
                #expect(error.code == .invalidRequest)
                #expect(error.message.contains("user mallory"), "\(error.message)")
            }
            #expect(await device.batchAuthorizations().isEmpty, "nothing was sent")
            await reopened.close()
        }
    }

    /// A store made without users becomes the first user's (with its requests); a store with
    /// users refuses an open without `currentUser`.
    @Test(arguments: [false, true])
    func aStoreWithoutUsersIsClaimedAndAUserStoreNeedsAUser(v2: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: false) { device in
            let plain = try await device.open("ignored", Self.alice) { $0.currentUser = nil }
            #expect(try await plain.currentUser() == nil)
            _ = try await plain.execute(
                method: device.update, url: device.contact(2), body: Array(#"{"LastName":"Before"}"#.utf8))
            #expect(try await plain.readEntities("RequestQueue").first?.string("User") == nil)
            await plain.close()
            let claimed = try await device.open("alice", Self.alice)
            #expect(try await claimed.currentUser() == "alice")
            #expect(try await claimed.readEntities("RequestQueue").map { $0.string("User") } == ["alice"])
            await claimed.close()
            do {
                let opened = try await device.open("ignored", Self.alice) { $0.currentUser = nil }
                Issue.record("a store with users opened without one")
                await opened.close()
            } catch let error as OfflineODataError {
                #expect(error.code == .invalidParameter)
                #expect(error.message.contains("its current user is alice"), "\(error.message)")
            }
        }
    }

    /// With `discardAfterBackup`, alice's requests go to the gateway as an encrypted backup (the
    /// operator downloads it on the admin port and opens it with the backup key, never with the
    /// app's), then are discarded: nothing of them reaches the backend or stays for alice.
    @Test(arguments: [false, true])
    func discardedRequestsAreBackedUpOnTheGatewayFirst(v2: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: true) { base in
            let admin = try await GatewayOperationsTests.adminGateway(base.setup)
            var device = base
            device.through = admin
            let discard = { (parameters: inout OfflineODataParameters) in
                parameters.userSwitchPolicy = .discardAfterBackup
                parameters.userSwitchBackupKey = "operators-backup-key"
                parameters.storeEncryptionKey = "app-key"
            }
            let aliceProvider = try await device.open("alice", Self.alice, configure: discard)
            _ = try await aliceProvider.execute(
                method: device.update, url: device.contact(1), body: Array(#"{"LastName":"Discarded"}"#.utf8))
            _ = try await aliceProvider.execute(
                method: "POST", url: "Contacts",
                body: Array(#"{"PartnerID":"BP0","FirstName":"Gone","LastName":"DiscardedCreate"}"#.utf8))
            await aliceProvider.close()
            await device.setup.backend.service.journal.clear()

            let bobProvider = try await device.open("bob", Self.bob, configure: discard)
            #expect(await device.batchAuthorizations().isEmpty, "nothing of alice's was sent to the backend")
            #expect(try await bobProvider.requestsKeptForOtherUsers().isEmpty)
            #expect(try await Self.partnersAndContacts(bobProvider) == (try await device.truth(Self.bob)))
            #expect(!(try await Self.everything(bobProvider)).contains("Discarded"))
            await bobProvider.close()
            #expect(!(try await device.truth(Self.alice)).contains { $0.contains("Discarded") })

            let listed =
                try GatewayOperationsTests.json(try await GatewayOperationsTests.admin(admin, "GET", "/api/support"))
                .arrayValue ?? []
            let backup = try #require(listed.first { $0["name"]?.stringValue?.hasPrefix("user-switch-alice-") == true })
            #expect(backup["complete"] == .bool(true), "\(backup)")
            let id = try #require(backup["id"]?.serializedNumber)
            let download = try await GatewayOperationsTests.admin(admin, "GET", "/api/support/\(id)")
            #expect(download.status == 200)
            let file = device.setup.folder.appendingPathComponent("backup-\(v2).db").path
            try Data(download.body).write(to: URL(fileURLWithPath: file))
            #expect(throws: DatabaseError.self) {
                try Connection(path: file, options: Connection.Options(key: "app-key"))
            }
            let opened = try Connection(path: file, options: Connection.Options(key: "operators-backup-key"))
            #expect(try opened.query("SELECT user FROM backup") == [[.text("alice")]])
            let requests = try opened.query("SELECT method, url, CAST(body AS TEXT), owner FROM requests ORDER BY id")
            #expect(requests.count == 2)
            #expect(requests.first?[1] == .text(device.contact(1)))
            #expect(requests.allSatisfy { $0[3] == .text("alice") })
            #expect(
                requests.contains { row in
                    if case .text(let body) = row[2] { return body.contains("DiscardedCreate") }
                    return false
                })
            opened.close()

            let again = try await device.open("alice", Self.alice, configure: discard)
            #expect(try await again.isRequestQueueEmpty)
            #expect(try await again.readEntities(device.contact(1)).first?.string("LastName") != "Discarded")
            #expect(try await Self.partnersAndContacts(again) == (try await device.truth(Self.alice)))
            await again.close()
            await admin.stop()
        }
    }

    /// A backup that cannot be taken (a backend without the gateway's support endpoint, or no
    /// backup key) fails the switch and discards nothing: alice still has her request.
    @Test(arguments: [false, true])
    func aBackupThatIsNotTakenDiscardsNothing(v2: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: false) { device in
            let aliceProvider = try await device.open("alice", Self.alice)
            _ = try await aliceProvider.execute(
                method: device.update, url: device.contact(2), body: Array(#"{"LastName":"StillHere"}"#.utf8))
            await aliceProvider.close()
            for key in [nil, "operators-backup-key"] as [String?] {
                do {
                    let opened = try await device.open("bob", Self.bob) { parameters in
                        parameters.userSwitchPolicy = .discardAfterBackup
                        parameters.userSwitchBackupKey = key
                    }
                    Issue.record("bob's open succeeded without a backup")
                    await opened.close()
                } catch let error as OfflineODataError {
                    if key == nil {
                        #expect(error.code == .invalidParameter)
                        #expect(error.message.contains("needs a userSwitchBackupKey"), "\(error.message)")
                    } else {
                        #expect(error.message.contains("was not taken at"), "\(error.message)")
                        #expect(error.message.contains("not discarded"), "\(error.message)")
                    }
                }
            }
            let again = try await device.open("alice", Self.alice)
            #expect(try await again.readEntities("RequestQueue").count == 1)
            #expect(try await again.readEntities(device.contact(2)).first?.string("LastName") == "StillHere")
            await again.close()
        }
    }

    /// The gateway's shared-device policy (`user_switch_policy=keep`) reaches the device at its
    /// downloads and decides its next switch over the app's default (refuse). The endpoint
    /// answers only credentials the backend takes.
    @Test(arguments: [false, true])
    func theGatewaysPolicyDecidesTheSwitch(v2: Bool) async throws {
        try await Self.withDevice(
            v2: v2, gateway: true, configure: { $0.backends[0].userSwitchPolicy = .keepForTheirUser }
        ) { device in
            let endpoint = device.root + "$oodata/shared-device"
            let anonymous = try await GatewayIsolationTests.send("GET", endpoint, authorization: nil)
            #expect(anonymous.status == 401)
            let wrong = try await GatewayIsolationTests.send(
                "GET", endpoint, authorization: GatewayIsolationTests.basic("alice", "not-her-password"))
            #expect(wrong.status >= 400)
            let answered = try await GatewayIsolationTests.send(
                "GET", endpoint, authorization: GatewayIsolationTests.alice)
            #expect(answered.status == 200)
            #expect(try JSONValue.parse(answered.body)["userSwitchPolicy"]?.stringValue == "keepForTheirUser")

            let aliceProvider = try await device.open("alice", Self.alice)
            _ = try await aliceProvider.execute(
                method: device.update, url: device.contact(1), body: Array(#"{"LastName":"KeptByPolicy"}"#.utf8))
            try await aliceProvider.download()
            await aliceProvider.close()
            let bobProvider = try await device.open("bob", Self.bob)
            #expect(try await bobProvider.requestsKeptForOtherUsers() == ["alice": 1])
            #expect(try await Self.partnersAndContacts(bobProvider) == (try await device.truth(Self.bob)))
            await bobProvider.close()
        }
    }

    /// `cancelPendingRequests` (SAP's batch form): the requests named go with their dependants
    /// and their entities return to the downloaded state; an unknown ID cancels nothing; `[]`
    /// none; nil all. Through the provider and the typed API.
    @Test(arguments: [false, true])
    func pendingRequestsAreCancelledTogether(v2: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: false) { device in
            let provider = try await device.open("alice", Self.alice)
            let original = try await provider.readEntities(device.contact(2)).first?.string("LastName")
            let created = try await provider.execute(
                method: "POST", url: "Contacts",
                body: Array(#"{"PartnerID":"BP0","FirstName":"Cancel","LastName":"Me"}"#.utf8))
            let createdKey = try #require(
                created.result.flatMap { result -> Int64? in
                    if case .entity(let entity?) = result { return entity.int64("ContactID") }
                    return nil
                })
            _ = try await provider.execute(
                method: device.update, url: device.contact(Int(createdKey)),
                body: Array(#"{"LastName":"MeToo"}"#.utf8))
            _ = try await provider.execute(
                method: device.update, url: device.contact(2), body: Array(#"{"LastName":"Stays"}"#.utf8))
            let ids = try await provider.readEntities("RequestQueue").compactMap { $0.int64("RequestID") }
            #expect(ids.count == 3)
            do {
                try await provider.cancelPendingRequests([ids[0], 999_999])
                Issue.record("an unknown request was cancelled")
            } catch let error as OfflineODataError {
                #expect(error.code == .invalidRequest)
                #expect(error.message.contains("999999"), "\(error.message)")
            }
            #expect(try await provider.readEntities("RequestQueue").count == 3, "nothing was cancelled")
            let service = try await DataService(provider)
            #expect(try await service.cancelPendingRequests([]) == 0)
            #expect(try await service.cancelPendingRequests([ids[0]]) == 2, "the create and the change of it")
            #expect(try await provider.readEntities("RequestQueue").compactMap { $0.int64("RequestID") } == [ids[2]])
            #expect(try await provider.readEntities("Contacts?$filter=FirstName eq 'Cancel'").isEmpty)
            #expect(try await provider.readEntities(device.contact(2)).first?.string("LastName") == "Stays")
            #expect(try await provider.cancelPendingRequests() == 1)
            #expect(try await provider.isRequestQueueEmpty)
            #expect(try await provider.readEntities(device.contact(2)).first?.string("LastName") == original)
            try await provider.upload()
            #expect(await device.batchAuthorizations().isEmpty, "nothing left to send")
            await provider.close()
        }
    }

    /// Removing a defining query while requests are pending marks it `isRemoving` (kept across
    /// opens): downloads leave it out, its rows stay readable, and it goes with its rows once an
    /// upload empties the queue.
    @Test(arguments: [false, true])
    func aQueryRemovedWithPendingRequestsIsRemovingUntilTheQueueEmpties(v2: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: false) { device in
            var provider = try await device.open("alice", Self.alice)
            _ = try await provider.execute(
                method: device.update, url: "BusinessPartners('BP0')", body: Array(#"{"Phone":"removing"}"#.utf8))
            let contacts = try await provider.readEntities("Contacts").count
            #expect(contacts > 0)
            try await provider.remove(definingQueryNamed: "Contacts")
            #expect(await provider.currentDefiningQueries.first { $0.name == "Contacts" }?.isRemoving == true)
            #expect(try await provider.readEntities("Contacts").count == contacts)
            await provider.close()
            provider = try await device.open("alice", Self.alice)
            #expect(await provider.currentDefiningQueries.first { $0.name == "Contacts" }?.isRemoving == true)
            await device.setup.backend.service.journal.clear()
            try await provider.download()
            let reads = await device.setup.backend.service.journal.requests()
            #expect(!reads.contains { $0.hasPrefix("GET Contacts") }, "\(reads)")
            #expect(reads.contains { $0.hasPrefix("GET BusinessPartners") }, "\(reads)")
            #expect(try await provider.readEntities("Contacts").count == contacts)
            try await provider.upload()
            #expect(await provider.currentDefiningQueries.map(\.name) == ["BusinessPartners"])
            #expect(try await provider.readEntities("Contacts").isEmpty)
            await provider.close()
        }
    }

    /// Both users leave requests kept for them (their queue IDs overlap, since an emptied queue
    /// numbers from 1 again): each finds exactly their own when they open, and each upload
    /// sends only its user's.
    @Test(arguments: cases)
    func twoUsersKeepTheirRequestsApart(v2: Bool, gateway: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: gateway) { device in
            let keep = { (parameters: inout OfflineODataParameters) in parameters.userSwitchPolicy = .keepForTheirUser }
            let alice = try await device.open("alice", Self.alice, configure: keep)
            _ = try await alice.execute(
                method: device.update, url: device.contact(1), body: Array(#"{"LastName":"AliceOne"}"#.utf8))
            _ = try await alice.execute(
                method: device.update, url: device.contact(2), body: Array(#"{"LastName":"AliceTwo"}"#.utf8))
            await alice.close()
            let bob = try await device.open("bob", Self.bob, configure: keep)
            _ = try await bob.execute(
                method: device.update, url: device.contact(3), body: Array(#"{"LastName":"BobOne"}"#.utf8))
            #expect(try await bob.readEntities("RequestQueue").map { $0.string("User") } == ["bob"])
            await bob.close()

            await device.setup.backend.service.journal.clear()
            let aliceAgain = try await device.open("alice", Self.alice, configure: keep)
            #expect(try await aliceAgain.requestsKeptForOtherUsers() == ["bob": 1])
            let queue = try await aliceAgain.readEntities("RequestQueue")
            #expect(queue.map { $0.string("User") } == ["alice", "alice"])
            #expect(!(try await Self.everything(aliceAgain)).contains("BobOne"))
            try await aliceAgain.upload()
            #expect(await device.batchAuthorizations() == [Self.alice.credentials.authorization])
            await aliceAgain.close()

            await device.setup.backend.service.journal.clear()
            let bobAgain = try await device.open("bob", Self.bob, configure: keep)
            #expect(try await bobAgain.requestsKeptForOtherUsers().isEmpty)
            #expect(try await bobAgain.readEntities("RequestQueue").map { $0.string("User") } == ["bob"])
            try await bobAgain.upload()
            #expect(await device.batchAuthorizations() == [Self.bob.credentials.authorization])
            await bobAgain.close()
            let aliceRows = try await device.truth(Self.alice)
            #expect(
                aliceRows.contains { $0.hasSuffix(" AliceOne BP0") }
                    && aliceRows.contains { $0.hasSuffix(" AliceTwo BP0") })
            #expect(try await device.truth(Self.bob).filter { $0.hasSuffix(" BobOne BP1") }.count == 1)
        }
    }

    /// A transport that is never reached: the device is offline.
    struct Offline: Transport {
        func send(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
            throw TransportError("offline: no network", url: request.url)
        }
    }

    /// The same user opening again needs no backend (no switch: nothing is read), and a switch
    /// that cannot reach it fails and leaves no store open for the new user.
    @Test(arguments: [false, true])
    func theSameUserOpensOfflineAndAnotherCannot(v2: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: false) { device in
            let first = try await device.open("alice", Self.alice)
            _ = try await first.execute(
                method: device.update, url: device.contact(1), body: Array(#"{"LastName":"Offline"}"#.utf8))
            await first.close()
            let offline = try await device.open("alice", Self.alice, transport: Offline())
            #expect(try await offline.readEntities(device.contact(1)).first?.string("LastName") == "Offline")
            #expect(try await offline.readEntities("RequestQueue").count == 1)
            await offline.close()
            let bob = try await device.make("bob", Self.bob, transport: Offline()) {
                $0.userSwitchPolicy = .keepForTheirUser
            }
            await #expect(throws: (any Error).self) { try await bob.open() }
            #expect(await !bob.isOpen)
            // The hand-over happened before the download failed: the store is bob's, and opens
            // for no one until its re-read is done.
            let aliceBack = try await device.open("alice", Self.alice) { $0.userSwitchPolicy = .keepForTheirUser }
            #expect(try await aliceBack.readEntities(device.contact(1)).first?.string("LastName") == "Offline")
            #expect(try await Self.partnersAndContacts(aliceBack).filter { $0.contains("BP1") }.isEmpty)
            await aliceBack.close()
        }
    }

    /// While a switch runs (the backend slow), the store answers nothing else: a read is
    /// refused as not open, a write too, and a second `open()` waits for the first. Then the
    /// store is bob's alone.
    @Test(arguments: [false, true])
    func nothingReachesTheStoreWhileItChangesHands(v2: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: false) { device in
            let alice = try await device.open("alice", Self.alice)
            await alice.close()
            await device.setup.backend.service.faults.set([
                FaultRule(method: "GET", urlContains: "Contacts", delayMilliseconds: 1500, times: 1)
            ])
            let bob = try await device.make("bob", Self.bob)
            let opening = Task { try await bob.open() }
            try await Task.sleep(for: .milliseconds(600))
            do {
                let rows = try await bob.readEntities("Contacts")
                Issue.record("a read during the switch answered \(rows.count) rows")
            } catch let error as OfflineODataError {
                #expect(error.code == .notOpen, "\(error)")
            }
            do {
                _ = try await bob.execute(
                    method: device.update, url: device.contact(3), body: Array(#"{"LastName":"TooEarly"}"#.utf8))
                Issue.record("a write during the switch was made")
            } catch let error as OfflineODataError {
                #expect(error.code == .notOpen, "\(error)")
            }
            try await bob.open()
            try await opening.value
            #expect(try await bob.isRequestQueueEmpty)
            #expect(try await Self.partnersAndContacts(bob) == (try await device.truth(Self.bob)))
            await bob.close()
        }
    }

    /// A defining query being removed (alice removed it with a request pending) is read again
    /// at a switch like the others: bob finds none of alice's rows in it.
    @Test(arguments: [false, true])
    func aQueryBeingRemovedHoldsNoneOfThePreviousUsersRows(v2: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: false) { device in
            let keep = { (parameters: inout OfflineODataParameters) in parameters.userSwitchPolicy = .keepForTheirUser }
            let alice = try await device.open("alice", Self.alice, configure: keep)
            _ = try await alice.execute(
                method: device.update, url: "BusinessPartners('BP0')", body: Array(#"{"Phone":"pending"}"#.utf8))
            try await alice.remove(definingQueryNamed: "Contacts")
            #expect(await alice.currentDefiningQueries.first { $0.name == "Contacts" }?.isRemoving == true)
            await alice.close()
            let bob = try await device.open("bob", Self.bob, configure: keep)
            let contacts = try await bob.readEntities("Contacts").compactMap { $0.string("PartnerID") }
            #expect(!contacts.contains("BP0"), "\(contacts)")
            #expect(!(try await Self.everything(bob)).contains("BP0"))
            await bob.close()
        }
    }

    /// A request of alice's that the backend refused waits in her ErrorArchive: kept for her at
    /// a switch (bob's archive is empty), it comes back with its entry, under its new queue ID.
    @Test(arguments: [false, true])
    func aFailedRequestIsKeptWithItsErrorArchiveEntry(v2: Bool) async throws {
        try await Self.withDevice(v2: v2, gateway: false) { device in
            let keep = { (parameters: inout OfflineODataParameters) in parameters.userSwitchPolicy = .keepForTheirUser }
            let alice = try await device.open("alice", Self.alice, configure: keep)
            _ = try await alice.execute(
                method: device.update, url: device.contact(1), body: Array(#"{"LastName":"Refused"}"#.utf8))
            await device.setup.backend.service.faults.set([
                FaultRule(
                    method: device.update, bodyContains: "Refused", status: 400, code: "Refused", message: "refused")
            ])
            try await alice.upload()
            await device.setup.backend.service.faults.set([])
            let archived = try await alice.readEntities("ErrorArchive")
            #expect(archived.count == 1)
            #expect(archived.first?.string("User") == "alice")
            await alice.close()

            let bob = try await device.open("bob", Self.bob, configure: keep)
            #expect(try await bob.readEntities("ErrorArchive").isEmpty)
            #expect(try await bob.requestsKeptForOtherUsers() == ["alice": 1])
            _ = try await bob.execute(
                method: device.update, url: device.contact(3), body: Array(#"{"LastName":"BobWaits"}"#.utf8))
            await bob.close()

            let back = try await device.open("alice", Self.alice, configure: keep)
            let entry = try #require(try await back.readEntities("ErrorArchive").first)
            #expect(entry.string("User") == "alice")
            #expect(entry.string("RequestURL")?.contains(device.contact(1)) == true, "\(entry)")
            let queued = try await back.readEntities("RequestQueue")
            #expect(queued.count == 1)
            #expect(queued.first?.int64("RequestID") == entry.int64("RequestID"))
            #expect(queued.first?.string("Status") == "failed")
            #expect(try await back.readEntities(device.contact(1)).first?.string("LastName") == "Refused")
            #expect(try await back.requestsKeptForOtherUsers() == ["bob": 1])
            await back.close()
        }
    }

    /// Directly against a backend that takes support stores (`userSwitchBackupURL`): the backup
    /// lands there, encrypted with the backup key, and alice's requests are discarded.
    @Test(arguments: [false, true])
    func discardedRequestsAreBackedUpAtTheURLGiven(v2: Bool) async throws {
        let support = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-switch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: support, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: support) }
        try await Self.withDevice(v2: v2, gateway: false, backendOptions: { $0.supportDirectory = support.path }) {
            device in
            let base = device.setup.backend.v4Root
            let url =
                "\(base.scheme ?? "http")://\(base.host ?? "127.0.0.1"):\(base.port ?? 80)/support/stores/switch.db"
            let discard = { (parameters: inout OfflineODataParameters) in
                parameters.userSwitchPolicy = .discardAfterBackup
                parameters.userSwitchBackupKey = "operators-backup-key"
                parameters.userSwitchBackupURL = url
            }
            let alice = try await device.open("alice", Self.alice, configure: discard)
            _ = try await alice.execute(
                method: device.update, url: device.contact(2), body: Array(#"{"LastName":"BackedUp"}"#.utf8))
            await alice.close()
            await device.setup.backend.service.journal.clear()
            let bob = try await device.open("bob", Self.bob, configure: discard)
            #expect(await device.batchAuthorizations().isEmpty)
            #expect(try await Self.partnersAndContacts(bob) == (try await device.truth(Self.bob)))
            await bob.close()
            let files = try FileManager.default.contentsOfDirectory(atPath: support.path)
            let file = try #require(files.first { $0.contains("switch") }, "\(files)")
            let opened = try Connection(
                path: support.appendingPathComponent(file).path,
                options: Connection.Options(key: "operators-backup-key"))
            let rows = try opened.query("SELECT url, CAST(body AS TEXT) FROM requests")
            #expect(rows.count == 1)
            #expect(rows.first?[0] == .text(device.contact(2)))
            #expect(try opened.query("SELECT user FROM backup") == [[.text("alice")]])
            opened.close()
            let back = try await device.open("alice", Self.alice, configure: discard)
            #expect(try await back.isRequestQueueEmpty)
            #expect(try await back.readEntities(device.contact(2)).first?.string("LastName") != "BackedUp")
            await back.close()
        }
    }
}
