import Foundation
import ODataCore
import ODataServer
import ODataStore
import Testing

@testable import OfflineOData

/// Another user changed an entity first (SPEC §15): the ErrorArchive keeps the three copies,
/// and a conflict policy can resolve the 412 instead. Against the reference server, whose
/// entities have ETags and which needs `If-Match`.
@Suite(.serialized) struct ConflictTests {
    final class Listener: OfflineODataDelegate, @unchecked Sendable {
        private let lock = NSLock()
        private var _resolved: [OfflineODataConflictResolved] = []
        private var _failures: [OfflineODataFailedRequest] = []
        var resolved: [OfflineODataConflictResolved] { lock.withLock { _resolved } }
        var failures: [OfflineODataFailedRequest] { lock.withLock { _failures } }
        func offlineODataProvider(
            _ provider: OfflineODataProvider, didResolveConflict resolution: OfflineODataConflictResolved
        ) {
            lock.withLock { _resolved.append(resolution) }
        }
        func offlineODataProvider(requestDidFail request: OfflineODataFailedRequest) {
            lock.withLock { _failures.append(request) }
        }
    }

    /// A provider with `policy`, opened, with BP1's phone changed locally and BP1's `field`
    /// changed on the backend by another user meanwhile.
    static func conflicted(
        _ fixture: Fixture, v2: Bool, policy: OfflineODataConflictPolicy, backendField: String = "CompanyName",
        listener: Listener, configure: (inout OfflineODataParameters) -> Void = { _ in }
    ) async throws -> OfflineODataProvider {
        var parameters = fixture.parameters()
        parameters.conflictPolicy = policy
        configure(&parameters)
        let provider = try await fixture.provider(v2: v2, parameters: parameters, delegate: listener)
        try await provider.open()
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"+1 local"}"#.utf8))
        let status = try await fixture.backendSend(
            "PATCH", "BusinessPartners('BP1')", #"{"\#(backendField)":"from the office"}"#)
        #expect(status < 300)
        return provider
    }

    @Test(arguments: [false, true])
    func theArchiveKeepsTheThreeCopies(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let originalName = try await fixture.backend("BusinessPartners('BP1')")["CompanyName"]?.stringValue
        let provider = try await Self.conflicted(fixture, v2: v2, policy: .archive, listener: listener)
        try await provider.upload()
        #expect(listener.failures.map(\.httpStatus) == [412])
        #expect(listener.resolved.isEmpty)
        let id = try #require(listener.failures.first?.requestID)
        let copies = try #require(try await provider.conflictCopies(forRequest: id))
        #expect(string(copies.local, "Phone") == "+1 local")
        #expect(string(copies.backend, "CompanyName") == "from the office")
        #expect(string(copies.backend, "Phone") != "+1 local")
        #expect(copies.backend?.control.etag != nil)
        #expect(string(copies.original, "CompanyName") == originalName)
        #expect(string(copies.original, "Phone") != "+1 local")
        // As OData: navigation paths and $expand.
        let backend = try await provider.readEntities("ErrorArchive(\(id))/BackendEntity")
        #expect(backend.map { string($0, "CompanyName") } == ["from the office"])
        let rows = try await provider.readEntities(
            "ErrorArchive?$expand=BackendEntity,OriginalEntity,AffectedEntity&$filter=HTTPStatusCode eq 412")
        #expect(rows.count == 1)
        #expect(rows.first?.navigation.map(\.name) == ["BackendEntity", "OriginalEntity", "AffectedEntity"])
        // A $select without the key still expands (the store returns key properties).
        let selected = try await provider.readEntities("ErrorArchive?$expand=BackendEntity&$select=Code")
        #expect(selected.first?.navigation.map(\.name) == ["BackendEntity"])
        #expect(
            string(
                selected.first?.navigation.first?.inline.flatMap { inline -> Entity? in
                    if case .entity(let entity) = inline { return entity }
                    return nil
                }, "CompanyName") == "from the office")
        // Options on the copies: $select (others are refused, by name).
        let phoneOnly = try await provider.readEntities("ErrorArchive(\(id))/BackendEntity?$select=Phone")
        #expect(phoneOnly.map { $0.properties.map(\.name) } == [["Phone"]])
        #expect(phoneOnly.first?.control.etag != nil)
        let narrowed = try await provider.readEntities(
            "ErrorArchive?$expand=BackendEntity($select=CompanyName,Phone),AffectedEntity($select=Phone)"
                + "&$filter=HTTPStatusCode eq 412")
        let inline = Dictionary(
            uniqueKeysWithValues: (narrowed.first?.navigation ?? []).map { navigation -> (String, Entity?) in
                if case .entity(let entity) = navigation.inline { return (navigation.name, entity) }
                return (navigation.name, nil)
            })
        #expect(Set(inline["BackendEntity"]??.properties.map(\.name) ?? []) == ["CompanyName", "Phone"])
        #expect(string(inline["BackendEntity"] ?? nil, "CompanyName") == "from the office")
        #expect(string(inline["AffectedEntity"] ?? nil, "Phone") == "+1 local")
        #expect(inline["AffectedEntity"]??.properties.contains { $0.name == "CompanyName" } == false)
        // Percent-encoded, as a URL builder may send it.
        let encoded = try await provider.readEntities(
            "ErrorArchive?%24expand=BackendEntity(%24select%3DPhone)&%24filter=HTTPStatusCode%20eq%20412")
        #expect(
            encoded.first?.navigation.first.flatMap { navigation -> [String]? in
                if case .entity(let entity?) = navigation.inline { return entity.properties.map(\.name) }
                return nil
            } == ["Phone"])
        for refused in [
            "ErrorArchive(\(id))/BackendEntity?$filter=Phone eq 'x'",
            "ErrorArchive?$expand=OriginalEntity($expand=Contacts)",
            "ErrorArchive(\(id))/OriginalEntity?$select=NoSuchProperty",
        ] {
            do {
                let rows = try await provider.readEntities(refused)
                Issue.record("\(refused) was answered: \(rows)")
            } catch let error as OfflineODataError {
                #expect(error.code == .invalidRequest, "\(refused): \(error)")
                #expect(
                    "\(error)".contains("$filter") || "\(error)".contains("$expand")
                        || "\(error)".contains("NoSuchProperty"), "\(error)")
            }
        }
        // The typed API reads them as generated types.
        let service = try await DataService(provider)
        if v2 {
            let typed = try await service.conflictCopies(of: SalesV2.BusinessPartner.self, requestID: id)
            #expect(typed.local?.phone == "+1 local" && typed.backend?.companyName == "from the office")
            #expect(typed.original?.companyName == originalName)
        } else {
            let typed = try await service.conflictCopies(of: SalesV4.BusinessPartner.self, requestID: id)
            #expect(typed.local?.phone == "+1 local" && typed.backend?.companyName == "from the office")
            #expect(typed.original?.companyName == originalName)
        }
        // Deleting the row removes its copies too.
        _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(id))")
        #expect(try await provider.conflictCopies(forRequest: id) == nil)
        #expect(try await provider.readEntities("ErrorArchive(\(id))/BackendEntity").isEmpty)
    }

    @Test(arguments: [false, true])
    func mergeDisjointResendsWhenTheChangesTouchDifferentProperties(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await Self.conflicted(fixture, v2: v2, policy: .mergeDisjoint, listener: listener)
        try await provider.upload()
        #expect(listener.failures.isEmpty)
        #expect(listener.resolved.map(\.outcome) == [.resent])
        #expect(listener.resolved.first?.localChanges == ["Phone"])
        #expect(listener.resolved.first?.backendChanges == ["CompanyName"])
        let backend = try await fixture.backend("BusinessPartners('BP1')")
        #expect(backend["Phone"]?.stringValue == "+1 local")
        #expect(backend["CompanyName"]?.stringValue == "from the office")
        let log = try await provider.readEntities("EventLog?$filter=Type eq 'ConflictResolved'")
        #expect(log.count == 1)
        // The entity took the backend's state at once, with its ETag: no download needed, and
        // its next change goes through.
        let local = try await provider.readEntities("BusinessPartners('BP1')").first
        #expect(string(local, "CompanyName") == "from the office")
        #expect(string(local, "Phone") == "+1 local")
        #expect(
            local?.control.etag == (try await fixture.backend("BusinessPartners('BP1')")["@odata.etag"]?.stringValue))
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Email":"next@example.com"}"#.utf8))
        try await provider.upload()
        #expect(listener.failures.isEmpty)
        #expect(listener.resolved.count == 1, "the next change needed no resolution")
        try await provider.download()
        #expect(
            string(try await provider.readEntities("BusinessPartners('BP1')").first, "CompanyName") == "from the office"
        )

    }

    @Test(arguments: [false, true])
    func mergeDisjointArchivesOverlappingChanges(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await Self.conflicted(
            fixture, v2: v2, policy: .mergeDisjoint, backendField: "Phone", listener: listener)
        try await provider.upload()
        #expect(listener.resolved.isEmpty)
        #expect(listener.failures.map(\.httpStatus) == [412])
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "from the office")
    }

    @Test(arguments: [false, true])
    func clientWinsResendsUpdatesAndDeletes(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await Self.conflicted(
            fixture, v2: v2, policy: .clientWins, backendField: "Phone", listener: listener)
        // A delete of another entity changed on the backend meanwhile.
        _ = try await provider.execute(method: "DELETE", url: "SalesOrders('SO4')")
        #expect(try await fixture.backendSend("PATCH", "SalesOrders('SO4')", #"{"Note":"office"}"#) < 300)
        try await provider.upload()
        #expect(listener.failures.isEmpty, "\(listener.failures)")
        #expect(listener.resolved.map(\.outcome) == [.resent, .resent])
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "+1 local")
        let order = try await fixture.backend("SalesOrders('SO4')")
        #expect(order["error"] != nil, "the order is deleted: \(order)")
    }

    @Test(arguments: [false, true])
    func backendWinsDropsTheLocalChangeAndTakesTheBackendsCopy(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await Self.conflicted(
            fixture, v2: v2, policy: .backendWins, backendField: "Phone", listener: listener)
        try await provider.upload()
        #expect(listener.failures.isEmpty)
        #expect(listener.resolved.map(\.outcome) == [.backendWins])
        #expect(try await provider.isRequestQueueEmpty)
        let local = try await provider.readEntities("BusinessPartners('BP1')").first
        #expect(string(local, "Phone") == "from the office")
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "from the office")
        // The next change of the entity goes with the backend's ETag and is taken.
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Email":"after@example.com"}"#.utf8))
        try await provider.upload()
        #expect(listener.failures.isEmpty)
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Email"]?.stringValue == "after@example.com")
    }

    @Test(arguments: [false, true])
    func aCustomResolverMerges(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let seen = Locked<[OfflineODataConflict]>([])
        let provider = try await Self.conflicted(
            fixture, v2: v2,
            policy: .custom { conflict in
                seen.withLock { $0.append(conflict) }
                guard var merged = conflict.backend else { return .archive }
                // Both phones, the office's first.
                let office = merged["Phone"].flatMap { if case .primitive(.string(let s)) = $0 { s } else { nil } }
                let local = conflict.local?["Phone"].flatMap {
                    if case .primitive(.string(let s)) = $0 { s } else { nil }
                }
                merged["Phone"] = .primitive(.string([office, local].compactMap { $0 }.joined(separator: " / ")))
                return .merged(merged)
            }, backendField: "Phone", listener: listener)
        try await provider.upload()
        #expect(listener.failures.isEmpty)
        #expect(listener.resolved.map(\.outcome) == [.merged])
        #expect(seen.withLock { $0.count } == 1)
        #expect(seen.withLock { $0.first?.localChanges } == ["Phone"])
        #expect(seen.withLock { $0.first?.backendChanges } == ["Phone"])
        #expect(
            try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue
                == "from the office / +1 local")
        // The store holds the merged entity too.
        #expect(
            string(try await provider.readEntities("BusinessPartners('BP1')").first, "Phone")
                == "from the office / +1 local")
    }

    @Test(arguments: [false, true])
    func aCreateWhoseKeyTheBackendHasIsArchivedWithTheBackendsCopy(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        var parameters = fixture.parameters()
        parameters.conflictPolicy = .clientWins
        let provider = try await fixture.provider(v2: v2, parameters: parameters, delegate: listener)
        try await provider.open()
        _ = try await provider.execute(
            method: "POST", url: "BusinessPartners",
            body: Array(#"{"PartnerID":"BPDUP","CompanyName":"Made in the field"}"#.utf8))
        #expect(
            try await fixture.backendSend("POST", "BusinessPartners", #"{"PartnerID":"BPDUP","CompanyName":"Office"}"#)
                < 300)
        try await provider.upload()
        #expect(listener.resolved.isEmpty, "a create is never resolved automatically")
        #expect(listener.failures.map(\.httpStatus) == [409])
        let id = try #require(listener.failures.first?.requestID)
        let copies = try #require(try await provider.conflictCopies(forRequest: id))
        #expect(string(copies.local, "CompanyName") == "Made in the field")
        #expect(string(copies.backend, "CompanyName") == "Office")
        #expect(copies.original == nil)
    }

    @Test(arguments: [false, true])
    func aResendWhoseAnswerIsLostIsAppliedOnce(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await Self.conflicted(
            fixture, v2: v2, policy: .clientWins, backendField: "Phone", listener: listener
        ) { $0.timeoutInterval = 1 }
        // The resend (a request of its own, not a $batch) is answered after the client gave up
        // waiting: it is applied, and its answer lost. 8 s, far past the 1 s timeout: a loaded
        // machine wakes the client's probe late, and that lateness is not counted as network
        // silence (with 2.5 s a full CI run once let the answer come in time).
        await fixture.server.service.faults.set([
            FaultRule(
                urlContains: "BusinessPartners('BP1')", bodyContains: "+1 local", delayMilliseconds: 8000, times: 10)
        ])
        let changes = {
            try await fixture.server.service.store.read { reader in
                try reader.connection.query(
                    "SELECT count(*) FROM server_changes WHERE entity_set = 'BusinessPartners' AND key LIKE '%BP1%'")
            }.first?.first
        }
        let before = try await changes()
        // Every answer to the resend is lost (the session's own retries too): the upload fails
        // and the request stays queued. The next upload sends it again: the $batch gets its 412
        // again, and the new resend is recognized as the same request as the first.
        await #expect(throws: (any Error).self) { try await provider.upload() }
        await fixture.server.service.faults.set([])
        guard case .integer(let first)? = before else {
            Issue.record("no change history")
            return
        }
        // The first delayed resend is applied meanwhile (within 30 s).
        var applied = false
        for _ in 0..<300 {
            if case .integer(let now)? = try await changes(), now > first {
                applied = true
                break
            }
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        #expect(applied, "the delayed resend was not applied within 30 s")
        try await provider.upload()
        guard case .integer(let after)? = try await changes() else {
            Issue.record("no change history")
            return
        }
        #expect(after == first + 1, "the resend was applied \(after - first) times")
        // Every sending of the resend (seconds apart) carried the same ID and first-sent time.
        let resends = await fixture.server.service.journal.requestHeaders().filter {
            !$0.request.contains("$batch") && $0.request.contains("BP1")
                && $0.headers["Repeatability-Request-ID"] != nil
        }
        #expect(resends.count >= 2)
        #expect(Set(resends.compactMap { $0.headers["Repeatability-Request-ID"] }).count == 1)
        #expect(Set(resends.compactMap { $0.headers["Repeatability-First-Sent"] }).count == 1, "\(resends)")
        #expect(try await provider.isRequestQueueEmpty)
        #expect(listener.failures.isEmpty)
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "+1 local")
    }

    @Test(arguments: [false, true])
    func aBackendCopyThatCannotBeReadLosesNothingOfTheBatch(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await Self.conflicted(
            fixture, v2: v2, policy: .clientWins, listener: listener
        ) { $0.timeoutInterval = 1 }
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"same batch"}"#.utf8))
        // Reading the backend's copy times out (the answer waits 8 s, far past the 1 s timeout
        // even when a loaded machine fires the client's timer late: with 2.5 s the full suite
        // once let the answer come first).
        await fixture.server.service.faults.set([
            FaultRule(method: "GET", urlContains: "BusinessPartners('BP1')", delayMilliseconds: 8000)
        ])
        try await provider.upload()
        await fixture.server.service.faults.set([])
        #expect(listener.failures.map(\.httpStatus) == [412])
        #expect(listener.resolved.isEmpty)
        #expect(try await provider.isRequestQueueEmpty)
        #expect(try await fixture.backend("BusinessPartners('BP2')")["Phone"]?.stringValue == "same batch")
        let id = try #require(listener.failures.first?.requestID)
        let copies = try #require(try await provider.conflictCopies(forRequest: id))
        #expect(copies.backend == nil)
        #expect(copies.original != nil)
    }

    @Test(arguments: [false, true])
    func backendWinsArchivesWhenTheBackendsCopyCannotBeRead(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await Self.conflicted(
            fixture, v2: v2, policy: .backendWins, backendField: "Phone", listener: listener)
        await fixture.server.service.faults.set([
            FaultRule(method: "GET", urlContains: "BusinessPartners('BP1')", status: 503, code: "Down")
        ])
        try await provider.upload()
        await fixture.server.service.faults.set([])
        #expect(listener.resolved.isEmpty)
        #expect(listener.failures.map(\.httpStatus) == [412])
        // The local change is kept (in the archive), not dropped for a copy nobody read.
        #expect(string(try await provider.readEntities("BusinessPartners('BP1')").first, "Phone") == "+1 local")
    }

    @Test(arguments: [false, true])
    func aPolicyPerEntitySetOverridesTheProvidersOne(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await Self.conflicted(
            fixture, v2: v2, policy: .archive, backendField: "Phone", listener: listener
        ) { $0.conflictPolicies = ["BusinessPartners": .clientWins] }
        _ = try await provider.execute(
            method: "PATCH", url: "SalesOrders('SO2')", body: Array(#"{"Note":"field"}"#.utf8))
        #expect(try await fixture.backendSend("PATCH", "SalesOrders('SO2')", #"{"Note":"office"}"#) < 300)
        try await provider.upload()
        #expect(listener.resolved.map(\.entitySet) == ["BusinessPartners"])
        #expect(listener.failures.map(\.url) == ["SalesOrders('SO2')"])
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "+1 local")
        #expect(try await fixture.backend("SalesOrders('SO2')")["Note"]?.stringValue == "office")
    }

    @Test(arguments: [false, true])
    func backendWinsOnADeleteBringsTheEntityAndItsCascadeBack(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        var parameters = fixture.parameters()
        parameters.conflictPolicy = .backendWins
        let provider = try await fixture.provider(v2: v2, parameters: parameters, delegate: listener)
        try await provider.open()
        let items = try await provider.readEntities("SalesOrders('SO4')/Items").count
        #expect(items > 0)
        _ = try await provider.execute(method: "DELETE", url: "SalesOrders('SO4')")
        #expect(try await provider.readEntities("SalesOrders('SO4')").isEmpty)
        #expect(try await fixture.backendSend("PATCH", "SalesOrders('SO4')", #"{"Note":"keep it"}"#) < 300)
        try await provider.upload()
        #expect(listener.resolved.map(\.outcome) == [.backendWins])
        #expect(listener.failures.isEmpty)
        #expect(try await provider.isRequestQueueEmpty)
        #expect(string(try await provider.readEntities("SalesOrders('SO4')").first, "Note") == "keep it")
        #expect(try await provider.readEntities("SalesOrders('SO4')/Items").count == items)
        #expect(try await fixture.backend("SalesOrders('SO4')")["Note"]?.stringValue == "keep it")
    }

    @Test(arguments: [false, true])
    func a428FromABackendWithoutETagsIsResolvedWithAStar(v2: Bool) async throws {
        let fixture = try await Fixture.start(configure: {
            $0.sendsETags = false
            $0.requiresIfMatchWithoutETags = true
        })
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        var parameters = fixture.parameters()
        parameters.conflictPolicy = .clientWins
        let provider = try await fixture.provider(v2: v2, parameters: parameters, delegate: listener)
        try await provider.open()
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"no etag"}"#.utf8))
        await fixture.server.service.journal.clear()
        try await provider.upload()
        #expect(listener.failures.isEmpty, "\(listener.failures)")
        #expect(listener.resolved.map(\.outcome) == [.resent])
        let headers = await fixture.server.service.journal.requestHeaders()
        let resend = headers.first { $0.request.hasPrefix("PATCH") || $0.request.hasPrefix("MERGE") }
        #expect(resend?.headers["If-Match"] == "*")
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "no etag")
    }

    @Test(arguments: [false, true])
    func dependantsGoAfterTheResolutionInTheSameUpload(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await Self.conflicted(fixture, v2: v2, policy: .mergeDisjoint, listener: listener)
        // A later change of the same entity waits for the first one's resolution.
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Email":"later@example.com"}"#.utf8))
        try await provider.upload()
        #expect(listener.failures.isEmpty, "\(listener.failures)")
        #expect(listener.resolved.map(\.outcome) == [.resent])
        #expect(try await provider.isRequestQueueEmpty)
        let backend = try await fixture.backend("BusinessPartners('BP1')")
        #expect(backend["Phone"]?.stringValue == "+1 local")
        #expect(backend["Email"]?.stringValue == "later@example.com")
        #expect(backend["CompanyName"]?.stringValue == "from the office")
    }

    /// `backendWins` where the backend's entity is gone by the time its copy is read (another
    /// user deleted it after the 412): the local entity goes too.
    @Test(arguments: [false, true])
    func backendWinsRemovesAnEntityTheBackendDeletedMeanwhile(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        var parameters = fixture.parameters()
        parameters.conflictPolicy = .backendWins
        let provider = try await fixture.provider(v2: v2, parameters: parameters, delegate: listener)
        try await provider.open()
        _ = try await provider.execute(
            method: "PATCH", url: "Contacts(1)", body: Array(#"{"LastName":"local"}"#.utf8))
        #expect(try await fixture.backendSend("PATCH", "Contacts(1)", #"{"FirstName":"office"}"#) < 300)
        // The copy's read waits at the backend until the other user's delete is in (V2 names
        // the key `1L`).
        await fixture.server.service.journal.clear()
        await fixture.server.service.faults.set([
            FaultRule(method: "GET", urlContains: "Contacts(1", delayMilliseconds: 3000, times: 1)
        ])
        let upload = Task { try await provider.upload() }
        var waited = 0
        while waited < 600,
            !(await fixture.server.service.journal.requests().contains {
                $0.hasPrefix("GET") && $0.contains("Contacts(1")
            })
        {
            try await Task.sleep(nanoseconds: 50_000_000)
            waited += 1
        }
        #expect(waited < 600, "the copy was never read")
        #expect(try await fixture.backendSend("DELETE", "Contacts(1)", "") < 300)
        try await upload.value
        #expect(listener.failures.isEmpty, "\(listener.failures)")
        #expect(listener.resolved.map(\.outcome) == [.backendWins])
        #expect(try await provider.isRequestQueueEmpty)
        #expect(try await provider.readEntities("Contacts?$filter=ContactID eq 1").isEmpty)
        #expect(try await provider.readEntities("Contacts?$filter=ContactID eq 2").count == 1)
    }

    /// A custom resolver that does not answer in time (one that ignores cancellation, too)
    /// leaves its request archived with the copies; the rest of the upload goes on.
    @Test(arguments: [false, true])
    func aCustomResolverThatDoesNotAnswerInTimeArchives(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await Self.conflicted(
            fixture, v2: v2,
            policy: .custom { _ in
                // Ignores cancellation: waits 60 s whatever happens.
                await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                    DispatchQueue.global().asyncAfter(deadline: .now() + 60) { done.resume() }
                }
                return .resend
            }, listener: listener, configure: { $0.conflictResolverTimeout = 0.5 })
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"other"}"#.utf8))
        let uploadStarted = ContinuousClock.now
        try await provider.upload()
        // Had it waited, it would have taken the resolver's 60 s (room left for a loaded machine).
        #expect(ContinuousClock.now - uploadStarted < .seconds(30), "the upload waited for the resolver")
        #expect(listener.resolved.isEmpty)
        #expect(listener.failures.map(\.httpStatus) == [412])
        let id = try #require(listener.failures.first?.requestID)
        #expect(try await provider.conflictCopies(forRequest: id)?.backend != nil)
        #expect(try await fixture.backend("BusinessPartners('BP2')")["Phone"]?.stringValue == "other")
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue != "+1 local")
    }

    /// A PUT replaces every property: `mergeDisjoint` never counts it as disjoint, even where
    /// the properties it changed differ from the backend's.
    @Test(arguments: [false, true])
    func mergeDisjointArchivesAReplace(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        var parameters = fixture.parameters()
        parameters.conflictPolicy = .mergeDisjoint
        let provider = try await fixture.provider(v2: v2, parameters: parameters, delegate: listener)
        try await provider.open()
        let contact = try #require(try await provider.readEntities("Contacts(1)").first)
        let body =
            #"{"PartnerID":"\#(contact.string("PartnerID") ?? "")","FirstName":"\#(contact.string("FirstName") ?? "")","#
            + #""LastName":"replaced","Email":"\#(contact.string("Email") ?? "")"}"#
        _ = try await provider.execute(method: "PUT", url: "Contacts(1)", body: Array(body.utf8))
        #expect(try await fixture.backendSend("PATCH", "Contacts(1)", #"{"FirstName":"office"}"#) < 300)
        try await provider.upload()
        #expect(listener.resolved.isEmpty, "\(listener.resolved)")
        #expect(listener.failures.map(\.httpStatus) == [412])
        let backend = try await fixture.backend("Contacts(1)")
        #expect(backend["FirstName"]?.stringValue == "office")
        #expect(backend["LastName"]?.stringValue != "replaced")
    }
}

/// A value behind a lock, for closures that must be `Sendable`.
final class Locked<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<T>(_ body: (inout Value) -> T) -> T { lock.withLock { body(&value) } }
}
