import Foundation
import ODataCore
import ODataStore

// Issue 19, defect 2: parse, bind, compile and answer a filter with a 10,000-term chain in
// linear time. Prints each chain's time and its ratio to 100 chains of 100 terms (the same
// number of terms): a ratio near 1 is linear; the old quadratic `and` chain took minutes.
//
//   swift run -c release ChainRatio

let csdl = """
    <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="B">
      <EntityType Name="Item"><Key><PropertyRef Name="ID"/></Key>
        <Property Name="ID" Type="Edm.Int32" Nullable="false"/><Property Name="Price" Type="Edm.Decimal" Scale="2"/>
        <Property Name="Name" Type="Edm.String"/></EntityType>
      <EntityContainer Name="C"><EntitySet Name="Items" EntityType="B.Item"/></EntityContainer>
    </Schema></edmx:DataServices></edmx:Edmx>
    """

func seconds(_ body: () async throws -> Void) async rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try await body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

let path = FileManager.default.temporaryDirectory.appendingPathComponent("chain-\(UUID().uuidString).sqlite").path
defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
let store = try await Store.create(path: path, model: try MetadataParser().parse(csdl))
try await store.write { writer in
    for id in 0..<1000 {
        var item = Entity(typeName: "B.Item")
        item["ID"] = .primitive(.int32(Int32(id)))
        item["Price"] = .primitive(.decimal(DecimalValue(Int64(id))))
        item["Name"] = .primitive(.string("item \(id)"))
        try writer.insert(item, into: "Items")
    }
}

let chains: [(String, (Int) -> String)] = [
    ("and", { n in (0..<n).map { "Price eq \($0)" }.joined(separator: " and ") }),
    ("or", { n in (0..<n).map { "ID eq \($0)" }.joined(separator: " or ") }),
    ("add", { n in "Price" + String(repeating: " add 1", count: n) + " gt 0" }),
    ("in", { n in "ID in (" + (0..<n).map(String.init).joined(separator: ",") + ")" }),
]
print("chain  terms   one chain (s)   100 × 100 terms (s)   ratio")
var worst = 0.0
for (name, build) in chains {
    let long = "Items/$count?$filter=" + build(10_000)
    let short = "Items/$count?$filter=" + build(100)
    _ = try? await store.query(short)
    var answer = ""
    let longTime = try await seconds {
        do {
            answer = "\(try await store.query(long))"
        } catch {
            answer = "refused: \(error)"
        }
    }
    let shortTime = try await seconds {
        for _ in 0..<100 { _ = try? await store.query(short) }
    }
    let filter = build(10_000)
    let model = try MetadataParser().parse(csdl)
    var parsed: ParsedURL?
    let parseTime = try await seconds { parsed = try? URLParser(version: .v401).parse("Items?$filter=" + filter) }
    let bindTime = try await seconds {
        if let parsed { _ = try? RequestBinder(model: model).bind(parsed, input: "Items?$filter=" + filter) }
    }
    print("  \(name): parse \(String(format: "%.4f", parseTime)) s, bind \(String(format: "%.4f", bindTime)) s")
    let ratio = longTime / shortTime
    worst = max(worst, longTime)
    print("\(name.padding(toLength: 6, withPad: " ", startingAt: 0)) 10000   \(String(format: "%.4f", longTime))          "
          + "\(String(format: "%.4f", shortTime))              \(String(format: "%.2f", ratio))   (\(answer.prefix(60)))")
}
print("slowest 10,000-term chain: \(String(format: "%.3f", worst)) s")
store.close()
