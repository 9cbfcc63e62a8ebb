import Foundation
import Testing
import ODataCore
@testable import ODataStore

/// The page caches of a store's connections (32 MiB each with a key) are freed on request
/// (an app's memory warning), and fill again as reads need.
@Suite struct StoreMemoryTests {
    @Test func releasingMemoryEmptiesEveryCacheAndReadsGoOn() async throws {
        let dir = TemporaryDirectory()
        let model = try MetadataParser().parse(RowPathTests.metadata)
        let store = try await Store.create(path: dir.path("memory.sqlite"), model: model, key: "memory-key")
        defer { store.close() }
        let padding = String(repeating: "x", count: 200)
        for first in stride(from: 1, through: 20_000, by: 5_000) {
            let items = (first..<first + 5_000).map { id in
                Entity(typeName: "F.Item", properties: [
                    NamedValue(name: "ID", value: .primitive(.int32(Int32(id)))),
                    NamedValue(name: "Name", value: .primitive(.string("item \(id) \(padding)"))),
                ])
            }
            try await store.write { writer in try writer.bulkInsert(items, into: "Items") }
        }
        let table = StoreSchema.quote(store.schema.table(forEntitySet: "Items")?.name ?? "")
        let scan = "SELECT count(*), sum(length(Name)) FROM \(table)"
        // Each read goes to the next reader: every one scans the table into its cache.
        var answers: [[[DatabaseValue]]] = []
        for _ in 0..<4 { answers.append(try await store.read { reader in try reader.connection.query(scan) }) }
        #expect(answers[0].first?.first == .integer(20_000))
        #expect(answers.allSatisfy { $0 == answers[0] })
        let full = await store.pageCacheBytes()
        // 20,000 rows of more than 200 bytes: over 4 MiB of pages, in each reader's cache.
        #expect(full > 8 * 1_048_576, "\(full)")
        await store.releaseMemory()
        let released = await store.pageCacheBytes()
        #expect(released < full / 20, "\(released) of \(full)")
        // Reads and writes go on, with the same answers.
        #expect(try await store.read { reader in try reader.connection.query(scan) } == answers[0])
        try await store.write { writer in
            try writer.bulkInsert(
                [Entity(typeName: "F.Item", properties: [NamedValue(name: "ID", value: .primitive(.int32(0)))])],
                into: "Items")
        }
        #expect(try await store.read { reader in try reader.connection.query("SELECT count(*) FROM \(table)") }
            == [[.integer(20_001)]])
        #expect(await store.pageCacheBytes() > released)
    }
}
