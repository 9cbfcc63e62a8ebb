/// One item of a streamed collection response.
public enum CollectionItem: Sendable, Hashable {
    case entity(Entity)
    case deleted(DeletedEntity)
    case addedLink(DeltaLinkChange)
    case removedLink(DeltaLinkChange)
    case reference(String)
    /// The last item: the collection's own information (context, count, next and delta
    /// links, annotations) with no entities.
    case end(EntityCollection)
}

/// Splits a V4 JSON collection response into items as its bytes arrive, so that a download
/// can store entity by entity. Memory holds one element and one chunk, not the payload.
public struct CollectionStreamParser: Sendable {
    private let reader: V4JSONReader
    private let entityType: String?
    private var buffer: [UInt8] = []
    /// Absolute offset of `buffer[0]` in the whole body (for error positions).
    private var bufferOffset = 0
    private var position = 0
    private var state: State = .root
    private var itemStart = 0
    private var depth = 0
    private var inString = false
    private var escaped = false
    private var memberName: [UInt8] = []
    private var elementIndex = 0
    private var header = EntityCollection()
    private var sawValue = false
    /// Type tables, kept across elements.
    private var context: V4JSONReader.Context

    private enum State: Sendable {
        case root, memberNameStart, memberName, colon, memberValue, elementStart, element, afterElement
        case otherValue, afterMember, done
    }

    /// Creates a value from its parts.
    public init(reader: V4JSONReader = V4JSONReader(), entityType: String? = nil) {
        self.reader = reader
        self.entityType = entityType
        self.context = V4JSONReader.Context(model: reader.model)
    }

    /// Bytes held for items not yet complete (for memory checks).
    public var bufferedByteCount: Int { buffer.count }

    private func fail(_ message: String, at index: Int? = nil) -> PayloadError {
        PayloadError(.malformedJSON, message, offset: bufferOffset + (index ?? position), path: sawValue ? "value[\(elementIndex)]" : "")
    }

    @inline(__always) private static func isSpace(_ c: UInt8) -> Bool { c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 }

    /// Consumes the next chunk of the body and returns the items it completed.
    public mutating func feed(_ chunk: some Sequence<UInt8>) throws(PayloadError) -> [CollectionItem] {
        // Contiguous chunks (arrays, Data, ByteBuffer views) are copied in one go.
        if chunk.withContiguousStorageIfAvailable({ buffer.append(contentsOf: $0) }) == nil {
            buffer.append(contentsOf: chunk)
        }
        var items: [CollectionItem] = []
        while position < buffer.count {
            let c = buffer[position]
            switch state {
            case .root:
                if Self.isSpace(c) || c == 0xEF || c == 0xBB || c == 0xBF { position += 1; continue }
                guard c == UInt8(ascii: "{") else { throw fail("A collection response must be a JSON object") }
                position += 1
                state = .memberNameStart
            case .memberNameStart:
                if Self.isSpace(c) || c == UInt8(ascii: ",") { position += 1; continue }
                if c == UInt8(ascii: "}") {
                    position += 1
                    state = .done
                    continue
                }
                guard c == 0x22 else { throw fail("Expected a member name") }
                memberName = []
                position += 1
                escaped = false
                state = .memberName
            case .memberName:
                position += 1
                if escaped {
                    escaped = false
                    memberName.append(c)
                } else if c == 0x5C {
                    escaped = true
                } else if c == 0x22 {
                    state = .colon
                } else {
                    memberName.append(c)
                }
            case .colon:
                if Self.isSpace(c) { position += 1; continue }
                guard c == UInt8(ascii: ":") else { throw fail("Expected ':' after a member name") }
                position += 1
                state = .memberValue
            case .memberValue:
                if Self.isSpace(c) { position += 1; continue }
                if memberName == Array("value".utf8) {
                    guard c == UInt8(ascii: "[") else { throw fail("'value' must be an array") }
                    sawValue = true
                    position += 1
                    state = .elementStart
                } else {
                    itemStart = position
                    depth = 0
                    inString = false
                    escaped = false
                    state = .otherValue
                }
            case .elementStart:
                if Self.isSpace(c) { position += 1; continue }
                if c == UInt8(ascii: "]") {
                    position += 1
                    state = .afterMember
                    continue
                }
                guard c == UInt8(ascii: "{") else { throw fail("A collection element must be an object") }
                itemStart = position
                depth = 0
                inString = false
                escaped = false
                state = .element
            case .element, .otherValue:
                // Scan to the end of one JSON value, tracking strings and nesting.
                if try scanValue(&items) { continue }
                return finishChunk(items)
            case .afterElement:
                if Self.isSpace(c) { position += 1; continue }
                position += 1
                if c == UInt8(ascii: ",") {
                    state = .elementStart
                } else if c == UInt8(ascii: "]") {
                    state = .afterMember
                } else {
                    throw fail("Expected ',' or ']' after an element", at: position - 1)
                }
            case .afterMember:
                if Self.isSpace(c) { position += 1; continue }
                position += 1
                if c == UInt8(ascii: ",") {
                    state = .memberNameStart
                } else if c == UInt8(ascii: "}") {
                    state = .done
                } else {
                    throw fail("Expected ',' or '}' after a member", at: position - 1)
                }
            case .done:
                guard Self.isSpace(c) else { throw fail("Unexpected data after the JSON object") }
                position += 1
            }
        }
        return finishChunk(items)
    }

    /// Drops bytes that no pending item needs.
    private mutating func finishChunk(_ items: [CollectionItem]) -> [CollectionItem] {
        let keep: Int
        switch state {
        case .element, .otherValue: keep = itemStart
        default: keep = position
        }
        if keep > 0 && keep >= buffer.count / 2 {
            buffer.removeFirst(keep)
            bufferOffset += keep
            position -= keep
            itemStart -= keep
        }
        return items
    }

    /// Advances over the current value; returns true when it completed (and was handled).
    private mutating func scanValue(_ items: inout [CollectionItem]) throws(PayloadError) -> Bool {
        let isPrimitive = buffer[itemStart] != UInt8(ascii: "{") && buffer[itemStart] != UInt8(ascii: "[") && buffer[itemStart] != 0x22
        while position < buffer.count {
            let c = buffer[position]
            if inString {
                position += 1
                if escaped {
                    escaped = false
                } else if c == 0x5C {
                    escaped = true
                } else if c == 0x22 {
                    inString = false
                    if depth == 0 {
                        try complete(itemStart..<position, &items)
                        return true
                    }
                }
                continue
            }
            if isPrimitive {
                if c == UInt8(ascii: ",") || c == UInt8(ascii: "}") || c == UInt8(ascii: "]") || Self.isSpace(c) {
                    try complete(itemStart..<position, &items)
                    return true
                }
                position += 1
                continue
            }
            position += 1
            switch c {
            case 0x22: inString = true
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
                if depth > JSONReader.maxDepth { throw fail("JSON nested too deeply") }
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
                if depth == 0 {
                    try complete(itemStart..<position, &items)
                    return true
                }
            default: break
            }
        }
        return false
    }

    private mutating func complete(_ range: Range<Int>, _ items: inout [CollectionItem]) throws(PayloadError) {
        let bytes = Array(buffer[range])
        do throws(PayloadError) {
            if state == .element {
                var shared = context
                let collection = try reader.withPathOnFailure { (trackPath) throws(PayloadError) -> EntityCollection in
                    var collection = EntityCollection()
                    var json = JSONReader(bytes)
                    json.trackPath = trackPath
                    try reader.readCollectionItem(&json, type: entityType, into: &collection, &shared)
                    try json.expectEnd()
                    return collection
                }
                context = shared
                items += collection.entities.map { .entity($0) } + collection.deleted.map { .deleted($0) }
                    + collection.addedLinks.map { .addedLink($0) } + collection.removedLinks.map { .removedLink($0) }
                    + collection.references.map { .reference($0) }
                elementIndex += 1
                state = .afterElement
            } else {
                // A member other than `value`: read it as part of a one-member object.
                var wrapper = Array("{\"".utf8) + escapeName(memberName) + Array("\":".utf8) + bytes + Array(",\"value\":[]}".utf8)
                if memberName == Array("value".utf8) { wrapper = bytes }
                let parsed = try reader.readCollection(wrapper)
                header.context = parsed.context ?? header.context
                header.count = parsed.count ?? header.count
                header.nextLink = parsed.nextLink ?? header.nextLink
                header.deltaLink = parsed.deltaLink ?? header.deltaLink
                header.annotations += parsed.annotations
                state = .afterMember
            }
        } catch {
            throw PayloadError(error.code, error.message, offset: bufferOffset + range.lowerBound + error.offset,
                               path: state == .element ? "value[\(elementIndex)]" + (error.path.isEmpty ? "" : "." + error.path) : error.path)
        }
    }

    private func escapeName(_ name: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        for c in name {
            if c == 0x22 || c == 0x5C { out.append(0x5C) }
            out.append(c)
        }
        return out
    }

    /// Ends the stream: checks the document was complete and returns the collection's own
    /// information.
    public mutating func finish() throws(PayloadError) -> EntityCollection {
        guard state == .done else {
            throw PayloadError(.malformedJSON, "The collection response ended early", offset: bufferOffset + buffer.count,
                               path: sawValue ? "value[\(elementIndex)]" : "")
        }
        guard sawValue else { throw PayloadError(.missingValue, "A collection response needs a 'value' array", offset: 0) }
        return header
    }
}

/// An async sequence of collection items read from an async sequence of byte chunks (for
/// example an HTTP response body).
public struct CollectionItemSequence<Chunks: AsyncSequence & Sendable>: AsyncSequence, Sendable
    where Chunks.Element: Sequence<UInt8> {
    public typealias Element = CollectionItem
    let chunks: Chunks
    let parser: CollectionStreamParser

    /// Creates a value from its parts.
    public init(chunks: Chunks, reader: V4JSONReader = V4JSONReader(), entityType: String? = nil) {
        self.chunks = chunks
        self.parser = CollectionStreamParser(reader: reader, entityType: entityType)
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        var source: Chunks.AsyncIterator
        var parser: CollectionStreamParser
        var pending: [CollectionItem] = []
        var pendingIndex = 0
        var finished = false

        public mutating func next() async throws -> CollectionItem? {
            try await next(isolation: nil)
        }

        /// Runs on the caller's actor, so iterating does not hop executors for every item.
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> CollectionItem? {
            while true {
                if pendingIndex < pending.count {
                    defer { pendingIndex += 1 }
                    return pending[pendingIndex]
                }
                if finished { return nil }
                pending = []
                pendingIndex = 0
                if let chunk = try await source.next(isolation: actor) {
                    pending = try parser.feed(chunk)
                } else {
                    finished = true
                    pending = [.end(try parser.finish())]
                }
            }
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(source: chunks.makeAsyncIterator(), parser: parser)
    }
}
