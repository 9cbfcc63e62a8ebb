import Foundation
import Hummingbird
import HTTPTypes
import Mustache
import NIOCore

/// The admin page (issue 56): one server-rendered HTML page on the admin port, behind the same
/// credentials as the admin API (a browser asks for the `[admin]` user and password), without
/// JavaScript. It shows readiness, scopes with their lag, requests in doubt with the actions that
/// settle them, devices, store files and support stores; its forms post to `/ui/…` and come back to the page
/// (303) with what was done.
enum GatewayAdminPage {
    /// What the page's forms did, as the page names it after the redirect (`?done=`): a fixed
    /// list, so a link cannot make the page say anything else.
    static let notices: [String: String] = [
        "applied": "Marked applied: request %@.",
        "notApplied": "Marked not applied: request %@.",
        "notInDoubt": "Request %@ is not in doubt any more, or a gateway forwards it now: nothing changed.",
        "refreshed": "Scope %@ refreshed from the backend.",
        "markedDue": "Scope %@ marked due: the next read of it refreshes it.",
        "noScope": "There is no scope %@.",
        "standbyOn": "On standby: /readyz answers 503, devices that come are still served.",
        "standbyOff": "Serving: /readyz answers 200 again when every check passes.",
        "badForm": "The form was not understood: nothing changed.",
    ]

    /// The headers of every page answer: no framing, no scripts, forms only to the page itself.
    static var securityHeaders: HTTPFields {
        var fields = HTTPFields()
        fields[.contentType] = "text/html; charset=utf-8"
        fields[.cacheControl] = "no-store"
        if let name = HTTPField.Name("Content-Security-Policy") {
            fields[name] = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
        }
        if let name = HTTPField.Name("X-Frame-Options") { fields[name] = "DENY" }
        if let name = HTTPField.Name("Referrer-Policy") { fields[name] = "same-origin" }
        return fields
    }

    /// `GET /` (and `/ui`): the page, with the notice `query` names.
    static func page(gateway: Gateway, query: String?) async -> Response {
        let form = Self.form(Array((query ?? "").utf8))
        var notice: String?
        if let done = form["done"], let text = notices[done] {
            notice = text.replacingOccurrences(of: "%@", with: String((form["item"] ?? "").prefix(200)))
        }
        let html: String
        do {
            html = try await render(gateway: gateway, notice: notice)
        } catch {
            gateway.logger.warning("The admin page could not be made", metadata: ["error": "\(error)"])
            html = "<!doctype html><title>oodata gateway</title><p>The gateway's state cannot be read now."
            return Response(
                status: .serviceUnavailable, headers: securityHeaders,
                body: ResponseBody(byteBuffer: ByteBuffer(string: html)))
        }
        return Response(status: .ok, headers: securityHeaders, body: ResponseBody(byteBuffer: ByteBuffer(string: html)))
    }

    /// A form's `POST /ui/…`: does it, then sends the browser back to the page.
    static func act(gateway: Gateway, path: [String], body: [UInt8]) async throws -> Response {
        let form = Self.form(body)
        let (done, item): (String, String)
        switch path {
        case ["ui", "requests", "resolve"]:
            guard let backend = form["backend"], let id = form["requestID"], !id.isEmpty,
                let decision = form["decision"], decision == "applied" || decision == "notApplied"
            else { return back("badForm", "") }
            let resolved = try await gateway.resolveInDoubt(
                backend: backend, requestID: id, applied: decision == "applied")
            (done, item) = (resolved ? decision : "notInDoubt", id)
        case ["ui", "scopes", "refresh"]:
            guard let text = form["scope"], let id = Int64(text) else { return back("badForm", "") }
            guard let outcome = try await gateway.refreshNow(scope: id) else { return back("noScope", text) }
            (done, item) = (outcome.outcome == "refreshed" ? "refreshed" : "markedDue", text)
        case ["ui", "standby"]:
            guard let value = form["standby"], value == "on" || value == "off" else { return back("badForm", "") }
            await gateway.setStandby(value == "on")
            (done, item) = (value == "on" ? "standbyOn" : "standbyOff", "")
        default:
            throw GatewayError(status: 404, code: "NotFound", "no admin form at /\(path.joined(separator: "/"))")
        }
        return back(done, item)
    }

    /// 303 to the page, naming what was done.
    static func back(_ done: String, _ item: String) -> Response {
        var fields = securityHeaders
        var query = URLComponents()
        query.queryItems = [URLQueryItem(name: "done", value: done), URLQueryItem(name: "item", value: item)]
        fields[.location] = "/" + (query.string ?? "")
        return Response(status: .seeOther, headers: fields)
    }

    /// The fields of an `application/x-www-form-urlencoded` body or query (`+` is a space); a
    /// name given twice keeps its first value.
    static func form(_ bytes: [UInt8]) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in String(decoding: bytes, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decoded(_ text: Substring) -> String {
                let spaced = text.replacingOccurrences(of: "+", with: " ")
                return spaced.removingPercentEncoding ?? spaced
            }
            let name = decoded(parts[0])
            if fields[name] == nil { fields[name] = parts.count > 1 ? decoded(parts[1]) : "" }
        }
        return fields
    }

    static let template = Result { try MustacheTemplate(string: source) }

    static func render(gateway: Gateway, notice: String?) async throws -> String {
        let report = await gateway.readiness()
        let standby = await gateway.isOnStandby
        // Each list shows its first `shown`; one with more says so (the admin API lists them all).
        let shown = 1000
        var cut: [String] = []
        func first<Row>(_ rows: [Row], _ name: String) -> [Row] {
            if rows.count > shown { cut.append(name) }
            return Array(rows.prefix(shown))
        }
        let scopes = first(try await gateway.store.scopeSummaries(limit: shown + 1), "scopes")
        let inDoubt = first(try await gateway.store.inDoubtRequests(cutAfter: 0, limit: shown + 1), "requests in doubt")
        let devices = first(try await gateway.store.devices(limit: shown + 1), "devices")
        let files = first(try await gateway.store.storeFiles(limit: shown + 1), "store files")
        let support = first(try await gateway.store.supportStores(limit: shown + 1), "support stores")
        var values: [String: Any] = [
            "version": GatewayVersion.current, "ready": report.ready, "standby": standby,
            "readyText": report.ready ? "ready" : "not ready",
            "checks": report.checks.map { check -> [String: Any] in
                ["name": check.name, "ok": check.ok, "detail": check.detail]
            },
            "scopes": scopes.map { scope -> [String: Any] in
                [
                    "id": String(scope.id), "backend": scope.backend, "query": scope.query, "user": scope.user,
                    "rows": scope.rows.map(String.init) ?? "–", "lag": scope.lagSeconds.map(Self.duration) ?? "never",
                    "lastRefresh": scope.lastRefresh.map(Self.time) ?? "never", "lastError": scope.lastError ?? "",
                    "markedDue": scope.markedDue,
                ]
            },
            "hasScopes": !scopes.isEmpty,
            "inDoubt": inDoubt.map { request -> [String: Any] in
                [
                    "backend": request.backend, "requestID": request.requestID, "request": request.request,
                    "user": request.user, "state": request.state, "forwardedAt": Self.time(request.forwardedAt),
                    "resolution": request.resolution ?? "", "open": request.resolution == nil,
                ]
            },
            "hasInDoubt": !inDoubt.isEmpty,
            "devices": devices.map { device -> [String: Any] in
                [
                    "backend": device.backend, "instance": device.clientInstanceID, "user": device.user,
                    "appVersion": device.appVersion ?? "", "lastSeen": Self.time(device.lastSeen),
                    "lastSync": device.lastSync.map(Self.time) ?? "never",
                ]
            },
            "hasDevices": !devices.isEmpty,
            "files": files.map { file -> [String: Any] in
                [
                    "id": file.id, "backend": file.backend, "user": file.shared ? "shared" : file.user,
                    "size": ByteCountFormatter.string(fromByteCount: file.size, countStyle: .file),
                    "createdAt": Self.time(file.createdAt),
                ]
            },
            "hasFiles": !files.isEmpty,
            "support": support.map { store -> [String: Any] in
                [
                    "id": String(store.id), "name": store.name, "user": store.user,
                    "instance": store.clientInstanceID ?? "", "appVersion": store.appVersion ?? "",
                    "size": ByteCountFormatter.string(fromByteCount: store.size, countStyle: .file),
                    "complete": store.complete, "received": String(store.received),
                    "createdAt": Self.time(store.createdAt),
                ]
            },
            "hasSupport": !support.isEmpty,
            "generatedAt": Self.time(Date()),
        ]
        if let notice { values["notice"] = notice }
        if !cut.isEmpty {
            values["cut"] =
                "Only the first \(shown) of the " + cut.joined(separator: ", ")
                + " are shown; the admin API lists more (GET /api/…?limit=N)."
        }
        return try template.get().render(values)
    }

    static func time(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: date)
    }

    static func duration(_ seconds: Double) -> String {
        let whole = Int(seconds.rounded())
        if whole < 120 { return "\(whole) s" }
        if whole < 7200 { return "\(whole / 60) min" }
        return "\(whole / 3600) h \(whole % 3600 / 60) min"
    }

    /// The page: Mustache escapes every `{{value}}` for HTML (request lines and IDs come from
    /// devices).
    static let source = """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8">
        <title>oodata gateway {{version}}</title>
        <style>
        body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1b1b1b; }
        h1 { font-size: 1.4em; margin: 0 0 .3em; } h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
        table { border-collapse: collapse; width: 100%; } th, td { text-align: left; padding: .3em .5em; }
        th { background: #eef1f4; } tr { border-bottom: 1px solid #dde2e6; } td.num { text-align: right; }
        .ok { color: #17663a; } .bad { color: #a4161a; font-weight: 600; } .muted { color: #6b7177; }
        .notice { background: #fff6d6; border: 1px solid #e8cf6f; padding: .5em .8em; margin: .8em 0; }
        form { display: inline; } button { font: inherit; padding: .15em .6em; cursor: pointer; }
        code { font-size: .95em; word-break: break-all; }
        </style></head>
        <body>
        <h1>oodata gateway {{version}}: <span id="readiness" class="{{#ready}}ok{{/ready}}{{^ready}}bad{{/ready}}">\
        {{readyText}}</span>{{#standby}} <span class="bad" id="standby">(standby)</span>{{/standby}}</h1>
        <p class="muted">As of {{generatedAt}}. Reload the page for fresh figures.</p>
        {{#notice}}<p class="notice" id="notice">{{notice}}</p>{{/notice}}
        {{#cut}}<p class="notice" id="cut">{{cut}}</p>{{/cut}}
        <h2>Readiness</h2>
        <table id="checks"><tr><th>check</th><th>state</th><th>detail</th></tr>
        {{#checks}}<tr><td>{{name}}</td><td class="{{#ok}}ok{{/ok}}{{^ok}}bad{{/ok}}">\
        {{#ok}}ok{{/ok}}{{^ok}}failed{{/ok}}</td><td>{{detail}}</td></tr>{{/checks}}
        </table>
        <p>{{#standby}}<form method="post" action="/ui/standby"><input type="hidden" name="standby" value="off">\
        <button id="standby-off">Serve again</button></form>{{/standby}}\
        {{^standby}}<form method="post" action="/ui/standby"><input type="hidden" name="standby" value="on">\
        <button id="standby-on">Put on standby</button></form>{{/standby}}</p>
        <h2>Requests in doubt</h2>
        {{^hasInDoubt}}<p class="muted" id="no-in-doubt">None: every recorded request's fate is known.</p>{{/hasInDoubt}}
        {{#hasInDoubt}}<table id="in-doubt"><tr><th>request ID</th><th>request</th><th>user</th><th>state</th>\
        <th>forwarded</th><th>resolution</th></tr>
        {{#inDoubt}}<tr data-request="{{requestID}}"><td><code>{{requestID}}</code></td><td><code>{{request}}</code></td>\
        <td>{{user}}</td><td>{{state}}</td><td>{{forwardedAt}}</td><td class="resolution">{{#open}}\
        <form method="post" action="/ui/requests/resolve"><input type="hidden" name="backend" value="{{backend}}">\
        <input type="hidden" name="requestID" value="{{requestID}}">\
        <button name="decision" value="applied">Mark applied</button> \
        <button name="decision" value="notApplied">Mark not applied</button></form>{{/open}}\
        {{^open}}{{resolution}}{{/open}}</td></tr>{{/inDoubt}}
        </table>{{/hasInDoubt}}
        <h2>Scopes</h2>
        {{^hasScopes}}<p class="muted">No scope yet: no device has read a defining query through this gateway.</p>\
        {{/hasScopes}}
        {{#hasScopes}}<table id="scopes"><tr><th>id</th><th>query</th><th>user</th><th>rows</th><th>lag</th>\
        <th>last refresh</th><th>last error</th><th></th></tr>
        {{#scopes}}<tr data-scope="{{id}}"><td>{{id}}</td><td><code>{{query}}</code></td><td>{{user}}</td>\
        <td class="num">{{rows}}</td><td class="num">{{lag}}</td><td>{{lastRefresh}}</td>\
        <td class="bad">{{lastError}}</td><td>{{#markedDue}}<span class="muted">due</span> {{/markedDue}}\
        <form method="post" action="/ui/scopes/refresh"><input type="hidden" name="scope" value="{{id}}">\
        <button>Refresh now</button></form></td></tr>{{/scopes}}
        </table>{{/hasScopes}}
        <h2>Devices</h2>
        {{^hasDevices}}<p class="muted">No device has synced through this gateway yet.</p>{{/hasDevices}}
        {{#hasDevices}}<table id="devices"><tr><th>Client-Instance-ID</th><th>user</th><th>app version</th>\
        <th>last seen</th><th>last sync</th></tr>
        {{#devices}}<tr><td><code>{{instance}}</code></td><td>{{user}}</td><td>{{appVersion}}</td><td>{{lastSeen}}</td>\
        <td>{{lastSync}}</td></tr>{{/devices}}
        </table>{{/hasDevices}}
        <h2>Store files</h2>
        {{^hasFiles}}<p class="muted">No store file was built.</p>{{/hasFiles}}
        {{#hasFiles}}<table id="files"><tr><th>id</th><th>user</th><th>size</th><th>built</th></tr>
        {{#files}}<tr><td><code>{{id}}</code></td><td>{{user}}</td><td class="num">{{size}}</td><td>{{createdAt}}</td>\
        </tr>{{/files}}
        </table>{{/hasFiles}}
        <h2>Support stores</h2>
        {{^hasSupport}}<p class="muted">No device sent its store for support.</p>{{/hasSupport}}
        {{#hasSupport}}<table id="support"><tr><th>id</th><th>name</th><th>user</th><th>Client-Instance-ID</th>\
        <th>app version</th><th>size</th><th>sent</th><th></th></tr>
        {{#support}}<tr><td>{{id}}</td><td><code>{{name}}</code></td><td>{{user}}</td><td><code>{{instance}}</code></td>\
        <td>{{appVersion}}</td><td class="num">{{size}}</td><td>{{createdAt}}</td><td>{{#complete}}\
        <a href="/api/support/{{id}}" download>Download</a>{{/complete}}{{^complete}}\
        <span class="muted">{{received}} bytes so far</span>{{/complete}}</td></tr>{{/support}}
        </table>{{/hasSupport}}
        <p class="muted">The same as JSON: <code>/api/status</code>, <code>/api/scopes</code>, \
        <code>/api/requests/in-doubt</code>, <code>/api/devices</code>, <code>/api/files</code>, <code>/api/support</code> (docs/gateway.md).</p>
        </body></html>
        """
}
