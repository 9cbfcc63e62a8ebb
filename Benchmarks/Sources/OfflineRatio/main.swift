import Foundation
import ODataCore
import ODataServer
import ODataStore
import OfflineOData
import PayloadFixtures

// Offline provider benchmarks against the reference server on loopback, each beside a baseline
// run in the same process:
// 1. initial open of N Products (10 properties) into a keyed store vs Foundation's
//    JSONSerialization only parsing the same pages;
// 2. peak resident memory of the process after that open (run with a large N in its own process);
// 3. local create/update throughput vs hand-written SQL doing the same two inserts per change;
// 4. upload of 1,000 queued changes: HTTP round trips and time.
// Usage: OfflineRatio [N] [pageSize] [open | fullread]
//   `open`: only the open and its peak memory, with the server in a child process
//   (`OfflineRatio N pageSize serve`), so that the peak is the offline client's alone.
//   `fullread`: downloads of a backend without change tracking (every row read again), end
//   to end and at the store: writing every row as downloads did against writing what changed.

let arguments = CommandLine.arguments
let count = arguments.count > 1 ? Int(arguments[1]) ?? 100_000 : 100_000
let pageSize = arguments.count > 2 ? Int(arguments[2]) ?? 5_000 : 5_000
let openOnly = arguments.count > 3 && arguments[3] == "open"
let serveOnly = arguments.count > 3 && arguments[3] == "serve"
let localOnly = arguments.count > 3 && arguments[3] == "local"
let clientOnly = arguments.count > 3 && arguments[3] == "client"
let fullReadOnly = arguments.count > 3 && arguments[3] == "fullread"
// `userswitch`: a shared store handed to other users (SPEC §16) against the first open.
let userSwitchOnly = arguments.count > 3 && arguments[3] == "userswitch"

func seconds(_ body: () async throws -> Void) async rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try await body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

/// User plus system CPU time of this process so far, in seconds.
func cpuSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// User plus system CPU time of another process so far, in seconds (Linux `/proc`).
func cpuSeconds(ofProcess pid: Int32) -> Double? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")") else { return nil }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

func peakRSSMiB() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_maxrss) / 1024
}

/// Counts requests on their way to the real transport.
actor Counter {
    var requests = 0
    var batches = 0
    /// Wall time spent waiting for `$batch` answers: the server's work and the loopback.
    var batchSeconds = 0.0
    func add(_ request: TransportRequest) {
        requests += 1
        if request.url.contains("$batch") { batches += 1 }
    }
    func waited(_ seconds: Double) { batchSeconds += seconds }
}

struct CountingTransport: Transport {
    let inner = AsyncHTTPClientTransport()
    let counter = Counter()
    func send(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
        await counter.add(request)
        guard request.url.contains("$batch") else { return try await inner.send(request, timeout: timeout) }
        let start = DispatchTime.now().uptimeNanoseconds
        let response = try await inner.send(request, timeout: timeout)
        await counter.waited(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
        return response
    }
}

/// The `@odata.nextLink` of a page, found without parsing the page (so that the fetch time
/// below is the server's and the transport's alone).
func nextLink(in body: [UInt8]) -> String? {
    let marker = Array("\"@odata.nextLink\":\"".utf8)
    guard body.count > marker.count else { return nil }
    for start in stride(from: body.count - marker.count, through: 0, by: -1) where body[start] == marker[0] {
        guard Array(body[start..<(start + marker.count)]) == marker else { continue }
        let valueStart = start + marker.count
        guard let end = body[valueStart...].firstIndex(of: UInt8(ascii: "\"")) else { return nil }
        return String(decoding: body[valueStart..<end], as: UTF8.self).replacingOccurrences(of: "\\/", with: "/")
    }
    return nil
}

// The backend: in this process, or (open mode) in a child process that prints its root.
var serviceRoot: URL
var child: Process?
if openOnly, let root = ProcessInfo.processInfo.environment["SERVICE_ROOT"].flatMap(URL.init(string:)) {
    // A server started by hand (`OfflineRatio N pageSize serve`), e.g. to profile it alone.
    serviceRoot = root
} else if openOnly {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
    process.arguments = ["\(count)", "\(pageSize)", "serve"]
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    child = process
    var line = Data()
    while !line.contains(UInt8(ascii: "\n")) {
        let byte = pipe.fileHandleForReading.readData(ofLength: 1)
        guard !byte.isEmpty else { fatalError("the server process ended early") }
        line.append(byte)
    }
    guard let root = URL(string: String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else { fatalError("no root") }
    serviceRoot = root
} else {
    serviceRoot = URL(fileURLWithPath: "/")
}
let directory = FileManager.default.temporaryDirectory.appendingPathComponent("offline-bench-\(UUID().uuidString)")
try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: directory) }
let model = try MetadataParser().parse(ProductModel.metadata)
let server: EmbeddedServer?
if openOnly {
    server = nil
} else {
    // The backend: the reference server with N products.
    let backendStore = try await Store.create(path: directory.appendingPathComponent("backend.sqlite").path, model: model)
    var options = ODataService.Options()
    options.pageSize = pageSize
    let service = try await ODataService.open(store: backendStore, options: options)
    for start in stride(from: 0, to: count, by: 10_000) {
        try await service.load([("Products", (start..<min(start + 10_000, count)).map(ProductModel.product))])
    }
    let started = try await EmbeddedServer.start(service)
    server = started
    serviceRoot = started.v4Root
    if serveOnly {
        FileHandle.standardOutput.write(Data((started.v4Root.absoluteString + "\n").utf8))
        while true { try await Task.sleep(nanoseconds: 1_000_000_000) }
    }
}
print("entities: \(count), server page size \(pageSize), keyed offline store\(openOnly ? ", server in a child process" : "")")
let rssBeforeOpen = peakRSSMiB()

if clientOnly {
    // The client's work alone, without the network: the pages are fetched first.
    var pages: [[UInt8]] = []
    var next: String? = serviceRoot.absoluteString + "Products"
    while let url = next {
        let response = try await AsyncHTTPClientTransport().send(TransportRequest(method: "GET", url: url), timeout: 120)
        pages.append(response.body)
        next = nextLink(in: response.body)
    }
    for round in 1...3 {
        let readTime = try await seconds {
            for page in pages { _ = try V4JSONReader(model: model).readCollection(page, entityType: "Bench.Product") }
        }
        let target = try await Store.create(path: directory.appendingPathComponent("client\(round).sqlite").path, model: model, key: "bench-key")
        let storeTime = try await seconds {
            for page in pages {
                let collection = try V4JSONReader(model: model).readCollection(page, entityType: "Bench.Product")
                try await target.write { writer in try writer.bulkInsert(collection.entities, into: "Products") }
            }
        }
        target.close()
        let flatReadTime = try await seconds {
            for page in pages { _ = try V4JSONReader(model: model).readFlatCollection(page, entityType: "Bench.Product") }
        }
        // As the first open does: lookup indexes after the fill.
        let flatTarget = try await Store.create(path: directory.appendingPathComponent("flat\(round).sqlite").path, model: model, key: "bench-key",
                                                deferringLookupIndexes: true)
        let flatStoreTime = try await seconds {
            try await flatTarget.setBulkFill(true)
            for page in pages {
                guard let rows = try V4JSONReader(model: model).readFlatCollection(page, entityType: "Bench.Product") else { fatalError("not flat") }
                try await flatTarget.write { writer in try writer.bulkInsert(rows, into: "Products") }
            }
            try await flatTarget.createLookupIndexes()
            try await flatTarget.setBulkFill(false)
        }
        flatTarget.close()
        print(String(format: "round %d: entities: reading the pages %.2f s, reading and storing them (one transaction per page) %.2f s; rows: %.2f s, %.2f s (as the first open stores them: bulk fill, lookup indexes after it)",
                     round, readTime, storeTime, flatReadTime, flatStoreTime))
    }
    await server?.stop()
    exit(0)
}

// 1. Initial open, end to end.
let transport = CountingTransport()
var parameters = OfflineODataParameters()
// `BATCH=n`: requests per `$batch` (the default otherwise).
if let batch = Int(ProcessInfo.processInfo.environment["BATCH"] ?? "") { parameters.maxRequestsPerBatch = batch }
parameters.storePath = directory
parameters.storeEncryptionKey = "bench-key"
if userSwitchOnly {
    parameters.currentUser = "alice"
    parameters.userSwitchPolicy = .keepForTheirUser
}
let provider = OfflineODataProvider(serviceRoot: serviceRoot, parameters: parameters, transport: transport)
try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "Products", query: "Products"))
let cpuBeforeOpen = cpuSeconds()
let serverCPUBeforeOpen = child.flatMap { cpuSeconds(ofProcess: $0.processIdentifier) }
let openTime = try await seconds { try await provider.open() }
let openCPU = cpuSeconds() - cpuBeforeOpen
let serverOpenCPU = child.flatMap { cpuSeconds(ofProcess: $0.processIdentifier) }.map { $0 - (serverCPUBeforeOpen ?? 0) }
let rssAfterOpen = peakRSSMiB()
guard case .count(let stored) = try await provider.read("Products/$count"), stored == Int64(count) else {
    fatalError("the open did not store every entity")
}
let openRequests = await transport.counter.requests
if openOnly {
    print(String(format: "1. open: %.2f s = %.0f entities/s (%d HTTP requests); CPU: client %.2f s, server %.2f s", openTime, Double(count) / openTime, openRequests,
                 openCPU, serverOpenCPU ?? -1))
    print(String(format: "2. peak RSS of the offline client: %.0f MiB (%.0f MiB before the open)", rssAfterOpen, rssBeforeOpen))
    child?.terminate()
    exit(0)
}

if userSwitchOnly {
    // The backend has no users: each switch costs what it costs with them (every defining query
    // read whole again), without the rows differing.
    let changes = Int(ProcessInfo.processInfo.environment["CHANGES"] ?? "") ?? 1_000
    for i in 0..<changes {
        _ = try await provider.execute(method: "PATCH", url: "Products(\(i))", body: Array("{\"Quantity\":\(i % 97)}".utf8))
    }
    await provider.close()
    func openAs(_ user: String) async throws -> Double {
        var switched = parameters
        switched.currentUser = user
        let next = OfflineODataProvider(serviceRoot: serviceRoot, parameters: switched, transport: transport)
        let start = DispatchTime.now().uptimeNanoseconds
        try await next.open()
        let time = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        await next.close()
        return time
    }
    let toBob = try await openAs("bob")
    let toCarol = try await openAs("carol")
    let backToAlice = try await openAs("alice")
    let reopen = try await openAs("alice")
    print(String(format: "user switch, %d entities, first open %.2f s: to bob with %d of alice's requests kept %.2f s (%.2f×); "
                 + "to carol, none kept %.2f s (%.2f×); back to alice, her %d requests applied again %.2f s (%.2f×); "
                 + "an open with no switch %.3f s", count, openTime, changes, toBob, toBob / openTime, toCarol, toCarol / openTime,
                 changes, backToAlice, backToAlice / openTime, reopen))
    await server?.stop()
    exit(0)
}

if fullReadOnly {
    // A download that reads everything again (as from a backend without change tracking),
    // with nothing changed on the backend, then with 1 % of the rows changed.
    // A second connection to the provider's store (WAL: both see each other's commits).
    let store = try await Store.open(path: parameters.storeFile, key: parameters.storeEncryptionKey)
    func forgetDeltaLinks() async throws {
        try await store.write { writer in _ = try writer.connection.execute("UPDATE oo_defining SET delta_link = NULL") }
    }
    func upserted() async throws -> Int64 {
        guard case .count(let n) = try await provider.read("Products/$count?$filter=sap.upsertedLastDownload()") else { return -1 }
        return n
    }
    try await forgetDeltaLinks()
    let unchanged = try await seconds { try await provider.download() }
    let unchangedMarked = try await upserted()
    let changedCount = max(1, count / 100)
    var headers = ODataCore.HTTPHeaders()
    headers["Content-Type"] = "application/json"
    for index in stride(from: 0, to: count, by: count / changedCount) {
        let key = ProductModel.product(index)["ID"].map { Literal.format($0, version: .v4) } ?? "0"
        _ = try await AsyncHTTPClientTransport().send(TransportRequest(method: "PATCH", url: serviceRoot.absoluteString + "Products(\(key))",
                                                                       headers: headers, body: Array(#"{"Name":"changed"}"#.utf8)), timeout: 60)
    }
    try await forgetDeltaLinks()
    let onePercent = try await seconds { try await provider.download() }
    print(String(format: "full-read download of %d unchanged rows: %.2f s (%lld marked upserted); with %d changed: %.2f s (%lld marked); the open took %.2f s",
                 count, unchanged, unchangedMarked, changedCount, onePercent, try await upserted(), openTime))
    // At the store, in one process: the same entities written as downloads did (every row
    // replaced) against written only where they changed, alternating over three rounds.
    var read: [Entity] = []
    var next: String? = serviceRoot.absoluteString + "Products"
    while let url = next {
        let response = try await AsyncHTTPClientTransport().send(TransportRequest(method: "GET", url: url), timeout: 120)
        read += try V4JSONReader(model: model).readCollection(response.body, entityType: "Bench.Product").entities
        next = nextLink(in: response.body)
    }
    let entities = read
    for round in 1...3 {
        let replaceAll = try await seconds {
            try await store.write { writer in for entity in entities { _ = try writer.upsert(entity, into: "Products") } }
        }
        let onlyChanged = try await seconds {
            try await store.write { writer in for entity in entities { _ = try writer.upsertIfChanged(entity, into: "Products") } }
        }
        print(String(format: "round %d, %d entities in one transaction: every row replaced %.2f s; only changed rows written %.2f s; ratio %.2f",
                     round, entities.count, replaceAll, onlyChanged, replaceAll / onlyChanged))
    }
    await server?.stop()
    exit(0)
}

// Baseline: fetch the same pages once, then time JSONSerialization parsing them.
var pages: [Data] = []
if localOnly { print(String(format: "1. open: %.2f s", openTime)) } else {
var next: String? = serviceRoot.absoluteString + "Products"
let fetchStart = DispatchTime.now().uptimeNanoseconds
while let url = next {
    let response = try await AsyncHTTPClientTransport().send(TransportRequest(method: "GET", url: url), timeout: 120)
    pages.append(Data(response.body))
    next = nextLink(in: response.body)
}
let fetchTime = Double(DispatchTime.now().uptimeNanoseconds - fetchStart) / 1e9
func parseAll() throws -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    var parsedRows = 0
    for page in pages {
        let json = try JSONSerialization.jsonObject(with: page) as? [String: Any]
        parsedRows += (json?["value"] as? [Any])?.count ?? 0
    }
    guard parsedRows == count else { fatalError("JSONSerialization read \(parsedRows) entities") }
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}
// This VM's speed varies by ±25 % from minute to minute: the open and the parse alternate
// over several rounds (OPEN_ROUNDS, default 5), each open into a new store, and the medians
// are compared.
let rounds = max(1, Int(ProcessInfo.processInfo.environment["OPEN_ROUNDS"] ?? "") ?? 5)
var openTimes = [openTime]
var parseTimes = [try parseAll()]
for round in 1..<rounds {
    var again = parameters
    again.storeName = "round\(round)"
    let extra = OfflineODataProvider(serviceRoot: serviceRoot, parameters: again, transport: AsyncHTTPClientTransport())
    try await extra.add(definingQuery: OfflineODataDefiningQuery(name: "Products", query: "Products"))
    openTimes.append(try await seconds { try await extra.open() })
    guard case .count(let stored) = try await extra.read("Products/$count"), stored == Int64(count) else { fatalError("an open did not store every entity") }
    await extra.clear()
    parseTimes.append(try parseAll())
}
func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}
let payloadMiB = Double(pages.reduce(0) { $0 + $1.count }) / 1_048_576
let openMedian = median(openTimes), parseMedian = median(parseTimes)
print(String(format: "1. open: median %.2f s = %.0f entities/s (%d HTTP requests, %.1f MiB JSON); JSONSerialization parse only: median %.2f s = %.0f entities/s; open/parse speed ratio %.2f",
             openMedian, Double(count) / openMedian, openRequests, payloadMiB, parseMedian, Double(count) / parseMedian, parseMedian / openMedian))
print("   rounds (open / parse, alternating): " + zip(openTimes, parseTimes).map { String(format: "%.2f / %.2f", $0, $1) }.joined(separator: ", "))
print(String(format: "   (fetching the same pages without parsing them takes %.2f s: the server and the transport; the open fetches the next page while it stores the current one)",
             fetchTime))
print(String(format: "2. peak RSS after the open (server and client in one process): %.0f MiB", rssAfterOpen))
// Where the client's time goes: the same pages read by ODataCore, then read and stored.
let readTime = try await seconds {
    for page in pages { _ = try V4JSONReader(model: model).readCollection(Array(page), entityType: "Bench.Product") }
}
let storeOnly = try await Store.create(path: directory.appendingPathComponent("breakdown.sqlite").path, model: model, key: "bench-key")
let storeTime = try await seconds {
    for page in pages {
        let collection = try V4JSONReader(model: model).readCollection(Array(page), entityType: "Bench.Product")
        try await storeOnly.write { writer in try writer.bulkInsert(collection.entities, into: "Products") }
    }
}
print(String(format: "   the client's share: ODataCore reading the pages %.2f s; reading and storing them (one transaction per page, no network) %.2f s", readTime, storeTime))
}

// 3. Local changes: each an update of one entity (store write + queue row) vs hand-written SQL.
let changes = Int(ProcessInfo.processInfo.environment["CHANGES"] ?? "") ?? 2_000
if ProcessInfo.processInfo.environment["PATCH_ONLY"] != nil {
    // Only the local changes (for a profiler).
    let localTime = try await seconds {
        for i in 0..<changes {
            _ = try await provider.execute(method: "PATCH", url: "Products(\(i))", body: Array("{\"Quantity\":\(i % 97)}".utf8))
        }
    }
    print(String(format: "3. local changes: %.0f/s through the provider", Double(changes) / localTime))
    exit(0)
}
let sqlPath = directory.appendingPathComponent("baseline.sqlite").path
let baseline = try Connection(path: sqlPath, options: Connection.Options(key: "bench-key"))
try baseline.execute("CREATE TABLE entity (id INTEGER PRIMARY KEY, quantity INTEGER, pending INTEGER)")
try baseline.execute("CREATE TABLE queue (id INTEGER PRIMARY KEY, method TEXT, url TEXT, body BLOB)")
for i in 0..<changes { _ = try baseline.execute("INSERT INTO entity (id, quantity, pending) VALUES (?, 0, 0)", [.integer(Int64(i))]) }
// As for the open, the two alternate over five rounds (each a fifth of the changes, on other
// entities), so that both see the same minutes of this VM.
let changeRounds = 5
var localTimes: [Double] = []
var sqlTimes: [Double] = []
for round in 0..<changeRounds {
    let range = (round * changes / changeRounds)..<((round + 1) * changes / changeRounds)
    localTimes.append(try await seconds {
        for i in range {
            _ = try await provider.execute(method: "PATCH", url: "Products(\(i))", body: Array("{\"Quantity\":\(i % 97)}".utf8))
        }
    })
    sqlTimes.append(try await seconds {
        for i in range {
            try baseline.transaction {
                _ = try baseline.execute("UPDATE entity SET quantity = ?, pending = 1 WHERE id = ?", [.integer(Int64(i % 97)), .integer(Int64(i))])
                _ = try baseline.execute("INSERT INTO queue (method, url, body) VALUES ('PATCH', ?, ?)", [.text("Products(\(i))"), .blob(Array("{\"Quantity\":\(i % 97)}".utf8))])
            }
        }
    })
}
baseline.close()
let localTime = localTimes.reduce(0, +), sqlTime = sqlTimes.reduce(0, +)
print(String(format: "3. local changes: %.0f/s through the provider; hand-written SQL (update + queue insert per transaction): %.0f/s; ratio %.2f",
             Double(changes) / localTime, Double(changes) / sqlTime, sqlTime / localTime))
print("   ratio per round: " + zip(localTimes, sqlTimes).map { String(format: "%.2f", $1 / $0) }.joined(separator: ", "))

if localOnly {
    // How much of a local change is crossing to the provider and the store and back.
    let actorHop = await seconds { for _ in 0..<changes { _ = await provider.isOpen } }
    print(String(format: "   an empty call into the provider actor and back: %.0f µs", actorHop / Double(changes) * 1e6))
    let hopTime = try await seconds { for _ in 0..<changes { _ = try await provider.isRequestQueueEmpty } }
    print(String(format: "   a read-only round trip through the provider and the store: %.0f µs", hopTime / Double(changes) * 1e6))
    let bare = try await Store.create(path: directory.appendingPathComponent("hop.sqlite").path, model: model, key: "bench-key")
    let bareRead = try await seconds { for _ in 0..<changes { _ = try await bare.read { _ in 0 } } }
    let bareWrite = try await seconds { for _ in 0..<changes { _ = try await bare.write { _ in 0 } } }
    print(String(format: "   an empty Store.read: %.0f µs, an empty Store.write (a transaction with no change): %.0f µs",
                 bareRead / Double(changes) * 1e6, bareWrite / Double(changes) * 1e6))
    exit(0)
}

// 4. Upload of 1,000 of them.
try await provider.undoPendingChanges(forURL: "Products(0)")
let before = await transport.counter.requests
let waitedBefore = await transport.counter.batchSeconds
var queued = 0
if case .count(let n) = try await provider.read("RequestQueue/$count") { queued = Int(n) }
// Keep exactly 1,000 queued changes (`UPLOAD=n` for another number).
let uploadCount = Int(ProcessInfo.processInfo.environment["UPLOAD"] ?? "") ?? 1_000
if queued > uploadCount { try await provider.undoPendingChanges(forURLs: (1..<(queued - uploadCount + 1)).map { "Products(\($0))" }) }
if case .count(let n) = try await provider.read("RequestQueue/$count") { queued = Int(n) }
let batchSize = parameters.maxRequestsPerBatch
let uploadTime = try await seconds { try await provider.upload() }
let roundTrips = await transport.counter.requests - before
// Batches start at 100 requests and double while the backend answers quickly, up to the maximum.
print(String(format: "4. upload of %d changes: %d HTTP round trips (batches of up to %d; at least ⌈%d/%d⌉ = %d), %.2f s",
             queued, roundTrips, batchSize, queued, batchSize, (queued + batchSize - 1) / batchSize, uploadTime))
let waited = await transport.counter.batchSeconds - waitedBefore
print(String(format: "   of which waiting for the $batch answers (server and loopback) %.2f s, the client's own work %.2f s",
             waited, uploadTime - waited))
await provider.close()
await server?.stop()
