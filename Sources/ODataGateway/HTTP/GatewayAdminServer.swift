import Foundation
public import Hummingbird
import HTTPTypes
public import Logging
import NIOCore
import PostgresNIO
public import Prometheus

/// The admin API on a port of its own (issue 56), for operators only: every request needs the
/// configuration's ``GatewayAdminAccess``; without one the server is not started. An HTML page
/// at `/` (``GatewayAdminPage``), and JSON, as docs/gateway.md ("Operating the gateway")
/// describes:
///
/// - `GET /api/status`: readiness, standby, version;
/// - `GET /api/scopes`: scopes with lag, rows, last refresh and last error;
///   `POST /api/scopes/<id>/refresh`: refresh one now;
/// - `GET /api/requests/in-doubt`; `POST /api/requests/in-doubt/resolve` with
///   `{"backend":…,"requestID":…,"applied":true|false}`;
/// - `GET /api/support` (stores devices sent), `GET /api/support/<id>` (its bytes),
///   `DELETE /api/support/<id>`;
/// - `GET /api/log` (the last warnings and errors), `GET /api/metrics` (as the public
///   `/metrics`);
/// - `GET /api/devices`, `GET /api/files`, `GET /api/config`; `POST /api/config/reload` (as
///   SIGHUP: the file and flags read again, checked whole, refused with the line and reason);
/// - `POST /api/standby` with `{"standby":true|false}`.
public enum GatewayAdminServer {
    /// The application serving `gateway`'s admin API on `host`:`port` (0: a free port), to the
    /// ``GatewayConfiguration/admin`` access in force (a reload can rotate it); `metrics`, when
    /// given, at `/api/metrics`.
    public static func application(
        gateway: Gateway, host: String = "127.0.0.1", port: Int,
        logger: Logger, metrics: PrometheusCollectorRegistry? = nil,
        onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        let router = Router()
        router.add(middleware: AdminMiddleware(gateway: gateway, metrics: metrics))
        return Application(
            router: router,
            configuration: .init(address: .hostname(host, port: port), serverName: "oodata-gateway-admin"),
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? port) }, logger: logger)
    }
}

/// Largest admin request body, in bytes.
private let adminBodyLimit = 64 * 1024

struct AdminMiddleware<Context: RequestContext>: RouterMiddleware {
    let gateway: Gateway
    let metrics: PrometheusCollectorRegistry?

    func handle(
        _ input: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard let access = gateway.configuration.admin, access.allows(input.headers[.authorization]) else {
            var fields = HTTPFields()
            fields[.wwwAuthenticate] = #"Bearer realm="oodata-gateway-admin", Basic realm="oodata-gateway-admin""#
            return Self.json(
                401, ["error": "the admin API needs the [admin] token (Bearer) or user and password (Basic)"],
                headers: fields)
        }
        if input.method != .get, input.method != .head, let refusal = Self.crossSiteRefusal(input) {
            return Self.json(403, ["error": refusal])
        }
        var request = input
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: adminBodyLimit)
        } catch {
            return Self.json(413, ["error": "an admin request body is at most \(adminBodyLimit) bytes"])
        }
        let bytes = Array(body.readableBytesView)
        let path = input.uri.path
        let method = input.method.rawValue
        do {
            return try await route(method: method, path: path, query: input.uri.query, body: bytes)
        } catch let error as GatewayError {
            return Self.json(error.status, ["error": error.message])
        } catch {
            gateway.logger.warning("Admin request failed", metadata: ["path": .string(path), "error": "\(error)"])
            return Self.json(503, ["error": Self.explain(error)])
        }
    }

    /// Why a changing request may come from another site's page (a browser that holds the admin
    /// page's Basic credentials sends them along): nil when it cannot. A browser names the page
    /// a request comes from (`Sec-Fetch-Site`, `Origin`); it must be the admin port's own. The
    /// JSON API takes only `application/json`, which a cross-site form cannot send.
    static func crossSiteRefusal(_ request: Request) -> String? {
        if let name = HTTPField.Name("Sec-Fetch-Site"), let site = request.headers[name]?.lowercased(),
            site != "same-origin", site != "none"
        {
            return "a changing admin request must come from the admin page itself (Sec-Fetch-Site: \(site))"
        }
        if let origin = request.headers[.origin] {
            let host = request.head.authority ?? ""
            let named = origin.split(separator: "/", omittingEmptySubsequences: true).dropFirst().first.map(String.init)
            guard origin != "null", let named, !host.isEmpty, named.lowercased() == host.lowercased() else {
                return "a changing admin request must come from the admin page itself (Origin: \(origin))"
            }
        }
        if request.uri.path.hasPrefix("/api/") {
            let type = request.headers[.contentType]?.split(separator: ";").first?
                .trimmingCharacters(in: .whitespaces).lowercased()
            guard type == "application/json" else {
                return "the admin API's changing requests (POST, DELETE) take Content-Type: application/json"
            }
        }
        return nil
    }

    func route(method: String, path: String, query: String? = nil, body: [UInt8]) async throws -> Response {
        let parts = path.split(separator: "/").map(String.init)
        switch (method, parts) {
        case ("GET", []), ("GET", ["ui"]):
            return await GatewayAdminPage.page(gateway: gateway, query: query)
        case ("POST", let p) where p.first == "ui":
            return try await GatewayAdminPage.act(gateway: gateway, path: p, body: body)
        case ("GET", ["api", "status"]):
            let report = await gateway.readiness()
            return Self.encoded(
                200,
                AdminStatus(
                    version: GatewayVersion.current, ready: report.ready, standby: await gateway.isOnStandby,
                    readiness: report))
        case ("GET", ["api", "scopes"]):
            let limit = try Self.limit(query)
            return Self.listed(try await gateway.store.scopeSummaries(limit: limit + 1), limit: limit)
        case ("POST", let p) where p.count == 4 && p[0] == "api" && p[1] == "scopes" && p[3] == "refresh":
            guard let id = Int64(p[2]) else {
                throw GatewayError(status: 400, code: "BadScope", "'\(p[2])' is no scope ID")
            }
            guard let outcome = try await gateway.refreshNow(scope: id) else {
                throw GatewayError(status: 404, code: "NoScope", "there is no scope \(id)")
            }
            return Self.encoded(outcome.outcome == "refreshed" ? 200 : 202, outcome)
        case ("GET", ["api", "requests", "in-doubt"]):
            let limit = try Self.limit(query)
            return Self.listed(try await gateway.store.inDoubtRequests(cutAfter: 0, limit: limit + 1), limit: limit)
        case ("POST", ["api", "requests", "in-doubt", "resolve"]):
            let decision: Resolution
            do {
                decision = try JSONDecoder().decode(Resolution.self, from: Data(body))
            } catch {
                throw GatewayError(
                    status: 400, code: "BadResolution",
                    #"give {"backend":"<service root>","requestID":"<id>","applied":true|false}: "#
                        + Self.explain(decoding: error))
            }
            guard
                try await gateway.resolveInDoubt(
                    backend: decision.backend, requestID: decision.requestID, applied: decision.applied)
            else {
                throw GatewayError(
                    status: 404, code: "NotInDoubt",
                    "request \(decision.requestID) of \(decision.backend) is not in doubt, or a gateway forwards it now"
                )
            }
            return Self.json(200, ["resolution": decision.applied ? "applied" : "notApplied"])
        case ("GET", ["api", "devices"]):
            let limit = try Self.limit(query)
            return Self.listed(try await gateway.store.devices(limit: limit + 1), limit: limit)
        case ("GET", ["api", "support"]):
            let limit = try Self.limit(query)
            return Self.listed(try await gateway.store.supportStores(limit: limit + 1), limit: limit)
        case ("GET", let p) where p.count == 3 && p[0] == "api" && p[1] == "support":
            guard let id = Int64(p[2]) else {
                throw GatewayError(status: 400, code: "BadSupportStore", "'\(p[2])' is no support store ID")
            }
            guard let summary = try await gateway.store.supportStore(id: id), summary.complete else {
                throw GatewayError(status: 404, code: "NoSupportStore", "there is no complete support store \(id)")
            }
            var fields = HTTPFields()
            fields[.contentType] = "application/octet-stream"
            fields[.cacheControl] = "no-store"
            fields[.contentDisposition] = "attachment; filename=\"support-\(summary.id)-\(summary.name)\""
            // Streamed chunk by chunk: a store of up to 1 GiB is never whole in memory. Should it
            // change meanwhile, the connection is cut before its announced length.
            let store = gateway.store
            let body = ResponseBody(contentLength: Int(summary.size)) { writer in
                try await store.streamSupportStore(id: summary.id, size: summary.size) { try await writer.write($0) }
                try await writer.finish(nil)
            }
            return Response(status: .ok, headers: fields, body: body)
        case ("DELETE", let p) where p.count == 3 && p[0] == "api" && p[1] == "support":
            guard let id = Int64(p[2]) else {
                throw GatewayError(status: 400, code: "BadSupportStore", "'\(p[2])' is no support store ID")
            }
            guard try await gateway.store.removeSupportStore(id: id) else {
                throw GatewayError(status: 404, code: "NoSupportStore", "there is no support store \(p[2])")
            }
            return Self.json(200, ["removed": String(id)])
        case ("GET", ["api", "files"]):
            let limit = try Self.limit(query)
            return Self.listed(try await gateway.store.storeFiles(limit: limit + 1), limit: limit)
        case ("GET", ["api", "log"]):
            // The newest `limit` lines, oldest first.
            let limit = try Self.limit(query)
            let entries = gateway.recentLog.entries
            var response = Self.encoded(200, Array(entries.suffix(limit)))
            if entries.count > limit, let more = HTTPField.Name("OOData-More") { response.headers[more] = "true" }
            return response
        case ("GET", ["api", "metrics"]):
            guard let metrics else {
                throw GatewayError(status: 404, code: "NoMetrics", "this gateway keeps no metrics registry")
            }
            var fields = HTTPFields()
            fields[.contentType] = "text/plain; version=0.0.4"
            return Response(
                status: .ok, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(bytes: metrics.emitToBuffer())))
        case ("GET", ["api", "config"]):
            return Self.encoded(200, gateway.configuration.summary)
        case ("POST", ["api", "config", "reload"]):
            let outcome = gateway.reloadFromSource()
            return Self.encoded(outcome.applied ? 200 : 422, outcome)
        case ("POST", ["api", "standby"]):
            guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
                let standby = object["standby"] as? Bool
            else { throw GatewayError(status: 400, code: "BadStandby", #"give {"standby":true} or {"standby":false}"#) }
            await gateway.setStandby(standby)
            return Self.encoded(200, ["standby": standby])
        default:
            throw GatewayError(status: 404, code: "NotFound", "no admin endpoint \(method) \(path)")
        }
    }

    /// What failed, for the operator: PostgreSQL's troubles in words, not a pool's internals.
    static func explain(_ error: any Error) -> String {
        let text = "\(error)"
        if error is PostgresDeadlineExceeded {
            return "PostgreSQL did not answer in time (see /api/status); try again shortly"
        }
        if text.contains("ConnectionPoolError") || text.contains("CircuitBreakerTripped") {
            return "PostgreSQL cannot be reached: the gateway's connections to it fail (see /api/status and the "
                + "gateway's log); try again when it is back"
        }
        if error is PSQLError { return "PostgreSQL: \(PostgresProbe.explain(error))" }
        return text
    }

    /// A JSON body's fault in a few words: the member missing or of the wrong type.
    static func explain(decoding error: any Error) -> String {
        switch error as? DecodingError {
        case .keyNotFound(let key, _)?: return "'\(key.stringValue)' is missing"
        case .typeMismatch(_, let context)?, .valueNotFound(_, let context)?:
            return "'\(context.codingPath.map(\.stringValue).joined(separator: "."))' has the wrong type"
        case .dataCorrupted?: return "the body is not JSON"
        default: return "the body is not such an object"
        }
    }

    struct Resolution: Decodable {
        var backend: String
        var requestID: String
        var applied: Bool
    }

    /// A list's `?limit=N` (1 to 100,000; default 1,000).
    static func limit(_ query: String?) throws -> Int {
        for pair in (query ?? "").split(separator: "&") where pair.hasPrefix("limit=") {
            guard let value = Int(pair.dropFirst(6)), (1...100_000).contains(value) else {
                throw GatewayError(
                    status: 400, code: "BadLimit", "limit must be 1 to 100000, not '\(pair.dropFirst(6))'")
            }
            return value
        }
        return 1000
    }

    /// The first `limit` of `rows` (read with one more), with `OOData-More: true` when there
    /// were more: a list never ends short without saying so.
    static func listed<Row: Encodable>(_ rows: [Row], limit: Int) -> Response {
        var response = encoded(200, Array(rows.prefix(limit)))
        if rows.count > limit, let name = HTTPField.Name("OOData-More") { response.headers[name] = "true" }
        return response
    }

    static func encoded(_ status: Int, _ value: some Encodable) -> Response {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(value)) ?? Data(#"{"error":"the answer could not be written"}"#.utf8)
        return respond(status, data)
    }

    static func json(_ status: Int, _ value: [String: String], headers: HTTPFields = HTTPFields()) -> Response {
        let data =
            (try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .withoutEscapingSlashes]))
            ?? Data()
        return respond(status, data, headers: headers)
    }

    static func respond(_ status: Int, _ data: Data, headers: HTTPFields = HTTPFields()) -> Response {
        var fields = headers
        fields[.contentType] = "application/json"
        fields[.cacheControl] = "no-store"
        return Response(
            status: .init(code: status), headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(bytes: Array(data)))
        )
    }
}

/// What `GET /api/status` answers.
public struct AdminStatus: Sendable, Codable, Equatable {
    public var version: String
    public var ready: Bool
    public var standby: Bool
    public var readiness: ReadinessReport
}

/// The gateway's version, as the admin API and support bundles name it.
public enum GatewayVersion {
    public static let current = "0.56.0"
}
