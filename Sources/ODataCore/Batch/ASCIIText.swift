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
