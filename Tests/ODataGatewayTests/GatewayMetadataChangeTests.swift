import Foundation
import ODataCore
import ODataGateway
import ODataServer
import OfflineOData
import Testing

/// A backend's `$metadata` changes while devices sync through the gateway (SPEC §14): the
/// gateway follows the new model, and each device migrates its store without losing a queued
/// change. Real PostgreSQL, two gateway instances, a backend without delta links.
@Suite(.serialized) struct GatewayMetadataChangeTests {
    final class Changes: OfflineODataDelegate, @unchecked Sendable {
        private let lock = NSLock()
        private var _all: [OfflineODataMetadataChange] = []
        var all: [OfflineODataMetadataChange] { lock.withLock { _all } }
        func offlineODataProvider(
            _ provider: OfflineODataProvider, didChangeMetadata change: OfflineODataMetadataChange
        ) {
            lock.withLock { _all.append(change) }
        }
    }

    static func model(_ edits: [(String, String)]) throws -> Model {
        var text = SalesSample.metadata
        for (old, new) in edits {
            #expect(text.contains(old))
            text = text.replacingOccurrences(of: old, with: new)
        }
        return try MetadataParser().parse(Data(text.utf8))
    }

    @Test(arguments: [false, true])
    func devicesFollowAdditiveAndBreakingChangesThroughTheGateway(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2)
        let changes = Changes()
        do {
            let device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "device")
            await device.setDelegate(changes)
            // A second device on the other instance, which keeps the old model until it learns.
            let second = try await GatewayDeltaTests.device(setup, gateway: 1, name: "second")
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"queued"}"#.utf8))

            // Additive: partners gain a Rating.
            let phone = #"<Property Name="Phone" Type="Edm.String"/>"#
            try await setup.backend.service.changeModel(
                to: Self.model([(phone, phone + #"<Property Name="Rating" Type="Edm.Int32"/>"#)]))
            #expect(
                try await GatewayDeltaTests.backendSend(setup, "PATCH", "BusinessPartners('BP1')", #"{"Rating":4}"#)
                    < 300)
            try await device.download()
            #expect(changes.all.map(\.kind) == [.additive])
            #expect(changes.all.first?.reReadDefiningQueries == ["BusinessPartners"])
            #expect(try await device.readEntities("BusinessPartners('BP1')").first?["Rating"] == .primitive(.int32(4)))
            try await device.upload()
            try await device.download()
            #expect(try await GatewayDeltaTests.held(device) == GatewayDeltaTests.truth(setup))

            // Breaking: partners lose Email; a queued change that uses it is archived, the other
            // one uploads.
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Email":"x@example.com"}"#.utf8))
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"after"}"#.utf8))
            try await setup.backend.service.changeModel(
                to: Self.model([
                    (phone, phone + #"<Property Name="Rating" Type="Edm.Int32"/>"#),
                    (
                        #"<Property Name="CompanyName" Type="Edm.String"/><Property Name="Email" Type="Edm.String"/>"#,
                        #"<Property Name="CompanyName" Type="Edm.String"/>"#
                    ),
                ]))
            try await device.download()
            #expect(changes.all.map(\.kind) == [.additive, .breaking])
            #expect(changes.all.last?.archivedRequests.count == 1)
            try await device.upload()
            try await device.download()
            #expect(try await GatewayDeltaTests.held(device) == GatewayDeltaTests.truth(setup))
            #expect(try await device.readEntities("BusinessPartners('BP2')").first?.string("Phone") == "after")
            let archive = try await device.readEntities("ErrorArchive")
            #expect(archive.map { $0.string("Code") } == ["MetadataChanged"])
            // The second device meets both changes at once (breaking) through its instance.
            let secondChanges = Changes()
            await second.setDelegate(secondChanges)
            try await second.download()
            #expect(secondChanges.all.map(\.kind) == [.breaking])
            #expect(try await GatewayDeltaTests.held(second) == GatewayDeltaTests.truth(setup))
            #expect(try await second.readEntities("BusinessPartners('BP1')").first?["Rating"] == .primitive(.int32(4)))
            await second.close()
            await device.close()
        } catch {
            await setup.stop()
            throw error
        }
        await setup.stop()
    }
}
