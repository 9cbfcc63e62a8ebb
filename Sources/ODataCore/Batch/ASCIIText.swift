extension BidirectionalCollection where Element == UInt8 {
    /// The bytes without spaces and tabs at either end.
    var withoutOuterBlanks: SubSequence {
        var lower = startIndex
        var upper = endIndex
        while lower < upper, self[lower] == 0x20 || self[lower] == 0x09 { lower = index(after: lower) }
        while upper > lower {
            let before = index(before: upper)
            guard self[before] == 0x20 || self[before] == 0x09 else { break }
            upper = before
        }
        return self[lower..<upper]
    }
}

extension String {
    /// The text without spaces and tabs at either end, found on the UTF-8 bytes (Foundation's
    /// `trimmingCharacters(in: .whitespaces)` showed in the profile of every `$batch`).
    public var withoutOuterBlanks: String { String(decoding: utf8.withoutOuterBlanks, as: UTF8.self) }
}

extension Substring {
    /// The text without spaces and tabs at either end (see `String.withoutOuterBlanks`).
    public var withoutOuterBlanks: String { String(decoding: utf8.withoutOuterBlanks, as: UTF8.self) }
}

extension String {
    /// Whether `needle` occurs, compared byte by byte (see ``firstByteRange(of:)``): on Linux
    /// `contains(_:)` with a string goes through Foundation's search.
    public func containsBytes(_ needle: String) -> Bool { firstByteRange(of: needle) != nil }

    /// Where `needle` first occurs, compared byte by byte on the UTF-8 (no Unicode rules; the
    /// generic `firstRange(of:)` and Foundation's `range(of:)` both showed in the profile of
    /// every `$batch` part).
    public func firstByteRange(of needle: String) -> Range<String.Index>? {
        let wanted = Array(needle.utf8)
        guard !wanted.isEmpty else { return startIndex..<startIndex }
        let found: Int?? = utf8.withContiguousStorageIfAvailable { bytes -> Int? in
            guard bytes.count >= wanted.count else { return nil }
            var offset = 0
            while offset <= bytes.count - wanted.count {
                if bytes[offset] == wanted[0] {
                    var matched = 1
                    while matched < wanted.count, bytes[offset + matched] == wanted[matched] { matched += 1 }
                    if matched == wanted.count { return offset }
                }
                offset += 1
            }
            return nil
        }
        let offset: Int?
        if let found {
            offset = found
        } else {
            // Not stored contiguously (a bridged string): the same search on a copy.
            offset = String(decoding: Array(utf8), as: UTF8.self).firstByteRange(of: needle)
                .map { utf8.distance(from: startIndex, to: $0.lowerBound) }
        }
        guard let offset else { return nil }
        let lower = utf8.index(startIndex, offsetBy: offset)
        return lower..<utf8.index(lower, offsetBy: wanted.count)
    }
}
