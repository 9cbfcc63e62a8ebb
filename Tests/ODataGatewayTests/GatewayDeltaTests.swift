import Foundation
import ODataCore
import ODataGateway
import ODataServer
import OfflineOData
import Testing

/// Issue 35: devices download through the gateway from a backend without delta links (the
/// reference server with change tracking off, as most SAP Gateway services are) and get deltas
/// computed once in PostgreSQL. Real PostgreSQL, two gateway instances on it, real providers.
@Suite(.serialized) struct GatewayDeltaTests {
    struct Setup {
        let postgres: PostgresServer
        let folder: URL
        let backend: EmbeddedServer
        let backendRoot: String
        let gateways: [RunningGateway]

        func stop() async {
            for gateway in gateways { await gateway.stop() }
            await backend.stop()
            await postgres.stop()
            try? FileManager.default.removeItem(at: folder)
        }
    }

    static func start(
        v2: Bool, instances: Int = 2, scale: Int = 3, backendOptions: (inout ODataService.Options) -> Void = { _ in },
        configure: (inout GatewayConfiguration) -> Void = { _ in }
    ) async throws -> Setup {
        let postgres = try await PostgresServer.start()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-gw-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let backend = try await EmbeddedServer.sales(
            at: folder.appendingPathComponent("backend.sqlite").path, scale: scale,
            pageSize: 7
        ) { options in
            options.tracksChanges = false
            backendOptions(&options)
        }
        let root = (v2 ? backend.v2Root : backend.v4Root).absoluteString
        var configuration = GatewayConfiguration(backends: [GatewayBackend(url: root)])
        configuration.pageSize = 5
        // These tests change the backend behind the gateway and expect the next download to
        // show it: a refresh at each download (the refresh target has tests of its own).
        configuration.refreshInterval = 0
        configuration.metadataCheckInterval = 0
        // Dozens of servers share two cores here: PostgreSQL's deadline is for outages (its
        // own tests set a short one), not for a test machine's load.
        configuration.postgresTimeout = 30
        configure(&configuration)
        var gateways: [RunningGateway] = []
        for _ in 0..<instances {
            gateways.append(try await RunningGateway.start(configuration: configuration, postgresURL: postgres.url))
        }
        return Setup(postgres: postgres, folder: folder, backend: backend, backendRoot: root, gateways: gateways)
    }

    static func device(
        _ setup: Setup, gateway: Int, name: String, delegate: (any OfflineODataDelegate)? = nil,
        configure: (inout OfflineODataParameters) -> Void = { _ in }
    ) async throws -> OfflineODataProvider {
        var parameters = OfflineODataParameters()
        parameters.storePath = setup.folder
        parameters.storeName = name
        configure(&parameters)
        let provider = OfflineODataProvider(
            serviceRoot: setup.gateways[gateway].root, parameters: parameters, delegate: delegate)
        for query in ["BusinessPartners", "Contacts"] {
            try await provider.add(definingQuery: OfflineODataDefiningQuery(name: query, query: query))
        }
        try await provider.open()
        return provider
    }

    /// What a device holds: each partner's key and phone, each contact's key, name and partner.
    static func held(_ provider: OfflineODataProvider) async throws -> [String] {
        let partners = try await provider.readEntities("BusinessPartners?$orderby=PartnerID").map {
            "\($0.string("PartnerID") ?? "?") \($0.string("Phone") ?? "-")"
        }
        let contacts = try await provider.readEntities("Contacts?$orderby=ContactID").map {
            "\($0.int64("ContactID") ?? -1) \($0.string("LastName") ?? "-") \($0.string("PartnerID") ?? "-")"
        }
        return partners + contacts
    }

    /// The same, read from the backend directly (as the user `authorization` names, if any).
    static func truth(_ setup: Setup, authorization: String? = nil) async throws -> [String] {
        func rows(_ url: String) async throws -> [JSONValue] {
            var headers = HTTPHeaders()
            headers["Accept"] = "application/json"
            if let authorization { headers["Authorization"] = authorization }
            var result: [JSONValue] = []
            var next: String? = setup.backend.v4Root.absoluteString + url
            while let current = next {
                let response = try await DefaultTransport.make().send(
                    TransportRequest(method: "GET", url: current, headers: headers), timeout: 30)
                // A refused read is not an empty one.
                #expect(response.status == 200, "\(current): \(response.status)")
                let json = try JSONValue.parse(response.body)
                result += json["value"]?.arrayValue ?? []
                next = json["@odata.nextLink"]?.stringValue
            }
            return result
        }
        let partners = try await rows("BusinessPartners?$orderby=PartnerID").map {
            "\($0["PartnerID"]?.stringValue ?? "?") \($0["Phone"]?.stringValue ?? "-")"
        }
        let contacts = try await rows("Contacts?$orderby=ContactID").map {
            "\($0["ContactID"]?.serializedNumber ?? "-1") \($0["LastName"]?.stringValue ?? "-") \($0["PartnerID"]?.stringValue ?? "-")"
        }
        return partners + contacts
    }

    static func backendSend(_ setup: Setup, _ method: String, _ url: String, _ body: String = "") async throws -> Int {
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers["Accept"] = "application/json"
        headers["If-Match"] = "*"
        let response = try await DefaultTransport.make().send(
            TransportRequest(
                method: method, url: setup.backend.v4Root.absoluteString + url, headers: headers,
                body: Array(body.utf8)), timeout: 30)
        return response.status
    }

    /// A property test over rounds: random changes on the backend, then every device (spread
    /// over two gateway instances) downloads; each device's store equals the backend's rows.
    @Test(arguments: [false, true])
    func devicesOnTwoInstancesStayEqualToTheBackend(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2)
        var devices: [OfflineODataProvider] = []
        do {
            for index in 0..<3 {
                devices.append(try await Self.device(setup, gateway: index % 2, name: "device\(index)"))
            }
            let truth = try await Self.truth(setup)
            #expect(truth.count > 8)
            for device in devices { #expect(try await Self.held(device) == truth) }
            var seed = UInt64(v2 ? 7 : 11)
            func next(_ bound: Int) -> Int {
                seed = seed &* 6364136223846793005 &+ 1442695040888963407
                return Int((seed >> 33) % UInt64(bound))
            }
            for round in 0..<5 {
                for change in 0..<(1 + next(4)) {
                    let contacts = try await Self.truth(setup).filter { $0.contains(" BP") && !$0.hasPrefix("BP") }
                    switch next(3) {
                    case 0:
                        let partner = "BP\(next(3))"
                        #expect(
                            try await Self.backendSend(
                                setup, "PATCH", "BusinessPartners('\(partner)')",
                                #"{"Phone":"r\#(round)c\#(change)"}"#) < 300)
                    case 1:
                        #expect(
                            try await Self.backendSend(
                                setup, "POST", "Contacts",
                                #"{"PartnerID":"BP\#(next(3))","FirstName":"N","LastName":"r\#(round)c\#(change)"}"#)
                                < 300)
                    default:
                        if !contacts.isEmpty, let victim = contacts[next(contacts.count)].split(separator: " ").first {
                            #expect(try await Self.backendSend(setup, "DELETE", "Contacts(\(victim))") < 300)
                        }
                    }
                }
                await setup.backend.service.journal.clear()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for device in devices { group.addTask { try await device.download() } }
                    try await group.waitForAll()
                }
                let expected = try await Self.truth(setup)
                for (index, device) in devices.enumerated() {
                    let held = try await Self.held(device)
                    #expect(held == expected, "round \(round), device \(index)")
                }
                // The backend was read in full at most once per device and query; never with a token.
                let reads = await setup.backend.service.journal.requests()
                #expect(!reads.contains { $0.contains("deltatoken") || $0.contains("gd.") }, "\(reads)")
            }
        } catch {
            Issue.record("\(error)")
        }
        for device in devices { await device.close() }
        await setup.stop()
    }

    /// The gateway's own delta: after one changed and one deleted row, a delta link answers
    /// exactly those two, in the backend's protocol; the token of another query is refused.
    @Test(arguments: [false, true])
    func aDeltaHoldsWhatChangedAndNothingElse(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, instances: 1)
        do {
            let root = setup.gateways[0].root.absoluteString
            var headers = HTTPHeaders()
            headers["Accept"] = "application/json"
            headers["Prefer"] = "odata.track-changes, odata.maxpagesize=100"
            let transport = DefaultTransport.make()
            // A full read in pages of 5 (the gateway's page size), then a delta link.
            var rows: [JSONValue] = []
            var json = JSONValue.null
            var next: String? = root + "Contacts"
            var pages = 0
            while let current = next {
                let page = try await transport.send(
                    TransportRequest(method: "GET", url: current, headers: headers), timeout: 30)
                #expect(page.status == 200)
                json = try JSONValue.parse(page.body)
                rows += v2 ? json["d"]?["results"]?.arrayValue ?? [] : json["value"]?.arrayValue ?? []
                next = v2 ? json["d"]?["__next"]?.stringValue : json["@odata.nextLink"]?.stringValue
                pages += 1
            }
            #expect(pages == 2)
            #expect(rows.count == (try await Self.truth(setup)).filter { !$0.hasPrefix("BP") }.count)
            let link = try #require(v2 ? json["d"]?["__delta"]?.stringValue : json["@odata.deltaLink"]?.stringValue)
            #expect(link.hasPrefix(root + "Contacts?"), "\(link)")
            #expect(link.contains(v2 ? "!deltatoken='gd." : "$deltatoken=gd."), "\(link)")
            // Nothing changed: an empty delta.
            let empty = try await transport.send(
                TransportRequest(method: "GET", url: link, headers: headers), timeout: 30)
            let emptyJSON = try JSONValue.parse(empty.body)
            #expect((v2 ? emptyJSON["d"]?["results"]?.arrayValue : emptyJSON["value"]?.arrayValue)?.isEmpty == true)
            // One change, one deletion.
            let ids = rows.compactMap { $0["ContactID"]?.serializedNumber }
            #expect(try await Self.backendSend(setup, "PATCH", "Contacts(\(ids[0]))", #"{"LastName":"Changed"}"#) < 300)
            #expect(try await Self.backendSend(setup, "DELETE", "Contacts(\(ids[1]))") < 300)
            let delta = try await transport.send(
                TransportRequest(method: "GET", url: link, headers: headers), timeout: 30)
            #expect(delta.status == 200)
            let deltaJSON = try JSONValue.parse(delta.body)
            let changes = (v2 ? deltaJSON["d"]?["results"]?.arrayValue : deltaJSON["value"]?.arrayValue) ?? []
            #expect(changes.count == 2, "\(String(decoding: delta.body, as: UTF8.self))")
            let changed = changes.first { $0["LastName"] != nil }
            #expect(changed?["LastName"]?.stringValue == "Changed")
            let removed = changes.first { $0["LastName"] == nil }
            #expect(removed?["ContactID"]?.serializedNumber == ids[1])
            #expect(v2 ? removed?["__deleted"] == .bool(true) : removed?["@removed"] != nil)
            if v2 { #expect(changed?["__metadata"]?["uri"]?.stringValue?.hasPrefix(root) == true) }
            // More changes than a page (5): the delta continues on a second page, each change once.
            let following = try #require(
                v2 ? deltaJSON["d"]?["__delta"]?.stringValue : deltaJSON["@odata.deltaLink"]?.stringValue)
            for index in 0..<6 {
                #expect(
                    try await Self.backendSend(
                        setup, "POST", "Contacts",
                        #"{"PartnerID":"BP0","FirstName":"P","LastName":"page\#(index)"}"#) < 300)
            }
            #expect(try await Self.backendSend(setup, "PATCH", "Contacts(\(ids[2]))", #"{"LastName":"Again"}"#) < 300)
            var paged: [JSONValue] = []
            var pageCount = 0
            var current: String? = following
            while let url = current {
                let page = try JSONValue.parse(
                    try await transport.send(
                        TransportRequest(method: "GET", url: url, headers: headers), timeout: 30
                    ).body)
                paged += (v2 ? page["d"]?["results"]?.arrayValue : page["value"]?.arrayValue) ?? []
                current = v2 ? page["d"]?["__next"]?.stringValue : page["@odata.nextLink"]?.stringValue
                pageCount += 1
            }
            #expect(pageCount == 2)
            let names = paged.compactMap { $0["LastName"]?.stringValue }.sorted()
            #expect(names == ["Again", "page0", "page1", "page2", "page3", "page4", "page5"], "\(names)")
            // A token of another query is refused, not answered with the wrong rows.
            let foreign = link.replacingOccurrences(of: root + "Contacts", with: root + "BusinessPartners")
            let refused = try await transport.send(
                TransportRequest(method: "GET", url: foreign, headers: headers), timeout: 30)
            #expect(refused.status == 400, "\(String(decoding: refused.body, as: UTF8.self))")
            #expect(try ODataError.parse(refused.body).code == "BadToken")
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// `track_deltas` against a backend that tracks changes itself: AUTO and NEVER pass the
    /// backend's delta links through (its deltas reach the device, PostgreSQL keeps no scope);
    /// ALWAYS tracks in PostgreSQL and answers a backend's token with 410, so the device reads
    /// again. In every mode each device's store equals the backend's rows after a change.
    @Test(arguments: [DeltaTracking.auto, .always, .never], [false, true])
    func trackDeltasDecidesWhoseDeltaLinksADeviceFollows(mode: DeltaTracking, v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, instances: 2, backendOptions: { $0.tracksChanges = true }) {
            $0.backends[0].trackDeltas = mode
        }
        var devices: [OfflineODataProvider] = []
        do {
            for index in 0..<2 { devices.append(try await Self.device(setup, gateway: index, name: "device\(index)")) }
            #expect(try await Self.backendSend(setup, "PATCH", "BusinessPartners('BP1')", #"{"Phone":"auto"}"#) < 300)
            #expect(
                try await Self.backendSend(
                    setup, "POST", "Contacts",
                    #"{"PartnerID":"BP2","FirstName":"N","LastName":"Added"}"#) < 300)
            await setup.backend.service.journal.clear()
            for device in devices { try await device.download() }
            let expected = try await Self.truth(setup)
            #expect(expected.contains { $0.hasSuffix(" auto") } && expected.contains { $0.contains(" Added ") })
            for device in devices { #expect(try await Self.held(device) == expected) }
            let reads = await setup.backend.service.journal.requests()
            let backendDeltas = reads.filter { $0.contains("deltatoken") && !$0.contains("gd.") }
            let scopes = try await setup.gateways[0].gateway.store.scopeCount()
            if mode == .always {
                #expect(backendDeltas.isEmpty, "\(reads)")
                #expect(scopes == 2)
                // A backend's delta token (from a time the query passed through) is answered 410.
                var headers = HTTPHeaders()
                headers["Accept"] = "application/json"
                headers["Prefer"] = "odata.track-changes"
                let token = v2 ? "!deltatoken='5'" : "$deltatoken=5"
                let answer = try await DefaultTransport.make().send(
                    TransportRequest(
                        method: "GET", url: setup.gateways[0].root.absoluteString + "Contacts?" + token,
                        headers: headers), timeout: 30)
                #expect(answer.status == 410, "\(String(decoding: answer.body, as: UTF8.self))")
                #expect(try ODataError.parse(answer.body).code == "DeltaTokenExpired")
            } else {
                // Both devices, both queries: the backend's own delta links, followed through the gateway.
                #expect(backendDeltas.count == 4, "\(reads)")
                #expect(!reads.contains { $0.contains("gd.") })
                #expect(scopes == 0)
            }
        } catch {
            Issue.record("\(error)")
        }
        for device in devices { await device.close() }
        await setup.stop()
    }
}

extension JSONValue {
    /// A number's text, or a string's (V2 writes Int64 as a string).
    var serializedNumber: String? {
        switch self {
        case .number(let text): return text
        case .string(let text): return text
        default: return nil
        }
    }
}
