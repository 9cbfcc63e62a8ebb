import Foundation

/// Byte-level pieces of the pages the gateway writes: a page of 1,000 rows is built without
/// Foundation's string search (which decodes each payload as UTF-16).
enum PageText {
    /// Appends `text` to `output`, with every occurrence of `from` replaced by `to`.
    static func append(_ text: String, replacing from: [UInt8], with to: [UInt8], to output: inout [UInt8]) {
        var text = text
        text.withUTF8 { bytes in
            var start = 0
            var at = 0
            while let found = find(from, in: bytes, from: at) {
                output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<found]))
                output.append(contentsOf: to)
                start = found + from.count
                at = start
            }
            if start < bytes.count { output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...])) }
        }
    }

    /// The first offset at or after `start` where `bytes` hold `needle`.
    static func find(_ needle: [UInt8], in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        guard let first = needle.first, bytes.count - start >= needle.count else { return nil }
        var index = start
        let last = bytes.count - needle.count
        while index <= last {
            if bytes[index] == first {
                var matched = 1
                while matched < needle.count, bytes[index + matched] == needle[matched] { matched += 1 }
                if matched == needle.count { return index }
            }
            index += 1
        }
        return nil
    }

    /// Whether `bytes` hold `needle`.
    static func contains(_ bytes: [UInt8], _ needle: [UInt8]) -> Bool {
        bytes.withUnsafeBufferPointer { find(needle, in: $0, from: 0) != nil }
    }

    static let etag = Array("etag".utf8)
    static let v4Own = [Array(#"{"@odata.etag":"#.utf8), Array(#"{"odata.etag":"#.utf8)]
    static let v2Own = Array(#""etag":"#.utf8)

    /// Whether `payload` visibly carries the backend's ETag at its top level: V4 control
    /// information first (as backends write it), or V2's `etag` in the leading `__metadata`
    /// before any nested object. Other spellings take the parsing way.
    static func hasOwnETag(_ payload: [UInt8], legacy: Bool) -> Bool {
        guard legacy else { return v4Own.contains { payload.starts(with: $0) } }
        guard payload.starts(with: v2Metadata) else { return false }
        return payload.withUnsafeBufferPointer { bytes in
            guard let found = find(v2Own, in: bytes, from: v2Metadata.count) else { return false }
            return !bytes[v2Metadata.count..<found].contains { $0 == UInt8(ascii: "{") || $0 == UInt8(ascii: "}") }
        }
    }
    static let v4Opening = Array(#"{"@odata.etag":"#.utf8)
    static let v2Metadata = Array(#"{"__metadata":{"#.utf8)
    static let v2ETag = Array(#""etag":"#.utf8)

    /// Appends `payload` with the gateway's ETag (``Gateway/withETag(_:scope:hash:legacy:)``):
    /// bytes for a payload without the letters `etag`, which is nearly all; the parsing way
    /// for the others.
    static func appendWithETag(_ payload: [UInt8], scope: Int64, hash: String?, legacy: Bool, to output: inout [UInt8])
    {
        if hasOwnETag(payload, legacy: legacy) {
            output += payload
            return
        }
        guard let hash, payload.first == UInt8(ascii: "{"), !contains(payload, etag) else {
            let text = String(decoding: payload, as: UTF8.self)
            output += Array(Gateway.withETag(text, scope: scope, hash: hash, legacy: legacy).utf8)
            return
        }
        let value = Array(#""W/\"gw.\#(scope).\#(hash)\"""#.utf8)
        if !legacy {
            output += v4Opening
            output += value
            if payload.count > 1, payload[1] != UInt8(ascii: "}") { output.append(UInt8(ascii: ",")) }
            output.append(contentsOf: payload[1...])
            return
        }
        // V2: the entity's own `__metadata` comes first as the backend writes it.
        guard payload.starts(with: v2Metadata) else {
            let text = String(decoding: payload, as: UTF8.self)
            output += Array(Gateway.withETag(text, scope: scope, hash: hash, legacy: legacy).utf8)
            return
        }
        output += v2Metadata
        output += v2ETag
        output += value
        let rest = payload[v2Metadata.count...]
        if rest.first != UInt8(ascii: "}") { output.append(UInt8(ascii: ",")) }
        output.append(contentsOf: rest)
    }
}
