import Foundation
import ODataCore
import ODataServer
import ODataStore
import OfflineOData

// The typed API against the untyped one it is built on, in the same process, offline:
// 1. `DataService.fetch` of N Products into the generated struct (built by the ODataGenerator
//    plugin from Sales.metadata.xml in this folder) against `provider.read` of the same URL;
// 2. live queries: a local write with A observations of the written set and U of another set;
//    the re-reads it causes (counted by the results and by timing against plain reads).
// Usage: TypedRatio [N] [rounds] [observers]

let arguments = CommandLine.arguments
let count = arguments.count > 1 ? Int(arguments[1]) ?? 1000 : 1000
let rounds = arguments.count > 2 ? Int(arguments[2]) ?? 30 : 30
let observers = arguments.count > 3 ? Int(arguments[3]) ?? 10 : 10

func seconds(_ body: () async throws -> Void) async rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try await body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted[sorted.count / 2]
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("TypedRatio: \(message)\n".utf8))
    exit(1)
}

let folder = FileManager.default.temporaryDirectory.appendingPathComponent("typed-ratio-\(UUID().uuidString.prefix(8))")
try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: folder) }
// The sample has max(20, min(2000, 2 × scale)) products.
let server = try await EmbeddedServer.sales(
    at: folder.appendingPathComponent("backend.sqlite").path, scale: max(10, count / 2))
var parameters = OfflineODataParameters()
parameters.storePath = folder
parameters.storeEncryptionKey = "typed-ratio"
let provider = OfflineODataProvider(serviceRoot: server.v4Root, parameters: parameters)
try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "Products", query: "Products"))
try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners"))
try await provider.open()
let service = try await DataService(provider)

// 1. Typed fetch against untyped read of the same URL.
let query = SalesService.products.query.orderBy(\.productID).top(count)
let url = try service.url(of: query)
var untyped: [Double] = []
var typed: [Double] = []
var decodeOnly: [Double] = []
for round in 0..<(rounds + 3) {
    var entities: [Entity] = []
    let u = try await seconds {
        guard case .collection(let collection) = try await provider.read(url) else { fail("not a collection") }
        entities = collection.entities
    }
    var products: [Product] = []
    let t = try await seconds { products = try await service.fetch(query) }
    let d = try await seconds { products = try entities.map { try Product(entity: $0) } }
    // Check the answers: the same count and the same values.
    guard products.count == count, entities.count == count else { fail("expected \(count), got \(products.count)") }
    guard case .primitive(.string(let firstID))? = entities[0]["ProductID"], products[0].productID == firstID,
        case .primitive(.decimal(let price))? = entities[count - 1]["Price"], products[count - 1].price == price
    else { fail("typed and untyped values differ") }
    if round >= 3 {  // warm-up rounds are not counted
        untyped.append(u)
        typed.append(t)
        decodeOnly.append(d)
    }
}
let ratio = median(typed) / median(untyped)
print(
    String(
        format: "typed fetch of %d Products: %.2f ms; untyped read %.2f ms; ratio %.2f× (median of %d)",
        count, median(typed) * 1000, median(untyped) * 1000, ratio, rounds))
print(
    String(
        format: "  of which reading the entities into the generated struct: %.2f ms (%.0f ns per entity)",
        median(decodeOnly) * 1000, median(decodeOnly) / Double(count) * 1e9))

// 2. Live queries: one write, `observers` observations of the written set, as many of another.
final class Counts: @unchecked Sendable {
    // The lock guards the counters.
    private let lock = NSLock()
    private var affected = 0
    private var unrelated = 0
    func add(affected isAffected: Bool) { lock.withLock { if isAffected { affected += 1 } else { unrelated += 1 } } }
    var values: (Int, Int) { lock.withLock { (affected, unrelated) } }
}
// Baseline: the same writes with no observation.
var plainWrites: [Double] = []
for round in 0..<5 {
    plainWrites.append(
        try await seconds {
            for index in 0..<observers {
                _ = try await provider.execute(
                    method: "PATCH", url: "Products('P\(index)')",
                    body: Array(#"{"Description":"plain \#(round)"}"#.utf8))
            }
        } / Double(observers))
}
let counts = Counts()
var tasks: [Task<Void, Never>] = []
for index in 0..<observers {
    let productQuery = SalesService.products.query.filter { $0.productID == "P\(index)" }
    tasks.append(
        Task { do { for try await _ in service.observe(productQuery) { counts.add(affected: true) } } catch {} })
    let partnerQuery = SalesService.businessPartners.query.filter { $0.partnerID == "BP\(index)" }
    tasks.append(
        Task { do { for try await _ in service.observe(partnerQuery) { counts.add(affected: false) } } catch {} })
}
func waitFor(_ condition: @Sendable () -> Bool) async throws {
    for _ in 0..<10000 where !condition() { try await Task.sleep(for: .milliseconds(1)) }
    guard condition() else { fail("observations did not deliver") }
}
try await waitFor { counts.values == (observers, observers) }
let writes = 20
var writeTimes: [Double] = []
for round in 0..<writes {
    let before = counts.values
    let elapsed = try await seconds {
        // Changes every observed product: each affected observation re-reads once and yields.
        for index in 0..<observers {
            _ = try await provider.execute(
                method: "PATCH", url: "Products('P\(index)')", body: Array(#"{"Description":"round \#(round)"}"#.utf8))
        }
        try await waitFor { counts.values.0 >= before.0 + observers }
    }
    writeTimes.append(elapsed / Double(observers))
}
try await Task.sleep(for: .milliseconds(200))
let (affected, unrelated) = counts.values
let plainRead =
    try await seconds {
        for index in 0..<observers {
            _ = try await service.fetch(SalesService.products.query.filter { $0.productID == "P\(index)" })
        }
    } / Double(observers)
print(
    "live queries: \(observers) on Products, \(observers) on BusinessPartners; \(writes * observers) writes to observed products"
)
print(
    "  results after the first: Products \(affected - observers) (one per write), BusinessPartners \(unrelated - observers)"
)
print(
    String(
        format: "  per write: %.2f ms with its observation's re-read and delivery; %.2f ms with no observation;"
            + " a plain typed read of one product %.2f ms", median(writeTimes) * 1000, median(plainWrites) * 1000,
        plainRead * 1000))
print("  subscriptions alive: \(await provider.activeChangeSubscriptions)")
for task in tasks { task.cancel() }
for task in tasks { await task.value }
for _ in 0..<200 where await provider.activeChangeSubscriptions > 0 { try await Task.sleep(for: .milliseconds(5)) }
print("  after cancelling them: \(await provider.activeChangeSubscriptions)")
await provider.close()
await server.stop()
if ratio > 1.3 { print("over the 1.3× budget") }
