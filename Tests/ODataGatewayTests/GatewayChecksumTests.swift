import Foundation
import ODataCore
import ODataGateway
import ODataServer
import ODataStore
@testable import OfflineOData
import Testing

/// Issue 53: scope checksums. The gateway's last page of a read it tracks carries
/// `OOData-Scope-Checksum` (the scope's rows and the sum of their hashes' first 60 bits); the
/// device compares it with the rows it holds and, when a row went from its store behind its
/// back, reads the query again and says so in the EventLog. V4 and V2, real PostgreSQL.
@Suite(.serialized) struct GatewayChecksumTests {
    /// The checksum header of the last page of a fresh read of `set` through the gateway.
    static func checksum(_ setup: GatewayDeltaTests.Setup, _ set: String) async throws -> String? {
        var headers = HTTPHeaders()
        headers["Accept"] = "application/json"
        headers["Prefer"] = "odata.track-changes"
        var next: String? = setup.gateways[0].root.absoluteString + set
        var last: TransportResponse?
        while let url = next {
            let answer = try await DefaultTransport.make().send(
                TransportRequest(method: "GET", url: url, headers: headers), timeout: 30)
            #expect(answer.status == 200)
            let json = try JSONValue.parse(answer.body)
            next = (json["@odata.nextLink"] ?? json["d"]?["__next"])?.stringValue
            last = answer
            if next != nil { #expect(answer.headers[Gateway.checksumHeader] == nil, "only the last page has one") }
        }
        return last?.headers[Gateway.checksumHeader]
    }

    /// Removes the row of partner `key` from the store file, as a faulty restore would.
    static func removePartner(_ file: String, _ key: String) throws {
        let connection = try Connection(path: file)
        defer { connection.close() }
        let tables = try connection.query(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%PartnerID%'"
        )
        .compactMap { row -> String? in
            if case .text(let name)? = row.first { return name }
            return nil
        }
        let table = try #require(tables.first { $0.contains("BusinessPartner") } ?? tables.first)
        #expect(try connection.execute("DELETE FROM \"\(table)\" WHERE \"PartnerID\" = ?", [.text(key)]) == 1)
    }

    @Test(arguments: [false, true])
    func aRowLostFromTheStoreIsFoundAndReadAgain(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, instances: 1)
        do {
            let sent = try #require(try await Self.checksum(setup, "BusinessPartners"))
            let parsed = try #require(Downloader.parseChecksum(sent), "\(sent)")
            let partners = try await GatewayUploadTests.backendRows(setup, "BusinessPartners")
            #expect(parsed.rows == partners.count)
            var device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "checksum")
            let truth = try await GatewayDeltaTests.truth(setup)
            #expect(try await GatewayDeltaTests.held(device) == truth)
            // A download of an unchanged store finds nothing to say.
            try await device.download()
            #expect(
                try await device.readEntities("EventLog").filter { $0.string("Type") == "ScopeChecksumMismatch" }
                    .isEmpty)
            var parameters = OfflineODataParameters()
            parameters.storePath = setup.folder
            parameters.storeName = "checksum"
            await device.close()
            try Self.removePartner(parameters.storeFile, "BP1")
            device = OfflineODataProvider(serviceRoot: setup.gateways[0].root, parameters: parameters)
            try await device.open()
            #expect(try await GatewayDeltaTests.held(device) != truth, "the row is gone from the store")
            // The delta has nothing for BP1 (the gateway's row did not change); the checksum
            // tells the store is short of a row, and the query is read again.
            try await device.download()
            #expect(try await GatewayDeltaTests.held(device) == truth)
            let events = try await device.readEntities("EventLog").filter {
                $0.string("Type") == "ScopeChecksumMismatch"
            }
            #expect(events.count == 1)
            #expect(events.first?.string("Details")?.contains("BusinessPartners") == true, "\(events)")
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// Right after an upload the gateway's rows may be older than what the device holds (its
    /// answer's ETag): no checksum then, so that no device reads again for nothing; the next
    /// refresh brings it back.
    @Test(arguments: [false, true])
    func noChecksumUntilARefreshAfterAnUpload(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, instances: 1)
        do {
            let device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "written")
            #expect(try await Self.checksum(setup, "BusinessPartners") != nil)
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"written"}"#.utf8))
            try await device.upload()
            // The refresh interval is 0: this read refreshes, after the upload.
            let after = try #require(try await Self.checksum(setup, "BusinessPartners"))
            #expect(Downloader.parseChecksum(after) != nil)
            try await device.download()
            #expect(try await GatewayDeltaTests.held(device) == (try await GatewayDeltaTests.truth(setup)))
            #expect(
                try await device.readEntities("EventLog").filter { $0.string("Type") == "ScopeChecksumMismatch" }
                    .isEmpty)
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
        // With a long refresh interval the scope stays older than the upload: no checksum.
        let slow = try await GatewayDeltaTests.start(v2: v2, instances: 1, configure: { $0.refreshInterval = 600 })
        do {
            let device = try await GatewayDeltaTests.device(slow, gateway: 0, name: "slow")
            #expect(try await Self.checksum(slow, "BusinessPartners") != nil)
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"slow"}"#.utf8))
            try await device.upload()
            #expect(try await Self.checksum(slow, "BusinessPartners") == nil)
            try await device.download()
            #expect(
                try await device.readEntities("EventLog").filter { $0.string("Type") == "ScopeChecksumMismatch" }
                    .isEmpty)
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await slow.stop()
    }

    @Test func checksumTextAndTerms() {
        #expect(Downloader.parseChecksum("rows=3;sum=18446744073709551615")?.rows == 3)
        #expect(Downloader.parseChecksum("rows=3; sum=7")?.sum == 7)
        #expect(Downloader.parseChecksum("rows=-1;sum=7") == nil)
        #expect(Downloader.parseChecksum("rows=3") == nil)
        #expect(Downloader.parseChecksum("rows=3;sum=18446744073709551616") == nil, "more than 64 bits")
        // MD5(W/"1") = 5c46c15eefe54702…: its first 60 bits.
        #expect(Downloader.checksumTerm(#"W/"1""#) == 0x5c4_6c15_eefe_5470)
        let term = Downloader.checksumTerm(#"W/"gw.12.abc""#)
        #expect(term < 1 << 60)
        #expect(term != Downloader.checksumTerm(#"W/"gw.12.abd""#))
    }
}
