import Foundation
import ODataCore
import ODataServer
import OfflineOData

// The two transports against the reference server on loopback, AsyncHTTPClient as the
// baseline: small requests one after another, the same with 16 at a time, a large stream up
// and down, and a first open of the provider through each. Prints URLSession ÷ AsyncHTTPClient
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
await server.stop()
