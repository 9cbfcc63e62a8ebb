import Foundation
import Testing
import ODataCore
import ODataServer
@testable import OfflineOData

/// Media changes offline (SPEC §5 "media"): a media entity's stream replaced with
/// `PUT Set(key)/$value`, and media entities created from their stream, applied to the store and
/// queued for upload, against the reference server over loopback.
@Suite struct MediaChangeTests {
    /// Every byte value, line breaks and something that looks like a batch delimiter: a stream
    /// must reach the backend unchanged inside a multipart `$batch`.
    static let binary: [UInt8] = Array(0...255) + Array("\r\n--batch_x\r\n\r\nHTTP/1.1 200 OK\r\n".utf8) + [0, 0x0D, 0x0A, 0xFF]

    static let queries = [OfflineODataDefiningQuery(name: "Pictures", query: "ProductPictures", automaticallyRetrievesStreams: true),
                          OfflineODataDefiningQuery(name: "Products", query: "Products")]

    /// Puts a stream on the backend directly, as another user would.
    static func putBackendMedia(_ fixture: Fixture, _ id: String, _ body: [UInt8], _ type: String) async throws -> Int {
        var headers = ODataCore.HTTPHeaders()
        headers["Content-Type"] = type
        headers["If-Match"] = "*"
        return try await DefaultTransport.make().send(TransportRequest(method: "PUT", url: fixture.server.v4Root.absoluteString + "ProductPictures('\(id)')/$value",
                                                                          headers: headers, body: body), timeout: 10).status
    }

    /// The backend's stream of a picture.
    static func backendMedia(_ fixture: Fixture, _ id: String) async throws -> (status: Int, type: String?, body: [UInt8]) {
        let response = try await DefaultTransport.make().send(TransportRequest(method: "GET", url: fixture.server.v4Root.absoluteString + "ProductPictures('\(id)')/$value"),
                                                                 timeout: 10)
        return (response.status, response.headers["Content-Type"], response.body)
    }

    static func localStream(_ provider: OfflineODataProvider, _ id: String) async throws -> [UInt8]? {
        try await provider.readMediaStream(in: "ProductPictures", key: ["PictureID": .string(id)])?.body
    }

    @Test(arguments: [false, true])
    func streamChangesAndMediaCreatesAreQueuedAndUploaded(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        #expect(try await Self.putBackendMedia(fixture, "PIC0", Array("old".utf8), "text/plain") < 300)
        let provider = try await fixture.provider(v2: v2, queries: Self.queries)
        try await provider.open()
        #expect(try await Self.localStream(provider, "PIC0") == Array("old".utf8))

        // A new stream for a downloaded picture (the header name in any case).
        let put = try await provider.execute(method: "PUT", url: "ProductPictures('PIC0')/$value", headers: ["content-type": "image/png"], body: Self.binary)
        #expect(put.status == 204)
        let local = try await provider.execute(method: "GET", url: "ProductPictures('PIC0')/$value")
        #expect(local.body == Self.binary)
        #expect(local.headers["Content-Type"] == "image/png")
        #expect(count(try await provider.read("ProductPictures?$filter=sap.hasPendingChanges()")) == 1)
        // Media entities read locally carry their stored stream's type and read link.
        let pictures = try await provider.readEntities("ProductPictures?$orderby=PictureID")
        #expect(pictures.first?.control.mediaContentType == "image/png")
        #expect(pictures.first?.control.mediaReadLink == "ProductPictures('PIC0')/$value")
        #expect(pictures.dropFirst().first?.control.mediaContentType == nil, "PIC1 has no stream")
        let expanded = try await provider.readEntities("Products('P0')?$expand=Pictures")
        if case .collection(let inline)? = expanded.first?.navigation.first(where: { $0.name == "Pictures" })?.inline {
            #expect(inline.entities.first?.control.mediaReadLink == "ProductPictures('PIC0')/$value")
        } else {
            Issue.record("Products('P0')?$expand=Pictures has no inline pictures")
        }
        let single = try await provider.execute(method: "GET", url: "Products('P0')/Pictures")
        #expect(String(decoding: single.body, as: UTF8.self).contains(v2 ? #""content_type":"image/png""# : #""@odata.mediaContentType":"image/png""#),
                "\(String(decoding: single.body, as: UTF8.self))")
        // The RequestQueue shows the request; its body is a stream, not text.
        let queued = try await provider.readEntities("RequestQueue")
        #expect(queued.count == 1)
        #expect(string(queued.first, "RequestMethod") == "PUT")
        #expect(string(queued.first, "RequestURL") == "ProductPictures('PIC0')/$value")
        #expect(queued.first?["RequestBody"] == .null)
        #expect(try await Self.backendMedia(fixture, "PIC0").body == Array("old".utf8))

        // A media entity created from its stream gets a local key; its caption is set after.
        let created = try await provider.createMediaEntity(in: "ProductPictures", contentType: "text/plain", body: Array("new picture".utf8), slug: "PICNEW")
        guard case .primitive(.string(let localID))? = created["PictureID"] else {
            Issue.record("the created media entity has no key")
            return
        }
        #expect(localID.hasPrefix("LOCAL~"))
        #expect(try await Self.localStream(provider, localID) == Array("new picture".utf8))
        try await provider.updateEntity(Entity(properties: [NamedValue(name: "PictureID", value: .primitive(.string(localID))),
                                                            NamedValue(name: "Caption", value: .primitive(.string("taken offline")))]),
                                        in: "ProductPictures")
        #expect(count(try await provider.read("ProductPictures?$filter=sap.isLocal()")) == 2)

        // The queue survives a restart with its media requests.
        await provider.close()
        let reopened = try await fixture.provider(v2: v2, queries: Self.queries)
        try await reopened.open()
        try await reopened.upload()
        #expect(try await reopened.isRequestQueueEmpty)
        #expect(count(try await reopened.read("ErrorArchive")) == 0)

        let sent = try await Self.backendMedia(fixture, "PIC0")
        #expect(sent.body == Self.binary)
        #expect(sent.type == "image/png")
        let newPicture = try await Self.backendMedia(fixture, "PICNEW")
        #expect(newPicture.body == Array("new picture".utf8))
        #expect(newPicture.type == "text/plain")
        #expect(try await fixture.backend("ProductPictures('PICNEW')")["Caption"]?.stringValue == "taken offline")
        // The local entity has the backend's key and ETag; the local read link still works.
        #expect(count(try await reopened.read("ProductPictures?$filter=sap.hasPendingChanges()")) == 0)
        #expect(try await Self.localStream(reopened, "PICNEW") == Array("new picture".utf8))
        #expect(try await reopened.execute(method: "GET", url: "ProductPictures('\(localID)')/$value").body == Array("new picture".utf8))
        let etag = try await fixture.backend("ProductPictures('PIC0')")["@odata.etag"]?.stringValue
        #expect(etag != nil)
        #expect(try await reopened.readEntities("ProductPictures('PIC0')").first?.control.etag == etag)
        await reopened.close()
    }

    @Test func undoAndErrorArchiveBringTheKeptStreamBack() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        #expect(try await Self.putBackendMedia(fixture, "PIC0", Array("old".utf8), "text/plain") < 300)
        let provider = try await fixture.provider(queries: Self.queries)
        try await provider.open()

        // Undo: the downloaded stream comes back; a stream the entity never had goes again.
        try await provider.updateMediaStream(in: "ProductPictures", key: ["PictureID": .string("PIC0")], contentType: "image/png", body: Self.binary)
        try await provider.updateMediaStream(in: "ProductPictures", key: ["PictureID": .string("PIC0")], contentType: "image/png", body: [1, 2, 3])
        try await provider.updateMediaStream(in: "ProductPictures", key: ["PictureID": .string("PIC1")], contentType: "image/png", body: [4, 5])
        #expect(try await Self.localStream(provider, "PIC1") == [4, 5])
        try await provider.undoPendingChanges(forURLs: ["ProductPictures('PIC0')", "ProductPictures('PIC1')"])
        let restored = try await provider.readMediaStream(in: "ProductPictures", key: ["PictureID": .string("PIC0")])
        #expect(restored?.body == Array("old".utf8))
        #expect(restored?.contentType == "text/plain")
        await #expect(throws: OfflineODataError.self) { try await Self.localStream(provider, "PIC1") }
        #expect(try await provider.isRequestQueueEmpty)
        #expect(count(try await provider.read("ProductPictures?$filter=sap.isLocal()")) == 0)

        // Undo of a media create: the entity and its stream go.
        let created = try await provider.createMediaEntity(in: "ProductPictures", contentType: "text/plain", body: [9], slug: "PICX")
        guard case .primitive(let localID)? = created["PictureID"] else { Issue.record("no key"); return }
        try await provider.undoPendingChanges(for: "ProductPictures", key: ["PictureID": localID])
        #expect(try await provider.readMediaStream(in: "ProductPictures", key: ["PictureID": localID]) == nil)
        let store = try await provider.openStore()
        #expect(try await store.read { reader in try reader.connection.query("SELECT count(*) FROM oo_streams WHERE entity_key LIKE '%LOCAL%'").first?.first } == .integer(0))

        // A conflict: the backend changed the picture since the download. The PUT fails with
        // 412, lands in the ErrorArchive without a text body, and deleting it reverts.
        #expect(try await fixture.backendSend("PATCH", "ProductPictures('PIC0')", #"{"Caption":"changed on the backend"}"#) < 300)
        let recorder = Recorder()
        await provider.setDelegate(recorder)
        try await provider.updateMediaStream(in: "ProductPictures", key: ["PictureID": .string("PIC0")], contentType: "image/png", body: Self.binary)
        try await provider.upload()
        #expect(recorder.failures.map(\.httpStatus) == [412])
        let archived = try await provider.readEntities("ErrorArchive")
        #expect(archived.count == 1)
        #expect(string(archived.first, "RequestURL") == "ProductPictures('PIC0')/$value")
        #expect(archived.first?["RequestBody"] == .null)
        #expect(count(try await provider.read("ProductPictures?$filter=sap.inErrorState()")) == 1)
        #expect(try await Self.localStream(provider, "PIC0") == Self.binary)
        #expect(try await Self.backendMedia(fixture, "PIC0").body == Array("old".utf8))
        guard case .primitive(.int64(let archivedID))? = archived.first?["RequestID"] else { Issue.record("no RequestID"); return }
        _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(archivedID))")
        #expect(try await Self.localStream(provider, "PIC0") == Array("old".utf8))
        #expect(count(try await provider.read("ProductPictures?$filter=sap.inErrorState() or sap.hasPendingChanges()")) == 0)
        #expect(try await store.read { reader in try reader.connection.query("SELECT count(*) FROM oo_stream_original").first?.first } == .integer(0))

        // A stream sent while a caption waits: undo keeps the stream the backend now has.
        await provider.setDelegate(nil)
        try await provider.download()
        try await provider.updateMediaStream(in: "ProductPictures", key: ["PictureID": .string("PIC0")], contentType: "image/png", body: [7, 7, 7],
                                             options: OfflineODataRequestOptions(uploadCategory: "media"))
        _ = try await provider.execute(method: "PATCH", url: "ProductPictures('PIC0')", body: Array(#"{"Caption":"not yet"}"#.utf8))
        try await provider.upload(categories: ["media"])
        #expect(try await Self.backendMedia(fixture, "PIC0").body == [7, 7, 7])
        try await provider.undoPendingChanges(forURL: "ProductPictures('PIC0')")
        #expect(try await Self.localStream(provider, "PIC0") == [7, 7, 7])
        #expect(string(try await provider.readEntities("ProductPictures('PIC0')").first, "Caption") == "changed on the backend")
    }

    /// A media entity deleted locally keeps its stream across a download, so an undo brings
    /// both back (the download's clean-up of streams without an entity removed it).
    @Test(arguments: [false, true])
    func aDeletedMediaEntityKeepsItsStreamForTheUndoAcrossADownload(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        #expect(try await Self.putBackendMedia(fixture, "PIC0", Array("old".utf8), "text/plain") < 300)
        let provider = try await fixture.provider(v2: v2, queries: Self.queries)
        try await provider.open()
        _ = try await provider.execute(method: "DELETE", url: "ProductPictures('PIC0')")
        try await provider.download()
        try await provider.undoPendingChanges(forURLs: ["ProductPictures('PIC0')"])
        let restored = try await provider.readMediaStream(in: "ProductPictures", key: ["PictureID": .string("PIC0")])
        #expect(restored?.body == Array("old".utf8))
        #expect(restored?.contentType == "text/plain")
        await provider.close()
    }

    @Test func aDownloadKeepsAPendingStreamAndALostResponseIsAppliedOnce() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        #expect(try await Self.putBackendMedia(fixture, "PIC0", Array("old".utf8), "text/plain") < 300)
        #expect(try await Self.putBackendMedia(fixture, "PIC1", Array("one".utf8), "text/plain") < 300)
        let provider = try await fixture.provider(queries: Self.queries)
        try await provider.open()
        try await provider.updateMediaStream(in: "ProductPictures", key: ["PictureID": .string("PIC0")], contentType: "image/png", body: Self.binary)
        // The backend changes both pictures' streams: the download brings PIC1's; PIC0 keeps
        // its unsent local stream.
        #expect(try await Self.putBackendMedia(fixture, "PIC0", Array("theirs".utf8), "text/plain") < 300)
        #expect(try await Self.putBackendMedia(fixture, "PIC1", Array("two".utf8), "text/plain") < 300)
        try await provider.download()
        #expect(try await Self.localStream(provider, "PIC1") == Array("two".utf8))
        #expect(try await Self.localStream(provider, "PIC0") == Self.binary)
        #expect(count(try await provider.read("ProductPictures?$filter=sap.hasPendingChanges()")) == 1)

        // The download made the backend's stream the one kept for undo.
        try await provider.undoPendingChanges(forURL: "ProductPictures('PIC0')")
        #expect(try await Self.localStream(provider, "PIC0") == Array("theirs".utf8))

        // A lost response: the media entity was created, the answer never came. The resend
        // with the same repeatability ID is applied once (a second create of the key the Slug
        // names would fail).
        try await provider.updateMediaStream(in: "ProductPictures", key: ["PictureID": .string("PIC0")], contentType: "image/png", body: Self.binary)
        try await provider.createMediaEntity(in: "ProductPictures", contentType: "application/pdf", body: Self.binary, slug: "PICLOST")
        await fixture.server.service.faults.set([FaultRule(method: "POST", urlContains: "$batch", dropAfterCommit: true, times: 1)])
        await #expect(throws: OfflineODataError.self) { try await provider.upload() }
        #expect(try await !provider.isRequestQueueEmpty)
        try await provider.upload()
        #expect(try await provider.isRequestQueueEmpty)
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        #expect(try await Self.backendMedia(fixture, "PIC0").body == Self.binary)
        #expect(try await Self.backendMedia(fixture, "PICLOST").body == Self.binary)
        #expect(try await Self.localStream(provider, "PICLOST") == Self.binary)
    }

    @Test func theQueueAlgorithmsCombineStreamsButNeverWithValues() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        var parameters = fixture.parameters()
        parameters.enableRequestQueueOptimization = true
        parameters.enableUndoLocalCreation = true
        let provider = try await fixture.provider(parameters: parameters, queries: Self.queries)
        try await provider.open()
        // Create + new stream + caption: one create with the last stream, the caption after it.
        let created = try await provider.createMediaEntity(in: "ProductPictures", contentType: "text/plain", body: Array("draft".utf8), slug: "PICOPT")
        guard case .primitive(.string(let localID))? = created["PictureID"] else { Issue.record("no key"); return }
        _ = try await provider.execute(method: "PUT", url: "ProductPictures('\(localID)')/$value", headers: ["Content-Type": "image/png"], body: Self.binary)
        _ = try await provider.execute(method: "PATCH", url: "ProductPictures('\(localID)')", body: Array(#"{"Caption":"final"}"#.utf8))
        // Two streams for a downloaded picture: the last one. A stream, then a delete: the delete.
        _ = try await provider.execute(method: "PUT", url: "ProductPictures('PIC0')/$value", headers: ["Content-Type": "text/plain"], body: Array("first".utf8))
        _ = try await provider.execute(method: "PUT", url: "ProductPictures('PIC0')/$value", headers: ["Content-Type": "text/csv"], body: Array("a,b".utf8))
        _ = try await provider.execute(method: "PUT", url: "ProductPictures('PIC2')/$value", headers: ["Content-Type": "text/plain"], body: Array("gone".utf8))
        _ = try await provider.execute(method: "DELETE", url: "ProductPictures('PIC2')")
        // A media create deleted again: nothing is sent.
        let dropped = try await provider.createMediaEntity(in: "ProductPictures", contentType: "text/plain", body: [1], slug: "PICDROP")
        guard case .primitive(let droppedID)? = dropped["PictureID"] else { Issue.record("no key"); return }
        try await provider.deleteEntity(in: "ProductPictures", key: ["PictureID": droppedID])

        #expect(try await provider.applyQueueAlgorithms() == 5)
        let queue = try await provider.readEntities("RequestQueue?$orderby=RequestID")
        #expect(queue.map { "\(string($0, "RequestMethod") ?? "") \(string($0, "RequestURL") ?? "")" } == [
            "POST ProductPictures",
            "PATCH ProductPictures('\(localID)')",
            "PUT ProductPictures('PIC0')/$value",
            "DELETE ProductPictures('PIC2')",
        ])
        try await provider.upload()
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        let createdOnBackend = try await Self.backendMedia(fixture, "PICOPT")
        #expect(createdOnBackend.body == Self.binary)
        #expect(createdOnBackend.type == "image/png")
        #expect(try await fixture.backend("ProductPictures('PICOPT')")["Caption"]?.stringValue == "final")
        let csv = try await Self.backendMedia(fixture, "PIC0")
        #expect(csv.body == Array("a,b".utf8))
        #expect(csv.type == "text/csv")
        #expect(try await Self.backendMedia(fixture, "PICDROP").status == 404)
        #expect(try await fixture.backend("ProductPictures('PIC2')")["error"] != nil)
    }

    @Test func withoutBatchMediaRequestsGoOneByOneAndFollowTheirCreate() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        var parameters = fixture.parameters()
        parameters.backendSupportsBatch = false
        let provider = try await fixture.provider(parameters: parameters, queries: Self.queries)
        try await provider.open()
        // Created under a product; then its caption and a second stream, by its local key.
        let created = try await provider.execute(method: "POST", url: "Products('P1')/Pictures", headers: ["Content-Type": "image/jpeg", "Slug": "PICNAV"],
                                                 body: [0xFF, 0xD8, 0xFF])
        #expect(created.status == 201)
        guard case .entity(let entity?)? = created.result, case .primitive(.string(let localID))? = entity["PictureID"] else {
            Issue.record("the created media entity has no key")
            return
        }
        #expect(string(entity, "ProductID") == "P1")
        #expect(count(try await provider.read("Products('P1')/Pictures")) == 2)
        _ = try await provider.execute(method: "PATCH", url: "ProductPictures('\(localID)')", body: Array(#"{"Caption":"by navigation"}"#.utf8))
        _ = try await provider.execute(method: "PUT", url: "ProductPictures('\(localID)')/$value", headers: ["Content-Type": "image/gif"], body: Self.binary)
        try await provider.upload()
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        #expect(try await provider.isRequestQueueEmpty)
        let sent = try await Self.backendMedia(fixture, "PICNAV")
        #expect(sent.body == Self.binary)
        #expect(sent.type == "image/gif")
        let row = try await fixture.backend("ProductPictures('PICNAV')")
        #expect(row["ProductID"]?.stringValue == "P1")
        #expect(row["Caption"]?.stringValue == "by navigation")
        #expect(try await Self.localStream(provider, "PICNAV") == Self.binary)
    }

    @Test func badMediaRequestsAreRefusedWithAReason() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(queries: Self.queries)
        try await provider.open()
        let cases: [(method: String, url: String, headers: [String: String], expected: String)] = [
            ("PATCH", "ProductPictures('PIC0')/$value", ["Content-Type": "image/png"], "replaced with PUT"),
            ("DELETE", "ProductPictures('PIC0')/$value", [:], "delete the media entity"),
            ("PUT", "Products('P1')/$value", ["Content-Type": "image/png"], "is not a media entity"),
            ("PUT", "ProductPictures('NOPE')/$value", ["Content-Type": "image/png"], "not in the offline store"),
            ("PUT", "ProductPictures/$value", ["Content-Type": "image/png"], "$value needs a primitive property or a media entity"),
            ("PUT", "Products('P1')/Name/$value", ["Content-Type": "text/plain"], "cannot be modified offline"),
            // Not a media entity set: the body must be an entity.
            ("POST", "Products", ["Content-Type": "image/png"], "not a valid Products entity"),
        ]
        for item in cases {
            do {
                _ = try await provider.execute(method: item.method, url: item.url, headers: item.headers, body: [0x89, 0x50])
                Issue.record("\(item.method) \(item.url) was accepted")
            } catch let error as OfflineODataError {
                #expect(error.code == .invalidRequest && error.message.contains(item.expected), "\(item.method) \(item.url): \(error.message)")
            }
        }
        await #expect(throws: OfflineODataError.self) {
            try await provider.createMediaEntity(in: "ProductPictures", contentType: "application/json", body: Array("{}".utf8))
        }
        #expect(try await provider.isRequestQueueEmpty)
        #expect(count(try await provider.read("ProductPictures?$filter=sap.isLocal()")) == 0)
    }
}
