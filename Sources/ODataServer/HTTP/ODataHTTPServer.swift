public import Hummingbird
import HummingbirdCore
import Foundation
public import Logging
import HTTPTypes
import NIOCore
import ODataCore

/// Puts an ``ODataService`` on Hummingbird: V4 at `/odata/v4/`, V2 at `/odata/v2/`, the
/// fault-injection endpoint at `/_faults` and the model switch at `/_model` (loopback only, for
/// tests: `PUT` a CSDL document and the service follows it, see ``ODataService/changeModel(to:)``),
/// and `/support/stores` for stores that
/// offline clients send for support (when the service has a support directory).
public enum ODataHTTPServer {
    /// The application serving `service` on `host`:`port` (port 0 picks a free port).
    public static func application(service: ODataService, host: String = "127.0.0.1", port: Int = 8080, logger: Logger? = nil,
                                   onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        let router = Router()
        router.add(middleware: ODataMiddleware(service: service, allowFaultEndpoint: isLoopback(host)))
        router.get("/health") { _, _ in "ok" }
        var log = logger ?? Logger(label: "oodata.server")
        if logger == nil { log.logLevel = .warning }
        // The parser takes the longest URL the service answers (with a 414 beyond it) and the usual
        // 80 KiB of headers; what it refuses still gets an OData error body (ParserErrorAnswer).
        let limit = service.options.maxURLBytes + 80 * 1024
        let fields = ParserErrorAnswer.headerFieldLimit
        let http1 = HTTP1Channel.Configuration(
            additionalChannelHandlers: [ParserErrorAnswer(headerLimit: limit)],
            httpDecoderConfiguration: .init(
                maxHeaderFieldSize: limit, maxHeaderListSize: limit, maxHeaderFieldCount: fields))
        return Application(router: router, server: .http1(configuration: http1),
                           configuration: .init(address: .hostname(host, port: port), serverName: "oodata"),
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
        } else if path == "/_model" && allowFaultEndpoint {
            return try await changeModel(input)
        } else if path == "/support/stores" || path.hasPrefix("/support/stores/") {
            return try await SupportStores(directory: service.options.supportDirectory, maxBodyBytes: service.options.maxBodyBytes).handle(input)
        } else {
            return try await next(input, context)
        }
        let urlBytes = input.uri.string.utf8.count
        if urlBytes > service.options.maxURLBytes {
            return Self.response(.error(414, code: "URLTooLong", "The request URL has \(urlBytes) bytes; at most "
                + "\(service.options.maxURLBytes) are accepted. Send a long query as a GET inside a $batch.", version: version))
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
        let (refusal, added, user) = await service.authorize(serviceRequest)
        if let refusal { return Self.response(refusal) }
        serviceRequest.user = user
        let started = ContinuousClock.now
        var response = await service.handle(serviceRequest)
        for field in added { response.headers.add(field.name, field.value) }
        let elapsed = (ContinuousClock.now - started).components
        service.options.logger.debug(
            "Request handled",
            metadata: [
                "method": .string(serviceRequest.method), "url": .string(LogRedaction.url(rootPath + target)),
                "status": .stringConvertible(response.status),
                "duration-ms": .stringConvertible(elapsed.seconds * 1000 + elapsed.attoseconds / 1_000_000_000_000_000),
            ])
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
        if let pause = response.trickleMilliseconds {
            // A slow network: the body in 8 parts, a pause before each.
            let body = response.body
            let part = max(1, (body.count + 7) / 8)
            return Response(status: .init(code: response.status), headers: fields, body: ResponseBody(contentLength: body.count) { writer in
                var start = 0
                while start < body.count {
                    try await Task.sleep(nanoseconds: UInt64(max(0, pause)) * 1_000_000)
                    let end = min(body.count, start + part)
                    try await writer.write(ByteBuffer(bytes: body[start..<end]))
                    start = end
                }
                try await writer.finish(nil)
            })
        }
        return Response(status: .init(code: response.status), headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(bytes: response.body)))
    }

    /// `PUT /_model` with a CSDL document: the service changes its model (SPEC §14 tests).
    private func changeModel(_ input: Request) async throws -> Response {
        guard input.method == .put || input.method == .post else { return Response(status: .methodNotAllowed) }
        var request = input
        let body = try await request.collectBody(upTo: service.options.maxBodyBytes)
        func refusal(_ text: String) -> Response {
            Response(status: .badRequest, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
        }
        let model: Model
        do {
            model = try MetadataParser().parse(Data(body.readableBytesView))
        } catch {
            return refusal("The body must be a CSDL document: \(error)")
        }
        do {
            try await service.changeModel(to: model)
        } catch {
            return refusal("The service cannot change to that model in place: \(error)")
        }
        return Response(status: .noContent)
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

/// `/support/stores`: stores that offline clients send for support (`sendStore`), in chunks.
/// `POST /support/stores/<name>` with `Content-Range: bytes <first>-<last>/<total>` appends one
/// chunk (the first chunk starts the file again); the last one is answered 201, the others 202.
/// `GET /support/stores` lists what was received.
struct SupportStores {
    let directory: String?
    let maxBodyBytes: Int

    func handle(_ input: Request) async throws -> Response {
        guard let directory else { return Self.text(.notFound, "This server does not take stores for support (it has no support directory)") }
        let path = input.uri.path
        if path == "/support/stores" || path == "/support/stores/" {
            guard input.method == .get else { return Self.text(.methodNotAllowed, "GET lists the stores; POST /support/stores/<name> sends one") }
            let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
            let rows = names.map { name -> JSONValue in
                let size = (try? FileManager.default.attributesOfItem(atPath: directory + "/" + name)[.size] as? NSNumber)?.int64Value ?? 0
                return .object([.init("name", .string(name)), .init("size", .number(String(size)))])
            }
            return Response(status: .ok, headers: [.contentType: "application/json"],
                            body: ResponseBody(byteBuffer: ByteBuffer(string: JSONValue.array(rows).serialized)))
        }
        let name = String(path.dropFirst("/support/stores/".count))
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        guard (1...120).contains(name.count), !name.hasPrefix("."), name.allSatisfy({ allowed.contains($0) }) else {
            return Self.text(.badRequest, "A store name is 1 to 120 letters, digits, '.', '_' or '-', not starting with '.'")
        }
        guard input.method == .post || input.method == .put else { return Self.text(.methodNotAllowed, "Send a store with POST") }
        guard let rangeHeader = input.headers[.contentRange], let range = Self.contentRange(rangeHeader) else {
            return Self.text(.badRequest, "Each chunk needs Content-Range: bytes <first>-<last>/<total>")
        }
        var request = input
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: maxBodyBytes)
        } catch {
            return Self.text(.contentTooLarge, "A chunk may have at most \(maxBodyBytes) bytes")
        }
        guard Int64(body.readableBytes) == range.last - range.first + 1 else {
            return Self.text(.badRequest, "Content-Range announces \(range.last - range.first + 1) bytes, the body has \(body.readableBytes)")
        }
        let file = directory + "/" + name
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            if range.first == 0 {
                guard FileManager.default.createFile(atPath: file, contents: nil) else { return Self.text(.internalServerError, "\(name) cannot be created") }
            }
            let size = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber)?.int64Value
            guard let size, size == range.first else {
                return Self.text(.rangeNotSatisfiable, "\(name) has \(size.map(String.init) ?? "no") bytes; the next chunk must start there")
            }
            guard let handle = FileHandle(forWritingAtPath: file) else { return Self.text(.internalServerError, "\(name) cannot be opened") }
            defer { try? handle.close() }
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(body.readableBytesView))
        } catch {
            return Self.text(.internalServerError, "\(name) could not be written: \(error)")
        }
        if range.last + 1 == range.total { return Self.text(.created, "\(name): \(range.total) bytes received") }
        return Self.text(.accepted, "\(name): \(range.last + 1) of \(range.total) bytes received")
    }

    /// `bytes <first>-<last>/<total>`, with first ≤ last < total.
    static func contentRange(_ text: String) -> (first: Int64, last: Int64, total: Int64)? {
        guard text.hasPrefix("bytes ") else { return nil }
        let parts = text.dropFirst("bytes ".count).split(separator: "/")
        guard parts.count == 2, let total = Int64(parts[1]) else { return nil }
        let bounds = parts[0].split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), first >= 0, first <= last, last < total else { return nil }
        return (first, last, total)
    }

    static func text(_ status: HTTPResponse.Status, _ message: String) -> Response {
        Response(status: status, headers: [.contentType: "text/plain; charset=utf-8"], body: ResponseBody(byteBuffer: ByteBuffer(string: message)))
    }
}
