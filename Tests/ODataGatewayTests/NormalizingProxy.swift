import Foundation
import HTTPTypes
import Hummingbird
import Logging
import ODataCore
import OfflineOData
import ServiceLifecycle

/// A reverse proxy on loopback that does what some hops between a gateway and a backend do:
/// it percent-decodes the path's unreserved characters and slashes, removes dot segments
/// (RFC 3986 §5.2.4) and forwards the result to `target`. Behind it, a `..` that reaches it would
/// land outside the backend's service root; the tests check that none does. It records every
/// path it forwarded, as normalized.
final class NormalizingProxy: Sendable {
    let port: Int
    private let group: ServiceGroup
    private let task: Task<Void, any Error>
    private let forwarded: Journal

    actor Journal {
        var paths: [String] = []
        func add(_ path: String) { paths.append(path) }
    }

    private init(port: Int, group: ServiceGroup, task: Task<Void, any Error>, forwarded: Journal) {
        self.port = port
        self.group = group
        self.task = task
        self.forwarded = forwarded
    }

    /// The paths forwarded so far, normalized, with their queries.
    func paths() async -> [String] { await forwarded.paths }

    /// A proxy in front of `target` (`http://127.0.0.1:PORT`, without a path).
    static func start(target: String) async throws -> NormalizingProxy {
        let journal = Journal()
        let router = Router()
        router.add(middleware: Relay(target: target, journal: journal))
        var logger = Logger(label: "test.proxy")
        logger.logLevel = .critical
        let ports = AsyncStream<Int>.makeStream()
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in ports.continuation.yield(channel.localAddress?.port ?? 0) }, logger: logger)
        var configuration = ServiceGroupConfiguration(services: [app], logger: logger)
        configuration.maximumGracefulShutdownDuration = .seconds(1)
        let group = ServiceGroup(configuration: configuration)
        let task = Task { try await group.run() }
        var port = 0
        for await bound in ports.stream {
            port = bound
            break
        }
        return NormalizingProxy(port: port, group: group, task: task, forwarded: journal)
    }

    func stop() async {
        await group.triggerGracefulShutdown()
        _ = await task.result
    }

    /// `path` as a normalizing hop makes it: `%2E`, `%2F` and `%5C` decoded (so `%2e%2e` is
    /// `..`), backslashes read as slashes, then dot segments removed.
    static func normalized(_ path: String) -> String {
        var text = path
        for (encoded, plain) in [("%2e", "."), ("%2E", "."), ("%2f", "/"), ("%2F", "/"), ("%5c", "/"), ("%5C", "/")] {
            text = text.replacingOccurrences(of: encoded, with: plain)
        }
        text = text.replacingOccurrences(of: "\\", with: "/")
        var output: [Substring] = []
        for segment in text.split(separator: "/", omittingEmptySubsequences: false) {
            let name = segment.prefix { $0 != ";" }
            if name == "." { continue }
            if name == ".." {
                if output.count > 1 { output.removeLast() }
                continue
            }
            output.append(segment)
        }
        let joined = output.joined(separator: "/")
        return joined.hasPrefix("/") ? joined : "/" + joined
    }

    struct Relay<Context: RequestContext>: RouterMiddleware {
        let target: String
        let journal: Journal

        func handle(
            _ input: Request, context: Context, next: (Request, Context) async throws -> Response
        ) async throws -> Response {
            let path = NormalizingProxy.normalized(input.uri.path)
            let query = input.uri.query.map { "?" + $0 } ?? ""
            await journal.add(path + query)
            var request = input
            let body = try await request.collectBody(upTo: 64 << 20)
            var headers = ODataCore.HTTPHeaders()
            for field in input.headers
            where !["host", "content-length", "connection"].contains(
                field.name.rawName.lowercased())
            {
                headers.add(field.name.rawName, field.value)
            }
            let answer = try await DefaultTransport.make().send(
                TransportRequest(
                    method: input.method.rawValue, url: target + path + query, headers: headers,
                    body: Array(body.readableBytesView)), timeout: 60)
            var fields = HTTPFields()
            for field in answer.headers
            where !["content-length", "transfer-encoding", "connection"].contains(field.name.lowercased()) {
                if let name = HTTPField.Name(field.name) { fields.append(HTTPField(name: name, value: field.value)) }
            }
            return Response(
                status: .init(code: answer.status), headers: fields,
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: answer.body)))
        }
    }
}
