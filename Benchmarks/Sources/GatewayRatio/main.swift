import CRawSQLCipher
import Foundation
import ODataCore
import ODataGateway
import ODataServer
import OfflineOData

// A backend without delta links (the reference server with change tracking off, the sales
// sample at SCALE: about 10 × SCALE orders), 1 % of its orders changed, then a download:
//   - direct: a device talking to the backend (a full re-read and diff, as today);
//   - gateway: a device through a gateway instance with a refresh interval (5 s; 60 s above
//     scale 20,000), after another
//     device's download ran the refresh (what every device but one pays);
//   - gateway with refresh: the device whose download runs the refresh (the backend read).
// Prints each against the direct download. Also: backend reads for DEVICES devices of one
// shared scope in one sync round.
//
//   swift build -c release --product GatewayRatio
//   ./.build/release/GatewayRatio POSTGRES_URL [SCALE] [DEVICES]
//
// POSTGRES_URL names a database the gateway may create its tables in (docs/gateway.md).
//
// The gateway's memory during a first refresh (the backend in a child process, so that this
// process holds the gateway alone; peak resident memory from Linux's VmHWM):
//
//   ./.build/release/GatewayRatio memory POSTGRES_URL SCALE
//
// A first open through a store file the gateway built, against a paged one (StoreFile.swift):
//
//   ./.build/release/GatewayRatio file POSTGRES_URL SCALE

let arguments = Array(CommandLine.arguments.dropFirst())
if ["file", "gateway-serve", "client"].contains(arguments.first ?? "") {
    try await storeFileBenchmark(arguments)
    exit(0)
}
if arguments.first == "serve" || arguments.first == "memory" {
    try await gatewayMemory(arguments)
    exit(0)
}
guard let postgresURL = arguments.first else {
    FileHandle.standardError.write(Data("usage: GatewayRatio POSTGRES_URL [SCALE] [DEVICES]\n".utf8))
    exit(2)
}
let scale = arguments.dropFirst().first.flatMap { Int($0) } ?? 2000
let deviceCount = arguments.dropFirst(2).first.flatMap { Int($0) } ?? 20

struct Failure: Error, CustomStringConvertible { let description: String }

func seconds(_ body: () async throws -> Void) async throws -> Double {
    let start = ContinuousClock.now
    try await body()
    let parts = (ContinuousClock.now - start).components
    return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
}

let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-gwbench-\(UUID().uuidString)")
try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: folder) }
let backend = try await EmbeddedServer.sales(
    at: folder.appendingPathComponent("backend.sqlite").path, scale: scale,
    pageSize: 1000
) { $0.tracksChanges = false }
let root = backend.v4Root.absoluteString
// Scopes are keyed by the backend's URL, whose port is new each run: earlier runs' rows do not count.
var configuration = GatewayConfiguration(backends: [GatewayBackend(url: root)])
configuration.pageSize = 1000
configuration.refreshInterval = 0
// Refreshes at each request.
let gateway = try await RunningGateway.start(configuration: configuration, postgresURL: postgresURL)
// A second instance on the same PostgreSQL whose devices accept data up to `patience` seconds
// old: longer than a refresh takes at this scale (one at 1M rows takes about 12 s here), so that
// the second device is answered from the first one's refresh.
let patience: Double = scale > 20_000 ? 60 : 5
configuration.refreshInterval = patience
let patient = try await RunningGateway.start(configuration: configuration, postgresURL: postgresURL)

func device(_ name: String, through serviceRoot: URL) async throws -> OfflineODataProvider {
    var parameters = OfflineODataParameters()
    parameters.storePath = folder
    parameters.storeName = name
    let provider = OfflineODataProvider(serviceRoot: serviceRoot, parameters: parameters)
    try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "SalesOrders", query: "SalesOrders"))
    return provider
}

func count(_ provider: OfflineODataProvider) async throws -> Int {
    guard case .count(let n) = try await provider.read("SalesOrders/$count") else {
        throw Failure(description: "no count")
    }
    return Int(n)
}

/// CPU seconds (user plus system) of this process (backend, gateway and devices) and of every
/// PostgreSQL process now running (Linux `/proc`; connections are pooled, so they last).
func cpuSeconds() -> (own: Double, postgres: Double) {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let own =
        Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
        + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    var postgres = 0.0
    let tick = Double(sysconf(Int32(_SC_CLK_TCK)))
    for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int(name) != nil {
        guard let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
            stat.contains("(postgres)"), let close = stat.lastIndex(of: ")")
        else { continue }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        if fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) {
            postgres += (user + system) / tick
        }
    }
    return (own, postgres)
}

print("GatewayRatio: sales scale \(scale), backend without delta links, gateway on PostgreSQL, loopback")
let direct = try await device("direct", through: backend.v4Root)
let first = try await device("first", through: gateway.root)
let second = try await device("second", through: patient.root)
let cpuBefore = cpuSeconds()
let openDirect = try await seconds { try await direct.open() }
let cpuBetween = cpuSeconds()
let openGateway = try await seconds { try await first.open() }
let cpuAfter = cpuSeconds()
try await second.open()
let orders = try await count(direct)
print(
    String(format: "first open: direct %.3f s, through the gateway %.3f s (%d orders)", openDirect, openGateway, orders)
)
print(
    String(
        format: "  CPU: direct %.2f s (PostgreSQL %.2f), through the gateway %.2f s (PostgreSQL %.2f)",
        cpuBetween.own - cpuBefore.own, cpuBetween.postgres - cpuBefore.postgres, cpuAfter.own - cpuBetween.own,
        cpuAfter.postgres - cpuBetween.postgres))
if ProcessInfo.processInfo.environment["FIRST_OPEN_ONLY"] != nil {
    for provider in [direct, first, second] { await provider.close() }
    await gateway.stop()
    await patient.stop()
    await backend.stop()
    exit(0)
}

// Where the scope stood before the changes: a delta link from there is what the devices follow.
let before = try await patient.gateway.store.scope(backend: root, query: "SalesOrders", user: "", interval: 1e9)

// 1 % of the orders change on the backend.
let changed = max(1, orders / 100)
var headers = HTTPHeaders()
headers["Content-Type"] = "application/json"
headers["If-Match"] = "*"
let transport = DefaultTransport.make()
for index in 0..<changed {
    let response = try await transport.send(
        TransportRequest(
            method: "PATCH", url: root + "SalesOrders('SO\(index * 97 % orders)')", headers: headers,
            body: Array(#"{"Note":"changed \#(index)"}"#.utf8)), timeout: 30)
    guard response.status < 300 else { throw Failure(description: "PATCH: \(response.status)") }
}
let directDownload = try await seconds { try await direct.download() }
let withRefresh = try await seconds { try await first.download() }
let afterRefresh = try await seconds { try await second.download() }
for provider in [direct, first, second] where try await count(provider) != orders {
    throw Failure(description: "a device lost or gained orders")
}
// The same delta as raw HTTP pages, without a client applying it: the gateway's share.
var deltaRows = 0
let raw = try await seconds {
    var pageHeaders = HTTPHeaders()
    pageHeaders["Accept"] = "application/json"
    pageHeaders["Prefer"] = "odata.track-changes"
    var next: String? = patient.root.absoluteString + "SalesOrders?$deltatoken=gd.\(before.id).\(before.published)"
    while let url = next {
        let page = try await transport.send(
            TransportRequest(method: "GET", url: url, headers: pageHeaders), timeout: 60)
        let json = try JSONValue.parse(page.body)
        deltaRows += json["value"]?.arrayValue?.count ?? 0
        next = json["@odata.nextLink"]?.stringValue
    }
}
print(String(format: "download after %d changed orders:", changed))
print(String(format: "  direct (full re-read and diff)           %8.3f s", directDownload))
print(
    String(
        format: "  gateway, refresh already run             %8.3f s   ratio %.3f×", afterRefresh,
        afterRefresh / directDownload))
print(
    String(
        format: "  the same delta's pages fetched raw (%d rows, no client) %8.3f s   ratio %.3f×", deltaRows, raw,
        raw / directDownload))
print(
    String(
        format: "  gateway, this download runs the refresh  %8.3f s   ratio %.3f×", withRefresh,
        withRefresh / directDownload))

// One sync round of many devices on one scope: backend reads.
var fleet: [OfflineODataProvider] = []
for index in 0..<deviceCount { fleet.append(try await device("fleet\(index)", through: patient.root)) }
for provider in fleet { try await provider.open() }
for index in 0..<changed {
    _ = try await transport.send(
        TransportRequest(
            method: "PATCH", url: root + "SalesOrders('SO\(index * 89 % orders)')", headers: headers,
            body: Array(#"{"Note":"again \#(index)"}"#.utf8)), timeout: 30)
}
// The round starts after the refresh interval: the first device's request refreshes, the
// others are answered from that refresh.
try await Task.sleep(nanoseconds: UInt64(patience + 1) * 1_000_000_000)
await backend.service.journal.clear()
let round = try await seconds {
    try await withThrowingTaskGroup(of: Void.self) { group in
        for provider in fleet { group.addTask { try await provider.download() } }
        try await group.waitForAll()
    }
}
let reads = await backend.service.journal.requests().filter {
    $0.hasPrefix("GET SalesOrders") && !$0.contains("skiptoken") && !$0.contains("$top=0")
}.count
print(
    String(
        format:
            "%d devices downloading at once (%.0f s refresh interval): %d backend read(s) of SalesOrders, round %.3f s",
        deviceCount, patience, reads, round))
for provider in fleet + [direct, first, second] { await provider.close() }
await gateway.stop()
await patient.stop()
await backend.stop()
