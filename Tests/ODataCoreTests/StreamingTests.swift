import Foundation
import Testing
@testable import ODataCore

@Suite struct StreamingTests {
    /// Streams a body in chunks of `size` bytes and collects the items.
    static func stream(_ bytes: [UInt8], chunk size: Int, reader: V4JSONReader = V4JSONReader(), type: String? = nil) async throws -> (EntityCollection, [CollectionItem]) {
        let chunks = stride(from: 0, to: bytes.count, by: size).map { Array(bytes[$0..<min($0 + size, bytes.count)]) }
        let source = AsyncStream<[UInt8]> { continuation in
            for chunk in chunks { continuation.yield(chunk) }
            continuation.finish()
        }
        var collection = EntityCollection()
        var items: [CollectionItem] = []
        for try await item in CollectionItemSequence(chunks: source, reader: reader, entityType: type) {
            items.append(item)
            switch item {
            case .entity(let e): collection.entities.append(e)
            case .deleted(let d): collection.deleted.append(d)
            case .addedLink(let l): collection.addedLinks.append(l)
            case .removedLink(let l): collection.removedLinks.append(l)
            case .reference(let r): collection.references.append(r)
            case .end(let header):
                collection.context = header.context
                collection.count = header.count
                collection.nextLink = header.nextLink
                collection.deltaLink = header.deltaLink
                collection.annotations = header.annotations
            }
        }
        return (collection, items)
    }

    @Test func streamingEqualsWholeReadsForEveryCollectionFile() async throws {
        var checked = 0
        for file in PayloadConformanceTests.v4Files {
            let bytes = Array(try Data(contentsOf: file))
            guard (try? PayloadConformanceTests.classify(bytes)) == "collection" else { continue }
            let whole = try V4JSONReader().readCollection(bytes)
            for size in [1, 7, 4096] {
                let (streamed, items) = try await Self.stream(bytes, chunk: size)
                #expect(streamed == whole, "\(file.lastPathComponent) in chunks of \(size)")
                if case .end? = items.last {} else { Issue.record("the last item must be .end") }
            }
            checked += 1
        }
        #expect(checked > 10)
    }

    @Test func deltaItemsStream() async throws {
        let body = #"""
        {"@odata.context":"$metadata#Customers/$delta","value":[
          {"@odata.id":"Customers('A')","Name":"x"},
          {"@odata.context":"$metadata#Customers/$deletedEntity","id":"Customers('B')","reason":"deleted"},
          {"@removed":{"reason":"changed"},"@id":"Customers('C')"},
          {"@odata.context":"$metadata#Customers/$link","source":"Customers('A')","relationship":"Orders","target":"Orders(1)"}
        ],"@odata.deltaLink":"Customers?$deltatoken=7"}
        """#
        let (collection, _) = try await Self.stream(Array(body.utf8), chunk: 5)
        #expect(collection.entities.count == 1)
        #expect(collection.deleted.map(\.id) == ["Customers('B')", "Customers('C')"])
        #expect(collection.deleted.map(\.reason) == ["deleted", "changed"])
        #expect(collection.addedLinks.first?.relationship == "Orders")
        #expect(collection.deltaLink == "Customers?$deltatoken=7")
    }

    @Test func truncatedAndBrokenStreamsNameThePlace() async throws {
        let body = Array(#"{"value":[{"A":1},{"A":2},{"A":"#.utf8)
        do {
            _ = try await Self.stream(body, chunk: 3)
            Issue.record("a truncated stream must fail")
        } catch let error as PayloadError {
            #expect(error.message.contains("ended early"))
            #expect(error.path == "value[2]")
        }
        let wrong = Array(#"{"value":[{"A":1},{"A":}]}"#.utf8)
        do {
            _ = try await Self.stream(wrong, chunk: 4)
            Issue.record("broken JSON must fail")
        } catch let error as PayloadError {
            #expect(error.path.hasPrefix("value[1]"))
            #expect(error.offset > 10)
        }
    }

    @Test func memoryDoesNotGrowWithThePayload() throws {
        // 20,000 entities through the parser in 64 KiB chunks: the parser's buffer stays small.
        var parser = CollectionStreamParser()
        var entities = 0
        let entity = Array(#"{"ID":123456,"Name":"A fairly ordinary name","Price":12.50,"When":"2020-01-01T00:00:00Z"},"#.utf8)
        var chunk = Array(#"{"value":["#.utf8)
        var maxBuffer = 0
        for index in 0..<20_000 {
            chunk += index == 19_999 ? Array(entity.dropLast()) + Array("]}".utf8) : entity
            if chunk.count >= 65_536 || index == 19_999 {
                entities += try parser.feed(chunk).count
                maxBuffer = max(maxBuffer, parser.bufferedByteCount)
                chunk = []
            }
        }
        _ = try parser.finish()
        #expect(entities == 20_000)
        #expect(maxBuffer < 3 * 65_536)
    }
}

@Suite struct NumberParsingTests {
    @Test func fastDoubleMatchesFoundation() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let integer = Int.random(in: -999_999...999_999, using: &generator)
            let fraction = Int.random(in: 0...99_999_999, using: &generator)
            let text = "\(integer).\(String(fraction))"
            let bytes = Array(text.utf8)
            if let fast = V4JSONReader.fastDouble(bytes, 0..<bytes.count) {
                #expect(fast == Double(text), "\(text)")
            }
        }
        for text in ["0", "-0.5", "1e5", "123456789012345678", "0.000001", "12.50"] {
            let bytes = Array(text.utf8)
            let value = V4JSONReader.number(bytes, 0..<bytes.count, as: .double)
            #expect(value == .double(Double(text) ?? .nan), "\(text)")
        }
    }
}
