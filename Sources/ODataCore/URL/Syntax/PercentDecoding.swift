/// Percent-decoded text that remembers where each decoded byte came from, so that errors
/// found in the decoded text point into the raw URL.
struct DecodedText {
    var text: String
    /// `rawOffsets[k]` is the raw offset of decoded byte `k`; one extra entry for the end.
    var rawOffsets: [Int]
    /// `encoded[k]` is true when decoded byte `k` was written percent-encoded.
    var encoded: [Bool] = []

    func rawOffset(_ decoded: Int) -> Int {
        rawOffsets[max(0, min(decoded, rawOffsets.count - 1))]
    }

    /// Decodes `%XX` escapes (and `+` as a space when `plusAsSpace`) in `raw[range]`.
    static func decode(_ raw: [UInt8], _ range: Range<Int>, plusAsSpace: Bool, input: String) throws(SyntaxError) -> DecodedText {
        var out: [UInt8] = []
        var offsets: [Int] = []
        var encoded: [Bool] = []
        out.reserveCapacity(range.count)
        var i = range.lowerBound
        while i < range.upperBound {
            let c = raw[i]
            if c == UInt8(ascii: "%") {
                guard i + 2 < range.upperBound, let hi = Literal.hexValue(raw[i + 1]), let lo = Literal.hexValue(raw[i + 2]) else {
                    throw SyntaxError(.invalidPercentEncoding, "'%' must be followed by two hex digits", input: input, offset: i)
                }
                out.append(hi << 4 | lo)
                offsets.append(i)
                encoded.append(true)
                i += 3
            } else if c == UInt8(ascii: "+") && plusAsSpace {
                out.append(0x20)
                offsets.append(i)
                encoded.append(false)
                i += 1
            } else {
                out.append(c)
                offsets.append(i)
                encoded.append(false)
                i += 1
            }
        }
        offsets.append(range.upperBound)
        // Bytes that are not UTF-8 (also overlong forms and encoded surrogates) are refused, not
        // turned into U+FFFD: the text would not be what the client sent.
        // (`String(validating:)` needs macOS 15; the package supports macOS 14.)
        if out.contains(where: { $0 >= 0x80 }), let bad = Self.firstInvalidUTF8(out) {
            throw SyntaxError(.invalidPercentEncoding, "The decoded URL is not valid UTF-8", input: input,
                              offset: offsets[min(bad, offsets.count - 1)])
        }
        return DecodedText(text: String(decoding: out, as: UTF8.self), rawOffsets: offsets, encoded: encoded)
    }

    /// The offset of the first byte that does not start a valid UTF-8 sequence, if any.
    static func firstInvalidUTF8(_ bytes: [UInt8]) -> Int? {
        var parser = Unicode.UTF8.ForwardParser()
        var iterator = bytes.makeIterator()
        var offset = 0
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let encoded): offset += encoded.count
            case .emptyInput: return nil
            case .error: return offset
            }
        }
    }
}
