import CRawSQLCipher
import Foundation
import ODataCore
import ODataStore
import OfflineOData
import PayloadFixtures

// Sync at scale (issue 22): what a download costs against what changed, local pages with and
// without an index, and the store against the SQLCipher C API.
//
// Usage: Scale [N] [pageSize]   (release build; the server runs in ScaleBackend, a child)
//   SKIP_TENTH=1 leaves out the delta with 10 % changed (at 1,000,000 the server needs long
//   to build a delta of 100,000 entities: it reads each changed entity with its own query).
//   INSERT_ROUNDS=n runs the insert comparison n times (3 by default); INSERT_DETAILS=1 also
//   prints the schemas, each run's reads and writes (/proc/self/io) and every round's time.
//
// Baselines, in the same run: a download against the first open of the same data (time, and
// time per entity); the store's insert and page query against the same work through our
// connection layer and through the C API (one prepared statement, the same table and stored
// forms).

let arguments = CommandLine.arguments
let count = arguments.count > 1 ? Int(arguments[1]) ?? 100_000 : 100_000
let pageSize = arguments.count > 2 ? Int(arguments[2]) ?? 5_000 : 5_000
let environment = ProcessInfo.processInfo.environment
/// `PAGE_SIZES=1024,2048`: encrypted page sizes to weigh against the store's 4,096 bytes, through
/// the C API (the delta of 1 % in section 2c, the insert in section 5).
let pageSizes = (environment["PAGE_SIZES"] ?? "").split(separator: ",").compactMap { Int($0) }
/// The message a C function of CRawSQLCipher left in its 256-byte `error`.
func cMessage(_ error: [CChar]) -> String {
    String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// CPU time of the process so far (every thread, user and system), in seconds.
func cpuSeconds() -> Double {
    var usage = rusage()
    #if os(Linux)
    getrusage(RUSAGE_SELF.rawValue, &usage)
    #else
    getrusage(RUSAGE_SELF, &usage)
    #endif
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// The counters of /proc/self/io (bytes and system calls of reads and writes).
func processIO() -> [String: Int] {
    guard let text = try? String(contentsOfFile: "/proc/self/io", encoding: .utf8) else { return [:] }
    var counters: [String: Int] = [:]
    for line in text.split(separator: "\n") {
        let parts = line.split(separator: ":")
        if parts.count == 2, let value = Int(parts[1].trimmingCharacters(in: .whitespaces)) { counters[String(parts[0])] = value }
    }
    return counters
}

/// Prints a line at once (stdout to a pipe is buffered until the end).
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

func seconds(_ body: () async throws -> Void) async rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try await body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition {
        FileHandle.standardError.write(Data("Scale: \(message())\n".utf8))
        exit(1)
    }
}

/// Peak resident memory of this process since the last ``resetPeakRSS()`` (Linux `VmHWM`).
func peakRSSMiB() -> Double {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
        let kib = Double(line.split(separator: " ").dropFirst().first ?? "")
    else { return -1 }
    return kib / 1024
}

/// Starts a new peak for ``peakRSSMiB()`` (`clear_refs` 5).
func resetPeakRSS() {
    guard let file = FileHandle(forWritingAtPath: "/proc/self/clear_refs") else { return }
    file.write(Data("5".utf8))
    try? file.close()
}

/// Samples this process's resident memory every 2 ms on a thread of its own, split as
/// `/proc/self/statm` splits it: anonymous (heap, stacks, written data: what the process
/// itself allocates) and file-backed (the mapped code and read-only data of the binary and its
/// libraries, clean pages the kernel can drop and read again). `VmHWM` is their sum's peak.
final class MemorySampler: @unchecked Sendable {
    private let lock = NSLock()
    private var running = true
    private var peakAnonymous = 0
    private var peakFile = 0

    static func sample() -> (anonymous: Int, file: Int)? {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        let fields = text.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        guard fields.count >= 3 else { return nil }
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        return ((fields[1] - fields[2]) * page, fields[2] * page)
    }

    init() {
        Thread { [self] in
            while lock.withLock({ running }) {
                if let (anonymous, file) = Self.sample() {
                    lock.withLock {
                        peakAnonymous = max(peakAnonymous, anonymous)
                        peakFile = max(peakFile, file)
                    }
                }
                usleep(2000)
            }
        }.start()
    }

    /// Stops sampling; the peaks in MiB.
    func stop() -> (anonymous: Double, file: Double) {
        lock.withLock {
            running = false
            return (Double(peakAnonymous) / 1_048_576, Double(peakFile) / 1_048_576)
        }
    }
}

let model = try MetadataParser().parse(ProductModel.metadata)
let directory = FileManager.default.temporaryDirectory.appendingPathComponent("scale-bench-\(UUID().uuidString)")
try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: directory) }
// The backend runs in a child process, from a binary of its own (ScaleBackend, built beside this
// one): the parent's memory is the client's alone, and maps only what an app's would.
let child = Process()
child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    .appendingPathComponent("ScaleBackend")
check(FileManager.default.isExecutableFile(atPath: child.executableURL?.path ?? ""),
      "ScaleBackend is not beside Scale: swift build -c release --product ScaleBackend")
child.arguments = ["\(count)", "\(pageSize)", directory.path]
let pipe = Pipe()
child.standardOutput = pipe
try child.run()
var line = Data()
while !line.contains(UInt8(ascii: "\n")) {
    let byte = pipe.fileHandleForReading.readData(ofLength: 1)
    guard !byte.isEmpty else { fatalError("the server process ended early") }
    line.append(byte)
}
guard let root = URL(string: String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else {
    fatalError("no service root")
}
defer { child.terminate() }
/// Ends the benchmark early (`exit` skips the `defer`s above): the backend stops and the folder
/// with its files (hundreds of MiB at 1M rows) goes.
func finish() -> Never {
    child.terminate()
    child.waitUntilExit()
    try? FileManager.default.removeItem(at: directory)
    exit(0)
}
// The parent changes the backend's rows through its own connection to the file (WAL: the
// server sees each commit).
let backendStore = try await Store.open(path: directory.appendingPathComponent("backend.sqlite").path)
say("entities: \(count), server page size \(pageSize), keyed offline store, server in a child process (peak RSS is the client's)")

/// Changes `changed` products on the backend, spread over the table, as its writes record
/// them for delta links (one transaction).
func changeOnBackend(_ changed: Int, round: Int) async throws {
    guard changed > 0 else { return }
    let step = max(1, count / changed)
    try await backendStore.write { writer in
        let db = writer.connection
        // This connection is the benchmark's, not the client's, but lives in the client's
        // process: a 2 MiB cache, emptied after each change, keeps it out of the client's peaks.
        _ = try db.execute("PRAGMA cache_size = -2048")
        for index in stride(from: 0, to: step * changed, by: step) {
            // Names stay unique, as the generated ones are (the page below orders by Name).
            let name = "Product number \(index), changed in round \(round)"
            _ = try db.execute("UPDATE \"es_Products\" SET \"Name\" = ? WHERE \"ID\" = ?", [.text(name), .integer(Int64(index))])
            _ = try db.execute(
                "INSERT INTO server_changes (entity_set, key, kind) VALUES ('Products', ?, 'upsert')", [.text("(\(index))")])
        }
    }
    _ = try await backendStore.write { writer in try writer.connection.execute("PRAGMA shrink_memory") }
}

// 1. The first open: the baseline of every download.
var parameters = OfflineODataParameters()
parameters.storePath = directory
parameters.storeEncryptionKey = "bench-key"
var provider = OfflineODataProvider(serviceRoot: root, parameters: parameters, transport: AsyncHTTPClientTransport())
try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "Products", query: "Products"))
let rssBeforeOpen = peakRSSMiB()
let splitBeforeOpen = MemorySampler.sample() ?? (0, 0)
resetPeakRSS()
let openSampler = MemorySampler()
let openCPU = cpuSeconds()
let openTime = try await seconds { try await provider.open() }
let openCPUTime = cpuSeconds() - openCPU
let rssOpen = peakRSSMiB()
let splitOpen = openSampler.stop()
if environment["EXIT_AFTER_OPEN"] != nil {
    // For a heap profiler: the open's peak alone, before any read.
    let io = processIO()
    let size = (try? FileManager.default.attributesOfItem(atPath: parameters.storeFile)[.size] as? Int) ?? 0
    say(String(format: "first open: %.2f s, CPU %.2f s; peak RSS %.0f MiB; passed to write calls %.0f MiB "
                     + "in %d calls (the whole process); "
                     + "store file %.0f MiB", openTime, openCPUTime, peakRSSMiB(), Double(io["wchar"] ?? 0) / 1_048_576,
                 io["syscw"] ?? 0, Double(size) / 1_048_576))
    finish()
}
guard case .count(let stored) = try await provider.read("Products/$count"), stored == Int64(count) else {
    fatalError("the open did not store every entity")
}
let perEntityOpen = openTime / Double(count)
say(String(format: "first open: %.2f s = %.0f entities/s (%.1f µs per entity); peak RSS of the client during it %.0f MiB (%.0f before)",
             openTime, Double(count) / openTime, perEntityOpen * 1e6, rssOpen, rssBeforeOpen))
say(String(format: "   of it, sampled every 2 ms: anonymous memory (heap, stacks) peak %.1f MiB (%.1f before the open); mapped files (code, libraries) peak %.1f MiB (%.1f before)",
             splitOpen.anonymous, Double(splitBeforeOpen.anonymous) / 1_048_576, splitOpen.file,
             Double(splitBeforeOpen.file) / 1_048_576))
// What a scan leaves in the page caches (the count above read the whole table through a
// reader's cache), and what `releaseMemory()` (an app's answer to a memory warning) gives back.
do {
    let resident = { () -> (anonymous: Double, file: Double) in
        let split = MemorySampler.sample() ?? (0, 0)
        return (Double(split.anonymous) / 1_048_576, Double(split.file) / 1_048_576)
    }
    let cached = Double(await provider.storeCacheBytes()) / 1_048_576
    let held = resident()
    await provider.releaseMemory()
    let released = resident()
    say(String(format: "after the open and a count: page caches %.1f MiB, anonymous memory %.1f MiB; after releaseMemory(): page caches %.1f MiB, anonymous memory %.1f MiB",
                 cached, held.anonymous, Double(await provider.storeCacheBytes()) / 1_048_576, released.anonymous))
}

func upserted() async throws -> Int64 {
    guard case .count(let n) = try await provider.read("Products/$count?$filter=sap.upsertedLastDownload()") else { return -1 }
    return n
}

if let repeatText = environment["PROFILE_DELTA"], let repeats = Int(repeatText) {
    // For a profiler: only deltas of 1 % changed, `repeats` times.
    for index in 0..<repeats {
        try await changeOnBackend(count / 100, round: 1_000 + index)
        let time = try await seconds { try await provider.download() }
        say(String(format: "delta of %d: %.3f s", count / 100, time))
    }
    finish()
}

// `FULL_ONLY=1`: the full re-download right after the first open, in a process that has done
// nothing else (the deltas and C API runs before it leave memory that glibc keeps).
if environment["FULL_ONLY"] == nil {
    // 2. Deltas.
    // Twice with nothing changed: the first download after the open also opens connections.
    let fractions: [Double] = environment["SKIP_TENTH"] != nil ? [0, 0, 0.001, 0.01] : [0, 0, 0.001, 0.01, 0.1]
    for (index, fraction) in fractions.enumerated() {
        let changed = Int(Double(count) * fraction)
        try await changeOnBackend(changed, round: index)
        let time = try await seconds { try await provider.download() }
        let marked = try await upserted()
        check(marked == Int64(changed), "delta of \(changed): \(marked) rows marked upserted")
        let perEntity = changed > 0 ? String(format: ", %.1f µs per changed entity = %.2f× the open's per entity", time / Double(changed) * 1e6,
                                             time / Double(changed) / perEntityOpen) : ""
        say(String(format: "delta, %.1f %% changed (%d entities): %.3f s = %.2f %% of the first open%@",
                     fraction * 100, changed, time, time / openTime * 100, perEntity))
    }

    // 2b. The same deltas with durable downloads (every commit waits for the disk, as before issue
    //     40), against the default (a download's commits wait for the operating system only), in
    //     alternating rounds on one store: the ratio is the default's time over the durable one's.
    var durableTimes: [Int: [Double]] = [:]
    var redoableTimes: [Int: [Double]] = [:]
    for round in 0..<3 {
        for durable in [true, false] {
            await provider.close()
            var chosen = parameters
            chosen.durableDownloads = durable
            provider = OfflineODataProvider(serviceRoot: root, parameters: chosen, transport: AsyncHTTPClientTransport())
            try await provider.open()
            for fraction in [0.001, 0.01] {
                let changed = Int(Double(count) * fraction)
                try await changeOnBackend(changed, round: 200 + round * 10 + (durable ? 1 : 0) * 5 + (fraction < 0.005 ? 0 : 1))
                let time = try await seconds { try await provider.download() }
                check(try await upserted() == Int64(changed), "delta of \(changed): wrong rows marked")
                if durable { durableTimes[changed, default: []].append(time) } else { redoableTimes[changed, default: []].append(time) }
            }
        }
    }
    for changed in durableTimes.keys.sorted() {
        let durable = durableTimes[changed] ?? []
        let redoable = redoableTimes[changed] ?? []
        let best = (durable.min() ?? 0, redoable.min() ?? 0)
        say(String(format: "delta of %d: durable downloads %.3f s (best of %d), default %.3f s = %.2f× the durable time; %.1f µs per changed entity = %.2f× the open's",
                     changed, best.0, durable.count, best.1, best.1 / best.0, best.1 / Double(changed) * 1e6,
                     best.1 / Double(changed) / perEntityOpen))
    }
    await provider.close()

    // 2c. The physical limit of a delta's apply: the same rows (every 100th or 1,000th key, as
    //     `changeOnBackend` picks them) given a new name through the C API in one transaction on
    //     the client's store file, as a download's apply commits (WAL, `synchronous = NORMAL`, a
    //     16 MiB cache). No fetch, no staging, no comparison: only the page work SQLite must do.
    //     On a copy: the sections below compare the client's store with the backend.
    let deltaPragmas = "PRAGMA cipher_page_size = 4096; PRAGMA cache_size = -16384; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
    let rawCopy = directory.appendingPathComponent("raw-delta.sqlite").path
    for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: parameters.storeFile + suffix) {
        try? FileManager.default.removeItem(atPath: rawCopy + suffix)
        try FileManager.default.copyItem(atPath: parameters.storeFile + suffix, toPath: rawCopy + suffix)
    }
    for fraction in [0.001, 0.01] {
        let changed = Int(Double(count) * fraction)
        var best = Double.infinity
        for round in 0..<3 {
            var rawError = [CChar](repeating: 0, count: 256)
            let time = raw_update(
                rawCopy, parameters.storeEncryptionKey, deltaPragmas,
                "UPDATE \"es_Products\" SET \"Name\" = ? WHERE \"ID\" = ?", 0, Int64(max(1, count / changed)),
                Int32(changed), Int32(round), &rawError)
            check(time >= 0, "raw update: \(String(decoding: rawError.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))")
            best = min(best, time)
        }
        let store = redoableTimes[changed]?.min() ?? 0
        say(String(format: "delta of %d through the C API (UPDATE by key, one transaction, best of 3): %.3f s = %.1f µs per row = %.2f× the open's per entity; the store's delta (fetch, staging, apply) ÷ this: %.2f×",
                     changed, best, best / Double(changed) * 1e6, best / Double(changed) / perEntityOpen, store / best))
    }
    // `PAGE_SIZES=1024,2048`: the same update of 1 % through the C API on copies of the store
    // with smaller encrypted pages (each changed row rewrites and re-encrypts less), to weigh
    // a change of the store's page size; section 5 inserts at those sizes too.
    // A copy at 4,096 bytes made the same way is their control (the export lays the file out
    // anew).
    for size in pageSizes.isEmpty ? [] : [4096] + pageSizes {
        let copy = directory.appendingPathComponent("raw-delta-\(size).sqlite").path
        var rawError = [CChar](repeating: 0, count: 256)
        check(raw_export(rawCopy, parameters.storeEncryptionKey, deltaPragmas, copy, Int32(size), &rawError) >= 0,
              "export: \(cMessage(rawError))")
        let pragmas = deltaPragmas.replacingOccurrences(
            of: "cipher_page_size = 4096", with: "cipher_page_size = \(size)")
        let changed = count / 100
        var best = Double.infinity
        for round in 0..<3 {
            let time = raw_update(
                copy, parameters.storeEncryptionKey, pragmas, "UPDATE \"es_Products\" SET \"Name\" = ? WHERE \"ID\" = ?",
                0, 100, Int32(changed), Int32(10 + round), &rawError)
            check(time >= 0, "raw update at \(size): \(cMessage(rawError))")
            best = min(best, time)
        }
        say(String(format: "delta of %d through the C API with %d-byte pages (best of 3): %.3f s = %.1f µs per row "
                         + "= %.2f× the open's per entity (on a copy made by sqlcipher_export)", changed, size, best, best / Double(changed) * 1e6, best / Double(changed) / perEntityOpen))
    }
}
if environment["FULL_ONLY"] == nil {
    provider = OfflineODataProvider(serviceRoot: root, parameters: parameters, transport: AsyncHTTPClientTransport())
    try await provider.open()
}

// 3. A full read (the delta link expired, or a backend without change tracking), 1 % changed.
let second = try await Store.open(path: parameters.storeFile, key: parameters.storeEncryptionKey)
let fullChanged = max(1, count / 100)
try await changeOnBackend(fullChanged, round: 99)
_ = try await second.write { writer in try writer.connection.execute("UPDATE oo_defining SET delta_link = NULL") }
let rssBeforeFull = peakRSSMiB()
let splitBeforeFull = MemorySampler.sample() ?? (0, 0)
resetPeakRSS()
let fullSampler = MemorySampler()
let fullTime = try await seconds { try await provider.download() }
let splitFull = fullSampler.stop()
// Before the count below, which fills a reader's page cache.
let rssFull = peakRSSMiB()
let fullMarked = try await upserted()
check(fullMarked == Int64(fullChanged), "full read: \(fullMarked) rows marked upserted, \(fullChanged) changed")
say(String(format: "full re-download, 1 %% changed (%d entities): %.2f s = %.2f× the first open; peak RSS of the client during it %.0f MiB (peak before it %.0f MiB)",
             fullChanged, fullTime, fullTime / openTime, rssFull, rssBeforeFull))
say(String(format: "   of it, sampled every 2 ms: anonymous memory peak %.1f MiB (%.1f before it); mapped files peak %.1f MiB (%.1f before)",
             splitFull.anonymous, Double(splitBeforeFull.anonymous) / 1_048_576, splitFull.file,
             Double(splitBeforeFull.file) / 1_048_576))
if environment["FULL_ONLY"] != nil { finish() }

// 4. A filtered, ordered page, without and with a declared index (best of 5 each).
let pageQuery = "Products?$filter=Quantity gt 2500 and Rating ge 2.5&$orderby=Name desc&$top=50"
func bestPage() async throws -> (Double, [Entity]) {
    var best = Double.infinity
    var page: [Entity] = []
    for _ in 0..<5 {
        let time = try await seconds {
            guard case .collection(let result) = try await provider.read(pageQuery) else { fatalError("not a collection") }
            page = result.entities
        }
        best = min(best, time)
    }
    return (best, page)
}
let (withoutIndex, pageWithout) = try await bestPage()
await provider.close()
parameters.indexes = ["Products": [["Name"]]]
provider = OfflineODataProvider(serviceRoot: root, parameters: parameters, transport: AsyncHTTPClientTransport())
let indexTime = try await seconds { try await provider.open() }
let (withIndex, pageWith) = try await bestPage()
check(pageWith == pageWithout && pageWith.count == 50, "the page with the index differs")
say(String(format: "page `%@`: without an index %.2f ms, with an index on Name %.2f ms (%.0f× faster; reopening built the index in %.2f s)",
             pageQuery, withoutIndex * 1e3, withIndex * 1e3, withoutIndex / withIndex, indexTime))
await provider.close()

// 5. The store against our connection layer and the C API: inserting M rows (5,000 per
//    transaction, keyed, WAL) and the page query on the full table without the index.
let insertCount = min(count, 100_000)
let table = "es_Products"
let columns = ["_type", "_etag", "_editLink", "_localID", "_isLocal", "_pending"]
    + ["ID", "Name", "Description", "Price", "Quantity", "Rating", "Active", "Created", "Code", "CategoryID"]
let quoted = columns.map { "\"\($0)\"" }.joined(separator: ", ")
let storedRows = try await second.read { reader in
    try reader.connection.query("SELECT \(quoted) FROM \"\(table)\" ORDER BY _rowid LIMIT \(insertCount)")
}
// The table as the store makes it, with the indexes an insert pays for (unique key, local IDs).
let createSQL = try await second.read { reader in
    try reader.connection.query(
        "SELECT sql FROM sqlite_master WHERE tbl_name = '\(table)' AND sql IS NOT NULL AND (type = 'table' OR name LIKE '%$key' OR name LIKE '%$localID%')")
}.compactMap { row -> String? in
    if case .text(let sql) = row[0] { return sql }
    return nil
}
second.close()
let pragmas = "PRAGMA cipher_page_size = 4096; PRAGMA cache_size = -32768; PRAGMA foreign_keys = ON; PRAGMA journal_mode = WAL;"
let setup = pragmas + createSQL.map { $0 + ";" }.joined()
let insertSQL = "INSERT INTO \"\(table)\" (\(quoted)) VALUES (\(Array(repeating: "?", count: columns.count).joined(separator: ", ")))"

// The same rows as flat pages, for the store (read before the clock starts).
var pages: [FlatCollection] = []
var next: String? = root.absoluteString + "Products?$top=\(insertCount)"
while let url = next {
    let response = try await AsyncHTTPClientTransport().send(TransportRequest(method: "GET", url: url), timeout: 120)
    guard let rows = try V4JSONReader(model: model).readFlatCollection(response.body, entityType: "Bench.Product") else { fatalError("not flat") }
    pages.append(rows)
    next = rows.nextLink
}
check(pages.reduce(0) { $0 + $1.entityCount } == insertCount, "pages")

var rawTypes: [Int32] = []
var rawInts: [Int64] = []
var rawDoubles: [Double] = []
var rawText: [UInt8] = []
var rawStart: [Int32] = []
var rawLength: [Int32] = []
for row in storedRows {
    for value in row {
        var type: Int32 = 0
        var int: Int64 = 0
        var double = 0.0
        var start: Int32 = 0
        var length: Int32 = 0
        switch value {
        case .integer(let number): type = 1; int = number
        case .real(let number): type = 2; double = number
        case .text(let text):
            type = 3
            start = Int32(rawText.count)
            rawText.append(contentsOf: text.utf8)
            length = Int32(rawText.count) - start
        case .blob(let bytes):
            type = 4
            start = Int32(rawText.count)
            rawText.append(contentsOf: bytes)
            length = Int32(bytes.count)
        case .null: break
        }
        rawTypes.append(type)
        rawInts.append(int)
        rawDoubles.append(double)
        rawStart.append(start)
        rawLength.append(length)
    }
}

var storeTimes: [Double] = []
var layerTimes: [Double] = []
var rawTimes: [Double] = []
// CPU time of the process during each (every thread, user and system): the VM's disk syncs
// make the wall time vary by a third between rounds, the CPU time much less.
var storeCPU: [Double] = [], layerCPU: [Double] = [], rawCPU: [Double] = []
let insertRounds = max(1, environment["INSERT_ROUNDS"].flatMap { Int($0) } ?? 3)
/// The C API's insert of the stored rows into a new file at `path` (`setup` makes it): the
/// seconds it took and the process's CPU time meanwhile.
@MainActor func rawInsertTime(_ rawPath: String, setup: String) -> (wall: Double, cpu: Double) {
    var error = [CChar](repeating: 0, count: 256)
    var cpu = 0.0
    let rawTime = rawTypes.withUnsafeBufferPointer { types in
        rawInts.withUnsafeBufferPointer { ints in
            rawDoubles.withUnsafeBufferPointer { doubles in
                rawText.withUnsafeBufferPointer { text in
                    rawStart.withUnsafeBufferPointer { starts in
                        rawLength.withUnsafeBufferPointer { lengths in
                            text.withMemoryRebound(to: CChar.self) { characters in
                                let rows = raw_rows(
                                    rows: Int32(storedRows.count), columns: Int32(columns.count), types: types.baseAddress,
                                    ints: ints.baseAddress, doubles: doubles.baseAddress, text: characters.baseAddress,
                                    textStart: starts.baseAddress, textLength: lengths.baseAddress)
                                return raw_insert(rawPath, "bench-key", setup, insertSQL, rows, Int32(pageSize), &cpu, &error)
                            }
                        }
                    }
                }
            }
        }
    }
    check(rawTime >= 0, "raw insert: \(cMessage(error))")
    return (rawTime, cpu)
}
for attempt in 1...insertRounds {
    let storePath = directory.appendingPathComponent("insert-store-\(attempt).sqlite").path
    let layerPath = directory.appendingPathComponent("insert-layer-\(attempt).sqlite").path
    let rawPath = directory.appendingPathComponent("insert-raw-\(attempt).sqlite").path
    func storePhase() async throws {
        let target = try await Store.create(path: storePath, model: model, key: "bench-key", deferringLookupIndexes: true)
        let start = DispatchTime.now().uptimeNanoseconds, cpu = cpuSeconds()
        for page in pages { try await target.write { writer in try writer.bulkInsert(page, into: "Products") } }
        storeTimes.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
        storeCPU.append(cpuSeconds() - cpu)
        if attempt == 1, environment["INSERT_DETAILS"] != nil {
            for row in try await target.read({ reader in try reader.connection.query("SELECT type, name, sql FROM sqlite_master") }) {
                say("store schema: \(row)")
            }
            say("C schema: \(setup)")
        }
        target.close()
    }
    func layerPhase() throws {
        let connection = try Connection(path: layerPath, options: Connection.Options(key: "bench-key"))
        for statement in createSQL { try connection.execute(statement) }
        let start = DispatchTime.now().uptimeNanoseconds, cpu = cpuSeconds()
        for first in stride(from: 0, to: storedRows.count, by: pageSize) {
            try connection.transaction {
                for row in storedRows[first..<min(first + pageSize, storedRows.count)] { _ = try connection.execute(insertSQL, row) }
            }
        }
        layerTimes.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
        layerCPU.append(cpuSeconds() - cpu)
        connection.close()
    }
    func rawPhase() {
        let (wall, cpu) = rawInsertTime(rawPath, setup: setup)
        rawTimes.append(wall)
        rawCPU.append(cpu)
    }
    // Each round runs the three in another order, each after the file writes before it have
    // reached the disk (`sync`): the one after a closing checkpoint would otherwise wait for them.
    for phase in 0..<3 {
        sync()
        let before = processIO()
        switch (attempt + phase) % 3 {
        case 0: try await storePhase()
        case 1: try layerPhase()
        default: rawPhase()
        }
        if environment["INSERT_DETAILS"] != nil {
            let after = processIO()
            let name = ["store", "layer", "C API"][(attempt + phase) % 3]
            say("\(name): " + after.keys.sorted().map { "\($0) +\((after[$0] ?? 0) - (before[$0] ?? 0))" }.joined(separator: ", "))
        }
    }
    if attempt == 1, environment["INSERT_DETAILS"] != nil {
        for path in [storePath, layerPath, rawPath] {
            let sizes = [path, path + "-wal"].map { (try? FileManager.default.attributesOfItem(atPath: $0)[.size] as? Int) ?? -1 }
            say("\(path): \(sizes[0]) bytes, log \(sizes[1]) bytes")
        }
    }
}
if environment["INSERT_DETAILS"] != nil {
    for (name, times) in [("store", storeTimes), ("layer", layerTimes), ("C API", rawTimes)] {
        say("\(name) rounds: " + times.map { String(format: "%.3f", $0) }.joined(separator: " "))
    }
}
func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}
let storeInsert = storeTimes.min() ?? 0, layerInsert = layerTimes.min() ?? 0, rawInsert = rawTimes.min() ?? 0
say(String(format: "insert of %d rows, keyed, %d per transaction (best of %d): store %.3f s, connection layer %.3f s, C API %.3f s; speed store ÷ C API %.2f, store ÷ connection layer %.2f",
             insertCount, pageSize, insertRounds, storeInsert, layerInsert, rawInsert, rawInsert / storeInsert, layerInsert / storeInsert))
// Each round's three runs are close in time: the median of each round's own ratio follows the
// VM's changes of speed less than ratios of times from different rounds do.
let pairedWall = median(zip(rawTimes, storeTimes).map { $0 / $1 }), pairedCPU = median(zip(rawCPU, storeCPU).map { $0 / $1 })
say(String(format: "insert, medians of %d rounds: wall time store %.3f s, C API %.3f s; CPU time store %.3f s, layer %.3f s, C API %.3f s; median of the rounds' speed store ÷ C API: wall time %.2f, CPU time %.2f",
             insertRounds, median(storeTimes), median(rawTimes), median(storeCPU), median(layerCPU), median(rawCPU), pairedWall, pairedCPU))

for size in pageSizes {
    let sized = setup.replacingOccurrences(of: "cipher_page_size = 4096", with: "cipher_page_size = \(size)")
    var times: [Double] = []
    for round in 0..<insertRounds {
        let path = directory.appendingPathComponent("insert-raw-\(size)-\(round).sqlite").path
        sync()
        times.append(rawInsertTime(path, setup: sized).wall)
    }
    say(String(format: "insert of %d rows through the C API with %d-byte pages: median %.3f s = %.2f× the time "
                     + "with 4,096 bytes (median %.3f s)", insertCount, size, median(times), median(times) / median(rawTimes), median(rawTimes)))
}

// The page query without an index, on the offline store's full table: the store's answer
// (entities) against the same SQL stepped through in C.
let pageSQL = "SELECT \(quoted) FROM \"\(table)\" t0 WHERE t0.\"Quantity\" > 2500 AND t0.\"Rating\" >= 2.5 ORDER BY t0.\"Name\" DESC, t0.\"ID\" ASC LIMIT 50"
let plain = try await Store.open(path: parameters.storeFile, key: parameters.storeEncryptionKey, indexes: [])
var storeQuery = Double.infinity
for _ in 0..<5 {
    storeQuery = min(storeQuery, try await seconds {
        guard case .collection(let page) = try await plain.query(pageQuery) else { fatalError("not a collection") }
        check(page.entities.count == 50, "store page")
    })
}
plain.close()
var rawRows: Int32 = 0
var queryError = [CChar](repeating: 0, count: 256)
let rawQuery = raw_query(parameters.storeFile, "bench-key", pragmas, pageSQL, 5, &rawRows, &queryError)
check(rawQuery >= 0 && rawRows == 50, "raw query: \(String(decoding: queryError.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))")
say(String(format: "page query on %d rows without an index (best of 5): store %.1f ms, C API %.1f ms; store ÷ C API time %.2f×",
             count, storeQuery * 1e3, rawQuery * 1e3, storeQuery / rawQuery))
backendStore.close()
