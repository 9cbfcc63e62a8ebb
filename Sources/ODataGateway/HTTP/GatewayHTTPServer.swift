public import Hummingbird
import Foundation
import HTTPTypes
public import Logging
import NIOCore
import ODataCore
public import Prometheus

/// Puts a ``Gateway`` on Hummingbird: each backend at its name (or the root); `/livez` (the
/// process serves), `/readyz` (it can serve devices: ``Gateway/publicReadiness()``, 503 naming
/// the failed check otherwise) and `/health` (the same as `/readyz`) for load balancers and orchestrators.
public enum GatewayHTTPServer {
    /// Largest request body forwarded, in bytes.
    public static let maxBodyBytes = 64 * 1024 * 1024

    /// The application serving `gateway` on `host`:`port` (port 0 picks a free port), and
    /// `registry`'s metrics at `/metrics` in Prometheus's text format when there is one.
    public static func application(
        gateway: Gateway, host: String = "127.0.0.1", port: Int = 8090, logger: Logger? = nil,
        metrics registry: PrometheusCollectorRegistry? = nil,
        onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        let router = Router()
        // First: it wraps the routes below too (each answer says `OOData-Gateway`).
        router.add(middleware: GatewayMiddleware(gateway: gateway))
        router.get("/livez") { _, _ in "ok" }
        for path in ["/readyz", "/health"] {
            router.get(RouterPath(path)) { _, _ in
                let report = await gateway.publicReadiness()
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
                var headers = HTTPFields()
                headers[.contentType] = "application/json"
                headers[.cacheControl] = "no-store"
                if !report.ready { headers[.retryAfter] = "5" }
                return Response(
                    status: report.ready ? .ok : .serviceUnavailable, headers: headers,
                    body: ResponseBody(byteBuffer: ByteBuffer(bytes: Array((try? encoder.encode(report)) ?? Data()))))
            }
        }
        if let registry {
            router.get("/metrics") { _, _ in
                var headers = HTTPFields()
                headers[.contentType] = "text/plain; version=0.0.4"
                return Response(
                    status: .ok, headers: headers,
                    body: ResponseBody(byteBuffer: ByteBuffer(bytes: registry.emitToBuffer())))
            }
        }
        var log = logger ?? Logger(label: "oodata.gateway.http")
        if logger == nil { log.logLevel = .warning }
        return Application(
            router: router, configuration: .init(address: .hostname(host, port: port), serverName: "oodata-gateway"),
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? port) }, logger: log)
    }
}

struct GatewayMiddleware<Context: RequestContext>: RouterMiddleware {
    let gateway: Gateway

    func handle(
        _ input: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        let path = input.uri.path
        if Self.ownPaths.contains(path) {
            // The gateway's own endpoints say so too (docs/gateway.md).
            var response = try await next(input, context)
            if let name = HTTPField.Name("OOData-Gateway") { response.headers[name] = "1" }
            return response
        }
        guard let (backend, rest) = gateway.route(path: path) else {
            return Self.response(
                .error(
                    GatewayError(status: 404, code: "NotFound", "No backend is served at \(path)"),
                    legacy: false))
        }
        var request = input
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: GatewayHTTPServer.maxBodyBytes)
        } catch {
            return Self.response(
                .error(
                    GatewayError(
                        status: 413, code: "RequestTooLarge",
                        "The request body is larger than \(GatewayHTTPServer.maxBodyBytes) bytes"),
                    legacy: false))
        }
        var headers = ODataCore.HTTPHeaders()
        for field in input.headers { headers.add(field.name.rawName, field.value) }
        let host = input.head.authority ?? "localhost"
        let root = "http://\(host)/" + (backend.name.isEmpty ? "" : backend.name + "/")
        let target = rest + (input.uri.query.map { "?" + $0 } ?? "")
        let answer = await gateway.handle(
            GatewayRequest(
                method: input.method.rawValue, target: target, headers: headers,
                body: Array(body.readableBytesView), gatewayRoot: root),
            backend: backend)
        return Self.response(answer)
    }

    /// Paths the gateway answers itself, never a backend's.
    static var ownPaths: Set<String> { ["/livez", "/readyz", "/health", "/metrics"] }

    static func response(_ answer: GatewayResponse) -> Response {
        if answer.dropsConnection {
            // A body that fails before its first byte: the connection closes mid-answer, which
            // the device reads as a lost answer.
            return Response(status: .badGateway, body: ResponseBody(contentLength: 1) { _ in throw CutAnswer() })
        }
        var fields = HTTPFields()
        // Tells a device it talks to a gateway (it then pulls the gateway's progress).
        if let name = HTTPField.Name("OOData-Gateway") { fields.append(HTTPField(name: name, value: "1")) }
        for field in answer.headers {
            if let name = HTTPField.Name(field.name) { fields.append(HTTPField(name: name, value: field.value)) }
        }
        return Response(
            status: .init(code: answer.status), headers: fields,
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: answer.body)))
    }
}

/// Ends an answer the device must not get (``GatewayResponse/dropsConnection``).
struct CutAnswer: Error {}
