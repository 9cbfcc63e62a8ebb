public import Hummingbird
import Foundation
public import Logging
import HTTPTypes
import NIOCore
import ODataCore

/// Puts an ``ODataService`` on Hummingbird: V4 at `/odata/v4/`, V2 at `/odata/v2/`, and the
/// fault-injection endpoint at `/_faults` (loopback only).
public enum ODataHTTPServer {
    /// The application serving `service` on `host`:`port` (port 0 picks a free port).
    public static func application(service: ODataService, host: String = "127.0.0.1", port: Int = 8080, logger: Logger? = nil,
                                   onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        let router = Router()
        router.add(middleware: ODataMiddleware(service: service, allowFaultEndpoint: isLoopback(host)))
        router.get("/health") { _, _ in "ok" }
        var log = logger ?? Logger(label: "oodata.server")
        if logger == nil { log.logLevel = .warning }
        return Application(router: router, configuration: .init(address: .hostname(host, port: port), serverName: "oodata"),
                           onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? port) }, logger: log)
    }

    static func isLoopback(_ host: String) -> Bool {
        host == "127.0.0.1" || host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}

/// Converts between Hummingbird requests and service requests.
struct ODataMiddleware<Context: RequestContext>: RouterMiddleware {
    let service: ODataService
    let allowFaultEndpoint: Bool

    struct Dropped: Error {}

    func handle(_ input: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = input.uri.path
        let version: ODataVersion
        let rootPath: String
        if path.hasPrefix("/odata/v4") {
            version = .v4
            rootPath = "/odata/v4/"
        } else if path.hasPrefix("/odata/v2") {
            version = .v2
            rootPath = "/odata/v2/"
        } else if path == "/_faults" && allowFaultEndpoint {
            return try await faults(input)
        } else {
            return try await next(input, context)
        }
        var request = input
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: service.options.maxBodyBytes)
        } catch {
            return Self.response(.error(413, code: "RequestTooLarge", "The request body is larger than \(service.options.maxBodyBytes) bytes", version: version))
        }
        var headers = ODataCore.HTTPHeaders()
        for field in input.headers { headers.add(field.name.rawName, field.value) }
        let relative = path.count > rootPath.count ? String(path.dropFirst(rootPath.count)) : ""
        let target = relative + (input.uri.query.map { "?" + $0 } ?? "")
        var serviceRequest = ServiceRequest(method: input.method.rawValue, target: target, headers: headers,
                                            body: Array(body.readableBytesView), version: version)
        let host = input.head.authority ?? "localhost"
        serviceRequest.serviceRoot = "http://\(host)\(rootPath)"
        await service.journal.record(serviceRequest)
        let response = await service.handle(serviceRequest)
        return Self.response(response)
    }

    static func response(_ response: ServiceResponse) -> Response {
        var fields = HTTPFields()
        for field in response.headers {
            if let name = HTTPField.Name(field.name) { fields.append(HTTPField(name: name, value: field.value)) }
        }
        if response.dropConnection {
            // A lost response: the change is committed, but the connection closes before the body.
            return Response(status: .init(code: response.status), headers: fields, body: ResponseBody { _ in throw Dropped() })
        }
        return Response(status: .init(code: response.status), headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(bytes: response.body)))
    }

    private func faults(_ input: Request) async throws -> Response {
        var request = input
        switch input.method {
        case .get:
            let data = try JSONEncoder().encode(await service.faults.current())
            return Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: ByteBuffer(bytes: Array(data))))
        case .put, .post:
            let body = try await request.collectBody(upTo: 1 << 20)
            do {
                let rules = try JSONDecoder().decode([FaultRule].self, from: Data(body.readableBytesView))
                await service.faults.set(rules)
                return Response(status: .noContent)
            } catch {
                return Response(status: .badRequest, body: ResponseBody(byteBuffer: ByteBuffer(string: "The body must be a JSON array of fault rules: \(error)")))
            }
        case .delete:
            await service.faults.set([])
            return Response(status: .noContent)
        default:
            return Response(status: .methodNotAllowed)
        }
    }
}
