import Foundation
import ODataCore
import PayloadFixtures

// Reads the 100,000-entity collection with ODataCore's typed reader and, in the same process,
// with Foundation's JSONSerialization (untyped), and prints entities per second and the
// ratio. `stream` mode reports peak memory while streaming the same payload in chunks.

func peakResidentKiB() -> Int {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Int(usage.ru_maxrss)
}

func currentResidentKiB() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
    }
    return 0
}

func seconds(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

let arguments = CommandLine.arguments
let count = arguments.count > 2 ? Int(arguments[2]) ?? 100_000 : 100_000
let model = try Fixtures.model()
let reader = V4JSONReader(model: model)

if arguments.count > 1 && arguments[1] == "stream" {
    let before = peakResidentKiB()
    // The cost of producing the chunks alone, to subtract from the streaming time.
    let generation = await {
        let start = DispatchTime.now().uptimeNanoseconds
        var total = 0
        for await chunk in Fixtures.chunks(count: count) { total += chunk.count }
        precondition(total > 0)
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }()
    var entities = 0
    var checksum: Int64 = 0
    let elapsed = try await {
        let start = DispatchTime.now().uptimeNanoseconds
        for try await item in CollectionItemSequence(chunks: Fixtures.chunks(count: count), reader: reader, entityType: "Bench.Product") {
            if case .entity(let entity) = item {
                entities += 1
                if case .primitive(.int64(let id))? = entity["ID"] { checksum &+= id }
            }
        }
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }()
    let expected = Int64(count) * Int64(count - 1) / 2
    guard entities == count, checksum == expected else {
        print("FAILED: streamed \(entities) entities, checksum \(checksum), expected \(expected)")
        exit(1)
    }
    print("stream: \(count) entities in \(String(format: "%.2f", elapsed)) s (of which producing the chunks: \(String(format: "%.2f", generation)) s), peak RSS \(peakResidentKiB() / 1024) MiB (before: \(before / 1024) MiB)")
    exit(0)
}

if arguments.count > 1 && arguments[1] == "streamasync" {
    let payload = Fixtures.payload(count: count)
    let slices = stride(from: 0, to: payload.count, by: 65_536).map { Array(payload[$0..<min($0 + 65_536, payload.count)]) }
    let source = AsyncStream<[UInt8]> { continuation in
        for slice in slices { continuation.yield(slice) }
        continuation.finish()
    }
    let start = DispatchTime.now().uptimeNanoseconds
    var entities = 0
    for try await item in CollectionItemSequence(chunks: source, reader: reader, entityType: "Bench.Product") {
        if case .entity = item { entities += 1 }
    }
    print("streamasync: \(entities) in \(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9) s")
    exit(0)
}

if arguments.count > 1 && arguments[1] == "streamsync" {
    let payload = Fixtures.payload(count: count)
    let start = DispatchTime.now().uptimeNanoseconds
    var parser = CollectionStreamParser(reader: reader, entityType: "Bench.Product")
    var entities = 0
    var offset = 0
    while offset < payload.count {
        let end = min(offset + 65_536, payload.count)
        entities += try parser.feed(payload[offset..<end]).count
        offset = end
    }
    _ = try parser.finish()
    print("streamsync: \(entities) in \(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9) s")
    exit(0)
}

let bytes = Fixtures.payload(count: count)
let data = Data(bytes)
print("payload: \(count) entities, \(String(format: "%.1f", Double(bytes.count) / 1_048_576)) MiB")

var foundationBest = Double.infinity
var odataBest = Double.infinity
for round in 0..<5 {
    let foundation = try seconds {
        let object = try JSONSerialization.jsonObject(with: data)
        guard let root = object as? [String: Any], let value = root["value"] as? [Any], value.count == count else {
            fatalError("Foundation read the wrong shape")
        }
    }
    let odata = try seconds {
        let collection = try reader.readCollection(bytes, entityType: "Bench.Product")
        // Check the result: count, and typed values of the last entity.
        guard collection.entities.count == count, collection.nextLink == "Products?$skiptoken=end",
              case .primitive(.int64(let id))? = collection.entities.last?["ID"], id == Int64(count - 1),
              case .primitive(.dateTimeOffset)? = collection.entities.last?["Created"],
              case .primitive(.decimal)? = collection.entities.last?["Price"] else {
            fatalError("ODataCore read the wrong result")
        }
    }
    foundationBest = min(foundationBest, foundation)
    odataBest = min(odataBest, odata)
    print(String(format: "round %d: Foundation %.3f s, ODataCore %.3f s", round + 1, foundation, odata))
}
let mib = Double(bytes.count) / 1_048_576
print(String(format: "Foundation JSONSerialization (untyped): %.0f entities/s, %.1f MiB/s", Double(count) / foundationBest, mib / foundationBest))
print(String(format: "ODataCore V4JSONReader (typed):         %.0f entities/s, %.1f MiB/s", Double(count) / odataBest, mib / odataBest))
print(String(format: "ratio (ODataCore / Foundation): %.2fx", foundationBest / odataBest))
