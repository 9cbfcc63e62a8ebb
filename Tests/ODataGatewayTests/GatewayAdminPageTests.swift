import Foundation
import InteropSupport
import ODataCore
import ODataServer
import OfflineOData
import Testing

@testable import ODataGateway

private typealias Ops = GatewayOperationsTests

/// Issue 56: the admin page, in a real headless Chromium (Debian's `chromium` and
/// `chromium-driver`, driven by Selenium from PyPI: `Tests/Interop/admin_page_chromium.py`).
@Suite(.serialized) struct GatewayAdminPageTests {
    /// The page shows nothing without credentials; with the operator's it shows readiness, a
    /// request in doubt (its device-made ID and markup as text), the scope and the device; its
    /// "Mark applied" button records the decision, which the admin API then reports; another
    /// site's page in the same browser cannot post the form. V2 and V4.
    @Test(arguments: [false, true])
    func anOperatorSettlesARequestInDoubtOnThePage(v2: Bool) async throws {
        let setup = try await GatewayUploadTests.start(v2: v2, instances: 0)
        do {
            let gateway = try await Ops.adminGateway(setup)
            let root = gateway.root.absoluteString
            let device = "field-tablet-\(v2 ? "v2" : "v4")"
            // A tracked read makes the scope and notes the device.
            let read = try await Ops.get(
                root + "Contacts", headers: [("Prefer", "odata.track-changes"), ("Client-Instance-ID", device)])
            #expect(read.status == 200)
            // A create whose answer the backend loses: answered in doubt. Its ID is the device's
            // own text, markup included: the page must show it as text.
            let id = "doubt-<b>\(v2 ? 2 : 4)</b>"
            await setup.backend.service.faults.set([
                FaultRule(method: "POST", urlContains: "$batch", dropAfterCommit: true, times: 1)
            ])
            let (answer, _) = try await GatewayUploadTests.send(
                GatewayUploadTests.batch(id: id, name: "Page"), to: root)
            #expect(answer.status == (v2 ? 202 : 200))
            let listed = try Ops.json(try await Ops.admin(gateway, "GET", "/api/requests/in-doubt")).arrayValue ?? []
            #expect(listed.map { $0["requestID"]?.stringValue } == [id], "\(listed)")
            // The raw page escapes what devices sent.
            let raw = try await Ops.get(
                "http://127.0.0.1:\(try #require(gateway.adminPort))/",
                headers: [("Authorization", "Basic " + Data("operator:operator-password".utf8).base64EncodedString())])
            let html = String(decoding: raw.body, as: UTF8.self)
            #expect(raw.status == 200)
            #expect(raw.headers["Content-Security-Policy"]?.contains("frame-ancestors 'none'") == true)
            #expect(!html.contains("<b>") && html.contains("&lt;b&gt;"), "escaped")
            // Chromium.
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-page-\(UUID())")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let screenshot = folder.appendingPathComponent("admin-page.png").path
            let python = try await Interop.pythonOffPool()
            let (status, out, err) = try await Interop.runOffPool(
                python,
                [
                    Interop.script("admin_page_chromium.py"), "http://127.0.0.1:\(try #require(gateway.adminPort))",
                    "operator", "operator-password", id, device, screenshot,
                ])
            #expect(status == 0, "\(out)\n\(err.suffix(3000))")
            for step in ["ok anonymous", "ok operator", "ok clicked", "ok screenshot", "ok another site"] {
                #expect(out.contains(step), "\(step): \(out)")
            }
            #expect((try? FileManager.default.attributesOfItem(atPath: screenshot)[.size] as? Int) ?? 0 > 10_000)
            // The click went through the admin port: the API says applied, and the other site's
            // post changed nothing.
            let after = try Ops.json(try await Ops.admin(gateway, "GET", "/api/requests/in-doubt")).arrayValue ?? []
            #expect(after.first?["resolution"]?.stringValue == "applied", "\(after)")
            if let copy = ProcessInfo.processInfo.environment["OODATA_ADMIN_SCREENSHOT"], !v2 {
                try? FileManager.default.removeItem(atPath: copy)
                try FileManager.default.copyItem(atPath: screenshot, toPath: copy)
            }
            try? FileManager.default.removeItem(at: folder)
            await gateway.stop()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// The page's forms outside a browser: a form is refused on the JSON API, the forms need the
    /// admin credentials, and a made-up `done` cannot put words on the page.
    @Test func theFormsNeedTheAdminAndThePageSaysOnlyItsOwnWords() async throws {
        let setup = try await GatewayUploadTests.start(v2: false, instances: 0)
        do {
            let gateway = try await Ops.adminGateway(setup)
            let port = try #require(gateway.adminPort)
            func post(_ path: String, _ form: String, authorization: String?) async throws -> TransportResponse {
                var headers = HTTPHeaders()
                headers["Content-Type"] = "application/x-www-form-urlencoded"
                if let authorization { headers["Authorization"] = authorization }
                return try await DefaultTransport.make().send(
                    TransportRequest(
                        method: "POST", url: "http://127.0.0.1:\(port)" + path, headers: headers,
                        body: Array(form.utf8)), timeout: 30)
            }
            let bearer = "Bearer \(Ops.token)"
            #expect(try await post("/ui/standby", "standby=on", authorization: nil).status == 401)
            #expect(await gateway.gateway.isOnStandby == false)
            // A form's answer is a 303 back to the page (followed here, with the credentials),
            // which names what was done.
            func text(_ response: TransportResponse) -> String { String(decoding: response.body, as: UTF8.self) }
            let on = try await post("/ui/standby", "standby=on", authorization: bearer)
            #expect(on.status == 200)
            #expect(text(on).contains("On standby: /readyz answers 503"), "\(text(on))")
            #expect(await gateway.gateway.isOnStandby == true)
            #expect(text(try await post("/ui/standby", "standby=maybe", authorization: bearer))
                .contains("The form was not understood"))
            #expect(try await post("/api/standby", "standby=off", authorization: bearer).status == 403)
            #expect(await gateway.gateway.isOnStandby == true)
            let unknown = try await post(
                "/ui/requests/resolve", "backend=x&requestID=nothing&decision=applied", authorization: bearer)
            #expect(text(unknown).contains("Request nothing is not in doubt any more"), "\(text(unknown))")
            let page = try await Ops.get(
                "http://127.0.0.1:\(port)/?done=Call%20this%20number&item=x", headers: [("Authorization", bearer)])
            let html = String(decoding: page.body, as: UTF8.self)
            #expect(page.status == 200)
            #expect(!html.contains("Call this number") && !html.contains(#"id="notice""#))
            #expect(html.contains(#"id="standby""#), "the page shows standby")
            await gateway.stop()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}
