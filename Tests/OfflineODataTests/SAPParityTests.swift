import Foundation
import ODataCore
import ODataStore
import Testing
@testable import OfflineOData

/// Issue 20: code written against SAP's `OfflineODataParameters` compiles and means the same,
/// the store has a default home where an app may write, and every error explains itself in
/// `localizedDescription`.
@Suite struct SAPParityTests {
    @Test func parametersTakeSAPsTypes() {
        var parameters = OfflineODataParameters()
        #expect(parameters.storeName == "localstore")
        #expect(parameters.pageSize == OfflineODataParameters.noPaging && parameters.pageSize == nil)
        // The declarations SAP code assigns to.
        let folder: URL = FileManager.default.temporaryDirectory.appendingPathComponent("sap-parity", isDirectory: true)
        parameters.storePath = folder
        let name: String? = nil
        parameters.storeName = name
        let seconds: Int32 = 45
        parameters.timeout = seconds
        parameters.pageSize = OfflineODataParameters.noPaging
        #expect(parameters.storeFile == folder.appendingPathComponent("localstore.db").path)
        #expect(parameters.effectiveTimeout == 45)
        parameters.timeoutInterval = 1.5
        #expect(parameters.effectiveTimeout == 1.5)
        parameters.storeName = "orders"
        #expect(parameters.storeFile.hasSuffix("/sap-parity/orders.db"))
    }

    @Test func theDefaultStoreFolderIsTheApplicationDataFolder() {
        let folder = OfflineODataParameters.defaultStoreFolder.path
        #if canImport(Darwin)
        #expect(folder.contains("Application Support"), "\(folder)")
        #else
        let environment = ProcessInfo.processInfo.environment
        let base = environment["XDG_DATA_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? ((environment["HOME"] ?? NSHomeDirectory()) + "/.local/share")
        #expect(folder == (base as NSString).appendingPathComponent(ProcessInfo.processInfo.processName), "\(folder)")
        #endif
        #expect(OfflineODataParameters().storeFile == (folder as NSString).appendingPathComponent("localstore.db"))
        #expect(!folder.isEmpty && folder != FileManager.default.currentDirectoryPath)
    }

    @Test func theStoreFolderIsCreatedWhenMissing() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        var parameters = fixture.parameters()
        parameters.storePath = fixture.directory.appendingPathComponent("not/yet/there", isDirectory: true)
        let provider = try await fixture.provider(parameters: parameters)
        try await provider.open()
        #expect(FileManager.default.fileExists(atPath: parameters.storeFile))
        #expect(try await !provider.readEntities("BusinessPartners").isEmpty)
        await provider.close()
        // A folder that cannot be made is an error that names it.
        var blocked = fixture.parameters()
        let file = fixture.directory.appendingPathComponent("a-file")
        try Data("x".utf8).write(to: file)
        blocked.storePath = file.appendingPathComponent("inside", isDirectory: true)
        let refused = try await fixture.provider(parameters: blocked)
        do {
            try await refused.open()
            Issue.record("a store folder inside a file was accepted")
        } catch let error as OfflineODataError {
            #expect(error.code == .invalidParameter && error.message.contains("a-file/inside"), "\(error.message)")
        }
    }

    /// An alert shows `localizedDescription`: it must be the message, for every public error.
    @Test func everyErrorExplainsItselfInLocalizedDescription() throws {
        #expect(OfflineODataError(.storeBusy, "The store is locked").localizedDescription == "The store is locked")
        #expect(TransportError("Connection refused", url: "http://h/x").localizedDescription.contains("Connection refused"))
        #expect(StoreError(.notFound, "No entity").localizedDescription.contains("No entity"))
        do {
            _ = try URLParser(version: .v4).parse("Products?$filter=")
            Issue.record("an empty $filter parsed")
        } catch {
            #expect(!error.localizedDescription.contains("could not be completed"), "\(error.localizedDescription)")
            #expect(error.localizedDescription == "\(error)")
        }
        do {
            _ = try MetadataParser().parse("<nope/>")
            Issue.record("not CSDL parsed")
        } catch {
            #expect(!error.localizedDescription.contains("could not be completed"), "\(error.localizedDescription)")
        }
        do {
            _ = try JSONValue.parse(Array("{".utf8))
            Issue.record("a cut-off JSON parsed")
        } catch {
            #expect(!error.localizedDescription.contains("could not be completed"), "\(error.localizedDescription)")
        }
        let odata = ODataError(code: "E1", message: "Order locked")
        #expect(odata.localizedDescription.contains("Order locked"))
        #expect(DatabaseError(.busy, message: "locked").localizedDescription.contains("locked"))
    }
}
