import Foundation
import ODataCore
import ODataStore
import PayloadFixtures

// Store benchmarks, each beside hand-written SQL in the same process:
// 1. bulk insert of N entities (10 properties) vs prepared-statement inserts of the same rows;
// 2. a filtered, ordered 50-row page vs the same hand-written SELECT;
// 3. $expand of a 1:n navigation for a 50-entity page.
// Usage: StoreRatio [N] [key]

let arguments = CommandLine.arguments
let count = arguments.count > 1 ? Int(arguments[1]) ?? 1_000_000 : 1_000_000
let key: String? = arguments.count > 2 ? arguments[2] : nil
let chunk = 10_000

let metadata = ProductModel.metadata
func product(_ i: Int) -> Entity { ProductModel.product(i) }

func seconds(_ body: () async throws -> Void) async rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try await body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

let directory = FileManager.default.temporaryDirectory.appendingPathComponent("store-bench-\(UUID().uuidString)")
try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: directory) }
let model = try MetadataParser().parse(metadata)
print("rows: \(count), \(key == nil ? "unkeyed" : "keyed") store")

// 1. Bulk insert.
let store = try await Store.create(path: directory.appendingPathComponent("store.sqlite").path, model: model, key: key)
let storeInsert = try await seconds {
    try await store.write { writer in
        var categories: [Entity] = []
        for c in 0..<100 {
            var category = Entity()
            category["ID"] = .primitive(.int32(Int32(c)))
            category["Name"] = .primitive(.string("Category \(c)"))
            categories.append(category)
        }
        try writer.bulkInsert(categories, into: "Categories")
        var start = 0
        while start < count {
            let batch = (start..<min(start + chunk, count)).map(product)
            try writer.bulkInsert(batch, into: "Products")
            start += chunk
        }
    }
}

var options = Connection.Options(key: key)
options.walMode = true
let baseline = try Connection(path: directory.appendingPathComponent("baseline.sqlite").path, options: options)
try baseline.execute("""
    CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, description TEXT, price BLOB, quantity INTEGER, rating REAL,
    active INTEGER, created TEXT, code TEXT, category_id INTEGER)
    """)
try baseline.execute("CREATE INDEX products_category ON products (category_id)")
try baseline.execute("CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT)")
let baselineInsert = try await seconds {
    try baseline.transaction {
        for c in 0..<100 { try baseline.execute("INSERT INTO categories (id, name) VALUES (?, ?)", [.integer(Int64(c)), .text("Category \(c)")]) }
        var start = 0
        while start < count {
            for entity in (start..<min(start + chunk, count)).map(product) {
                let values: [DatabaseValue] = ["ID", "Name", "Description", "Price", "Quantity", "Rating", "Active", "Created", "Code", "CategoryID"].map { name in
                    guard case .primitive(let p)? = entity[name] else { return .null }
                    return ValueStorage.encode(p)
                }
                try baseline.execute("INSERT INTO products (id, name, description, price, quantity, rating, active, created, code, category_id) VALUES (?,?,?,?,?,?,?,?,?,?)", values)
            }
            start += chunk
        }
    }
}
let storedCount = try await store.query("Products/$count")
guard storedCount == .count(Int64(count)), try baseline.query("SELECT count(*) FROM products") == [[.integer(Int64(count))]] else {
    print("FAILED: row counts differ")
    exit(1)
}
print(String(format: "1. bulk insert: store %.0f rows/s (%.2f s), hand-written %.0f rows/s (%.2f s), ratio %.2f (goal >= 0.70)",
             Double(count) / storeInsert, storeInsert, Double(count) / baselineInsert, baselineInsert, baselineInsert / storeInsert))

// 2. A filtered, ordered 50-row page.
let url = "Products?$filter=Quantity gt 2500 and Rating ge 2.5&$orderby=Name desc&$top=50"
let handSQL = "SELECT id, name, description, price, quantity, rating, active, created, code, category_id FROM products WHERE quantity > ? AND rating >= ? ORDER BY name DESC, id LIMIT 50"
var storeBest = Double.infinity
var handBest = Double.infinity
var storeIDs: [Int64] = []
var handIDs: [Int64] = []
for _ in 0..<10 {
    storeBest = min(storeBest, try await seconds {
        guard case .collection(let page) = try await store.query(url) else { fatalError("not a collection") }
        storeIDs = page.entities.compactMap { if case .primitive(.int64(let id))? = $0["ID"] { return id }; return nil }
    })
    handBest = min(handBest, try await seconds {
        let rows = try baseline.query(handSQL, [.integer(2500), .real(2.5)])
        handIDs = rows.compactMap { row in
            // Decode like the store does, so both produce typed values.
            _ = try? ValueStorage.decode(row[3], as: .decimal)
            _ = try? ValueStorage.decode(row[7], as: .dateTimeOffset)
            if case .integer(let id) = row[0] { return id }
            return nil
        }
    })
}
guard storeIDs == handIDs, storeIDs.count == 50 else {
    print("FAILED: the page differs: \(storeIDs.prefix(5)) vs \(handIDs.prefix(5))")
    exit(1)
}
print(String(format: "2. 50-row page: store %.2f ms, hand-written %.2f ms, ratio %.2fx (goal <= 1.25x)", storeBest * 1000, handBest * 1000, storeBest / handBest))

// 3. $expand of 1:n for a 50-entity page (Categories have ~count/100 products each, so expand a filtered page).
let expandURL = "Categories?$top=50&$expand=Products($filter=Quantity lt 50;$orderby=ID)"
var expandBest = Double.infinity
var expanded = 0
for _ in 0..<5 {
    expandBest = min(expandBest, try await seconds {
        guard case .collection(let page) = try await store.query(expandURL) else { fatalError("not a collection") }
        expanded = page.entities.reduce(0) { total, entity in
            if case .collection(let inner)? = entity.navigation("Products")?.inline { return total + inner.entities.count }
            return total
        }
    })
}
let handExpand = try await seconds {
    _ = try baseline.query("SELECT id FROM categories ORDER BY id LIMIT 50")
    _ = try baseline.query("SELECT p.* FROM products p WHERE p.category_id < 50 AND p.quantity < 50 ORDER BY p.category_id, p.id")
}
print(String(format: "3. $expand 1:n for 50 categories: store %.2f ms for %d expanded products (hand-written two queries %.2f ms)", expandBest * 1000, expanded, handExpand * 1000))
store.close()
