import ArgumentParser
import Foundation
import ODataCore
import ODataServer
import OfflineOData

/// The main job: the reference server in-process plus an encrypted offline store, showing
/// open, local reads and writes, upload with a rejected request, and a delta download.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run the offline round trip against the embedded reference server (no setup, loopback only)."
    )

    @Option(help: "Keep the demo files in this folder (default: a temporary folder, removed afterwards).") var directory: String?
    @Option(help: "Size of the sample data.") var scale = 5
    @Flag(help: "Show the typed API instead: generated types, a live query, a local change, upload and sync status.")
    var typed = false
    @Flag(
        help: ArgumentHelp(
            "Show the server half: a throwaway PostgreSQL, a backend without delta links, two gateways and two "
                + "devices (`make demo ARGS=--gateway` installs PostgreSQL first)."))
    var gateway = false

    func run() async throws {
        let started = Date()
        print("OfflineOData \(PackageVersion.string) demo" + (typed ? " (typed API)" : gateway ? " (sync gateway)" : ""))
        let folder = directory.map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("oodata-demo-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { if directory == nil { try? FileManager.default.removeItem(at: folder) } }
        if gateway {
            guard !typed else { throw CLIFailure("--gateway and --typed are two demos: give one") }
            try await GatewayDemo.run(folder: folder, scale: scale, started: started)
            return
        }
        // The server rejects edits of one order, as a backend with a business rule would.
        let rule = FaultRule(method: "PATCH", urlContains: "SalesOrders('SO2')", status: 400, code: "OrderLocked",
                             message: "Sales order SO2 is already delivered and cannot be changed")
        heading("1. Reference server")
        let server = try await EmbeddedServer.sales(at: folder.appendingPathComponent("backend.sqlite").path, scale: scale, faults: [rule])
        print("  sales sample on \(server.v4Root.absoluteString)" + (typed ? "" : " (PATCH of SalesOrders('SO2') will be rejected)"))
        do {
            if typed {
                try await TypedDemo.run(server: server, folder: folder, started: started)
            } else {
                try await runDemo(server: server, folder: folder, started: started)
            }
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    private func runDemo(server: EmbeddedServer, folder: URL, started: Date) async throws {
        var parameters = OfflineODataParameters()
        parameters.storePath = folder
        parameters.storeName = "demo-offline"
        parameters.storeEncryptionKey = "demo-key-\(UUID().uuidString.prefix(8))"
        let printer = ProgressPrinter()
        let provider = OfflineODataProvider(serviceRoot: server.v4Root, parameters: parameters, delegate: printer)
        let queries = [
            OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners"),
            OfflineODataDefiningQuery(name: "Orders", query: "SalesOrders?$expand=Items"),
            OfflineODataDefiningQuery(name: "Products", query: "Products"),
            OfflineODataDefiningQuery(name: "Contacts", query: "Contacts"),
            OfflineODataDefiningQuery(name: "Pictures", query: "ProductPictures", automaticallyRetrievesStreams: true),
        ]
        for query in queries { try await provider.add(definingQuery: query) }

        heading("2. Open an encrypted offline store")
        try await provider.open()
        printer.finish()
        var downloaded: [String] = []
        for set in ["BusinessPartners", "SalesOrders", "SalesOrderItems", "Products", "Contacts", "ProductPictures"] {
            if case .count(let n) = try await provider.read("\(set)/$count") { downloaded.append("\(n) \(set)") }
        }
        print("  store \(parameters.storeFile) (SQLCipher, keyed)")
        print("  downloaded: " + downloaded.joined(separator: ", "))

        heading("3. Local queries (no network)")
        let top = try await provider.readEntities("SalesOrders?$orderby=GrossAmount desc&$top=3&$select=OrderID,GrossAmount,Currency")
        for order in top { print("  " + describe(order, ["OrderID", "GrossAmount", "Currency"])) }
        if case .count(let n) = try await provider.read("SalesOrders/$count?$filter=Items/any(i:i/Quantity ge 5)") {
            print("  orders with an item of quantity ≥ 5: \(n)")
        }
        let scoped = try await provider.read("ProductCategories")
        if case .collection(let collection) = scoped { print("  ProductCategories (not in any defining query): \(collection.entities.count) rows") }

        heading("4. Local edits (queued)")
        let partner = try await provider.readEntities("BusinessPartners?$orderby=PartnerID&$top=1").first
        let partnerID = partner.flatMap { entity -> String? in if case .primitive(.string(let id))? = entity["PartnerID"] { return id }; return nil } ?? "BP0"
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(partnerID)')", body: Array(#"{"Phone":"+49 30 1234567"}"#.utf8),
                                       options: OfflineODataRequestOptions(customTag: "new phone"))
        print("  PATCH BusinessPartners('\(partnerID)') Phone")
        let contact = try await provider.execute(method: "POST", url: "Contacts",
                                                 body: Array(#"{"FirstName":"Grace","LastName":"Offline","PartnerID":"\#(partnerID)"}"#.utf8),
                                                 options: OfflineODataRequestOptions(customTag: "new contact"))
        var localContact = "?"
        if case .entity(let created?)? = contact.result, let key = created["ContactID"] { localContact = Literal.format(key) }
        print("  POST Contacts → local key ContactID=\(localContact) (the backend generates the real one)")
        _ = try await provider.execute(method: "PATCH", url: "Contacts(\(localContact))", body: Array(#"{"Email":"grace@example.com"}"#.utf8))
        print("  PATCH Contacts(\(localContact)) Email (refers to the new contact)")
        _ = try await provider.execute(method: "PATCH", url: "SalesOrders('SO2')", body: Array(#"{"Note":"Please deliver before noon"}"#.utf8),
                                       options: OfflineODataRequestOptions(customTag: "note on SO2"))
        print("  PATCH SalesOrders('SO2') Note (the server will reject this one)")
        // A media entity created from its stream, then given its values.
        let picture = Array(#"<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><rect width="8" height="8" fill="teal"/></svg>"#.utf8)
        let created = try await provider.createMediaEntity(in: "ProductPictures", contentType: "image/svg+xml", body: picture, slug: "PIC-DEMO")
        var localPicture = "?"
        if let key = created["PictureID"] { localPicture = Literal.format(key) }
        _ = try await provider.execute(method: "PATCH", url: "ProductPictures(\(localPicture))", body: Array(#"{"Caption":"Taken on site","ProductID":"P0"}"#.utf8))
        print("  POST ProductPictures with a \(picture.count)-byte image/svg+xml stream → local key PictureID=\(localPicture); PATCH its Caption")
        if case .count(let n) = try await provider.read("RequestQueue/$count") { print("  request queue: \(n) requests") }

        heading("5. Upload")
        try await provider.upload()
        printer.finish()
        for failure in printer.failures {
            print("  requestDidFail: request \(failure.requestID) \(failure.method) \(failure.url) → HTTP \(failure.httpStatus) \(failure.code): \(failure.message)")
        }
        let archive = try await provider.readEntities("ErrorArchive?$filter=HTTPStatusCode eq 400")
        print("  ErrorArchive?$filter=HTTPStatusCode eq 400 → \(archive.count) row(s)")
        for row in archive { print("    " + describe(row, ["RequestID", "HTTPStatusCode", "Code", "CustomTag", "RequestURL"])) }
        if let relinked = try await provider.readEntities("Contacts(\(localContact))").first, let key = relinked["ContactID"] {
            print("  the local link Contacts(\(localContact)) now reads the backend's ContactID=\(Literal.format(key))")
        }
        if let stream = try await provider.readMediaStream(in: "ProductPictures", key: ["PictureID": .string("PIC-DEMO")]) {
            print("  ProductPictures(\(localPicture))/$value now reads ProductPictures('PIC-DEMO'): \(stream.body.count) bytes, \(stream.contentType)")
        }
        // Clear the archive: the rejected note is reverted locally.
        if case .primitive(.int64(let id))? = archive.first?["RequestID"] {
            _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(id))")
            print("  deleted the ErrorArchive entry: the local change to SO2 is reverted")
        }

        heading("6. A change on the server, then a delta download")
        let product = try await provider.readEntities("Products?$orderby=ProductID&$top=1").first
        let productID = product.flatMap { entity -> String? in if case .primitive(.string(let id))? = entity["ProductID"] { return id }; return nil } ?? "P0"
        var headers = ODataCore.HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers["If-Match"] = "*"
        let change = TransportRequest(method: "PATCH", url: server.v4Root.absoluteString + "Products('\(productID)')", headers: headers,
                                      body: Array(#"{"Name":"Renamed by another user"}"#.utf8))
        let answer = try await DefaultTransport.make().send(change, timeout: 10)
        print("  another user renamed Products('\(productID)') on the server (HTTP \(answer.status))")
        try await provider.download()
        printer.finish()
        let renamed = try await provider.readEntities("Products('\(productID)')").first
        if case .primitive(.string(let name))? = renamed?["Name"] { print("  after download, the local Products('\(productID)') is named \"\(name)\"") }
        if case .count(let n) = try await provider.read("Contacts/$count?$filter=sap.isLocal()") { print("  contacts still local-only: \(n)") }

        heading("Summary")
        for event in try await provider.readEntities("EventLog?$orderby=ID") { print("  " + describe(event, ["Type", "Details"])) }
        let pending = try await provider.hasPendingUpload
        print("  queue empty: \(!pending); failures reported: \(printer.failures.count); took \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
        await provider.close()
    }

    private func heading(_ text: String) {
        print("\n\(text)")
    }
}
