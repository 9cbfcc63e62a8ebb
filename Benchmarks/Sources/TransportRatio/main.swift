import Foundation
import ODataCore
import ODataServer
import OfflineOData

// The two transports against the reference server on loopback, AsyncHTTPClient as the
// baseline: small requests one after another, the same with 16 at a time, a large stream up
// and down, a first open of the provider through each, a request to a closed port (against a
// raw connect() as the limit) and a cancelled request. Prints URLSession ÷ AsyncHTTPClient
// (above 1: URLSession is slower).
//
//   swift build -c release --product TransportRatio && ./.build/release/TransportRatio [ROUNDS] [SCALE]

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let rounds = arguments.first ?? 3
let scale = arguments.dropFirst().first ?? 200
let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-transport-\(UUID().uuidString)")
try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: folder) }
let server = try await EmbeddedServer.sales(at: folder.appendingPathComponent("backend.sqlite").path, scale: scale, pageSize: 500)
let root = server.v4Root.absoluteString

struct Failure: Error, CustomStringConvertible { let description: String }

func seconds(_ body: () async throws -> Void) async throws -> Double {
    let start = ContinuousClock.now
    try await body()
    let parts = (ContinuousClock.now - start).components
    return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
}

func check(_ response: TransportResponse, _ status: Int, _ what: String) throws {
    guard response.status == status else { throw Failure(description: "\(what): HTTP \(response.status)") }
}

let small = TransportRequest(method: "GET", url: root + "BusinessPartners?$top=20&$orderby=PartnerID")
let stream = (0..<(16 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 11) }
var putHeaders = HTTPHeaders()
putHeaders["Content-Type"] = "application/octet-stream"
putHeaders["If-Match"] = "*"

func measure(_ transport: any Transport) async throws -> [String: Double] {
    var result: [String: Double] = [:]
    // Warm-up: a connection and the server's caches.
    for _ in 0..<20 { try check(try await transport.send(small, timeout: 30), 200, "warm-up") }
    result["500 GETs one after another"] = try await seconds {
        for _ in 0..<500 { try check(try await transport.send(small, timeout: 30), 200, "GET") }
    }
    result["500 GETs, 16 at a time"] = try await seconds {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for lane in 0..<16 {
                group.addTask {
                    for _ in stride(from: lane, to: 500, by: 16) { try check(try await transport.send(small, timeout: 30), 200, "GET") }
                }
            }
            try await group.waitForAll()
        }
    }
    let url = root + "ProductPictures('PIC0')/$value"
    result["16 MiB stream up and down"] = try await seconds {
        try check(try await transport.send(TransportRequest(method: "PUT", url: url, headers: putHeaders, body: stream), timeout: 60), 204, "PUT")
        let back = try await transport.send(TransportRequest(method: "GET", url: url), timeout: 60)
        guard back.body == stream else { throw Failure(description: "the stream came back different") }
    }
    // Responsiveness (the timings issue 34 took out of the unit tests): a request to a closed
    // port fails, and a cancelled request ends, long before any timeout.
    result["request to a closed port fails"] = try await seconds {
        do {
            _ = try await transport.send(TransportRequest(method: "GET", url: "http://127.0.0.1:\(closedPort)/x"), timeout: 60)
            throw Failure(description: "a closed port answered")
        } catch is Failure { throw Failure(description: "a closed port answered") } catch {}
    }
    result["cancel at 0.1 s of a 5 s request"] = try await seconds {
        let task = Task { try await transport.send(TransportRequest(method: "GET", url: root + "Products?slow"), timeout: 60) }
        try await Task.sleep(nanoseconds: 100_000_000)
        task.cancel()
        guard case .failure(let error) = await task.result, error is CancellationError else {
            throw Failure(description: "the cancelled request did not end with a CancellationError")
        }
    }
    var parameters = OfflineODataParameters()
    parameters.storePath = folder
    parameters.storeName = "open-\(UUID().uuidString)"
    let provider = OfflineODataProvider(serviceRoot: server.v4Root, parameters: parameters, transport: transport)
    for query in ["BusinessPartners", "SalesOrders?$expand=Items", "Contacts", "Products"] {
        try await provider.add(definingQuery: OfflineODataDefiningQuery(name: query, query: query))
    }
    result["first open (4 defining queries)"] = try await seconds { try await provider.open() }
    guard case .count(let orders) = try await provider.read("SalesOrders/$count"), orders > 0 else {
        throw Failure(description: "the open stored no orders")
    }
    await provider.clear()
    return result
}

await server.service.faults.set([FaultRule(method: "GET", urlContains: "Products?slow", delayMilliseconds: 5000)])

/// A port nothing listens on: bound, then closed.
let closedPort: Int = {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(descriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            bind(descriptor, pointer, length) == 0 ? getsockname(descriptor, pointer, &length) : -1
        }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}()

/// The physical limit for a refused connection: a plain connect() to the closed port.
func rawConnectSeconds() -> Double {
    let start = ContinuousClock.now
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(closedPort).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let refused = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    close(descriptor)
    precondition(refused != 0, "the closed port accepted a connection")
    let parts = (ContinuousClock.now - start).components
    return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
}

print("TransportRatio: \(rounds) rounds, sales scale \(scale), server in process on loopback")
var baseline: [String: [Double]] = [:]
var candidate: [String: [Double]] = [:]
for round in 1...rounds {
    // Alternate the order, so neither transport always runs on a warmer machine.
    let kinds: [(String, any Transport)] = round % 2 == 1
        ? [("AsyncHTTPClient", AsyncHTTPClientTransport()), ("URLSession", URLSessionTransport())]
        : [("URLSession", URLSessionTransport()), ("AsyncHTTPClient", AsyncHTTPClientTransport())]
    for (name, transport) in kinds {
        let figures = try await measure(transport)
        for (key, value) in figures {
            if name == "URLSession" { candidate[key, default: []].append(value) } else { baseline[key, default: []].append(value) }
        }
    }
}
func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
for key in baseline.keys.sorted() {
    let base = median(baseline[key] ?? [0]), other = median(candidate[key] ?? [0])
    let label = key.padding(toLength: 34, withPad: " ", startingAt: 0)
    print(label + String(format: "AsyncHTTPClient %8.3f s   URLSession %8.3f s   ratio %.2f×", base, other, other / base))
}
let raw = (0..<9).map { _ in rawConnectSeconds() }
let closed = "request to a closed port fails"
print(String(format: "raw connect() to the closed port: %.3f ms; the transports take %.1f× (AsyncHTTPClient) and %.1f× "
    + "(URLSession) of it", median(raw) * 1000, median(baseline[closed] ?? [0]) / median(raw),
    median(candidate[closed] ?? [0]) / median(raw)))
await server.stop()
