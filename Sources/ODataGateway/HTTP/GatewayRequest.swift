import Crypto
import Foundation
public import ODataCore

/// The parts of a device's request the gateway looks at, independent of HTTP.
public struct GatewayRequest: Sendable {
    public var method: String
    /// The path and query below the backend's place on the gateway (`SalesOrders?$top=5`).
    public var target: String
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// The gateway's URL of the backend's root as the device reached it, ending in `/`.
    public var gatewayRoot: String

    /// A request as a device sent it.
    public init(method: String, target: String, headers: HTTPHeaders, body: [UInt8], gatewayRoot: String) {
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.gatewayRoot = gatewayRoot
    }

    /// The identity the request's data belongs to (a scope's, a recorded answer's, a progress
    /// record's, a store file's owner): derived by the gateway from the verified credentials
    /// (``GatewayIdentities``) when it takes the request; "" without credentials.
    var user = ""

    /// The headers that carry the device's credentials, as the gateway sends them on the reads it
    /// makes for the device (credential checks, refreshes, ETag checks): `Authorization`, client
    /// certificates passed as headers, and the cookies named in the backend's `identityCookies`.
    func credentialHeaders(identityCookies: [String]) -> HTTPHeaders {
        var found = HTTPHeaders()
        if let authorization = headers["Authorization"] { found["Authorization"] = authorization }
        for name in GatewayIdentities.certificateHeaders {
            if let value = headers[name] { found[name] = value }
        }
        if !identityCookies.isEmpty, let cookie = headers["Cookie"] {
            let kept = cookie.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }.filter { pair in
                identityCookies.contains(String(pair.prefix { $0 != "=" }))
            }
            if !kept.isEmpty { found["Cookie"] = kept.sorted().joined(separator: "; ") }
        }
        return found
    }

    /// A SHA-256 digest, as hex: names a credential without keeping it.
    static func digest(_ text: String) -> String {
        GatewayStore.hex(SHA256.hash(data: Array(text.utf8)))
    }
}

/// A defining query as the gateway keys it, and the gateway's own paging and delta tokens.
struct TrackedQuery: Equatable {
    /// The path (`SalesOrders`), as sent.
    var path: String
    /// The query options other than the gateway's tokens, in the order sent (for the backend).
    var options: [(name: String, value: String)]
    /// The gateway's token, when the request carries one.
    var token: Token?

    static func == (a: TrackedQuery, b: TrackedQuery) -> Bool {
        a.path == b.path && a.options.elementsEqual(b.options) { $0 == $1 } && a.token == b.token
    }

    /// Where a device is in a scope.
    enum Token: Equatable {
        /// The next page of a full read made at `published`, after `key`.
        case page(scope: Int64, published: Int64, after: String)
        /// A delta since `since` (a delta link); with `upTo` and a position, its next page.
        case delta(scope: Int64, since: Int64, upTo: Int64?, afterSeq: Int64, afterKey: String)
        /// The next page of the streamed first read `generation`: after chunk `afterSeq` whole,
        /// or within it after `afterKey`.
        case stream(scope: Int64, generation: Int64, afterSeq: Int64, afterKey: String?)
    }

    static let tokenNames: Set<String> = ["$skiptoken", "$deltatoken", "!deltatoken"]
    /// Delta tokens by name, the gateway's or the backend's.
    static let deltaTokenNames: Set<String> = ["$deltatoken", "!deltatoken"]

    /// Splits `target` into path, options and the gateway's token. A `$skiptoken` or delta token
    /// the gateway did not write is kept as an option (the backend's own).
    init(target: String) throws(GatewayError) {
        let question = target.firstIndex(of: "?")
        path = String(target[..<(question ?? target.endIndex)])
        options = []
        token = nil
        guard let question else { return }
        for part in target[target.index(after: question)...].split(separator: "&", omittingEmptySubsequences: true) {
            let pair = part.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(pair[0]).removingPercentEncoding ?? String(pair[0])
            let value = pair.count > 1 ? String(pair[1]) : ""
            if Self.tokenNames.contains(name), let parsed = try Self.parseToken(value) {
                guard token == nil else {
                    throw GatewayError(status: 400, code: "BadToken", "Two gateway tokens in one URL")
                }
                token = parsed
                continue
            }
            options.append((name, value))
        }
    }

    /// The scope's name: the path and the options sorted by name, values percent-decoded and
    /// re-encoded alike, so that spellings of one query share a scope.
    var canonical: String {
        var pairs: [(name: String, value: String)] = options.map { option in
            (name: option.name, value: Self.normalized(option.value))
        }
        pairs.sort { (a: (name: String, value: String), b: (name: String, value: String)) -> Bool in
            a.name == b.name ? a.value < b.value : a.name < b.name
        }
        let path = Self.normalized(self.path)
        guard !pairs.isEmpty else { return path }
        let parts: [String] = pairs.map { pair in pair.name + "=" + pair.value }
        return path + "?" + parts.joined(separator: "&")
    }

    /// The query as sent to the backend.
    var backendTarget: String {
        guard !options.isEmpty else { return path }
        let parts: [String] = options.map { option in
            option.value.isEmpty ? option.name : option.name + "=" + option.value
        }
        return path + "?" + parts.joined(separator: "&")
    }

    /// The query as sent to the backend to check a device's credentials: no rows (`$top=0`).
    var probeTarget: String {
        var probe = self
        probe.options.removeAll {
            ["$top", "$skip", "$orderby", "$expand", "$select", "$skiptoken"].contains($0.name)
        }
        probe.options.append(("$top", "0"))
        return probe.backendTarget
    }

    /// The gateway's URL for this query with `token`.
    func link(root: String, token: Token, legacy: Bool) -> String {
        let name = if case .delta = token { legacy ? "!deltatoken" : "$deltatoken" } else { "$skiptoken" }
        let text: String
        switch token {
        case .page(let scope, let published, let after):
            text = "gp.\(scope).\(published).\(Self.base64URL(after))"
        case .delta(let scope, let since, let upTo, let afterSeq, let afterKey):
            text =
                upTo.map { "gd.\(scope).\(since).\($0).\(afterSeq).\(Self.base64URL(afterKey))" }
                ?? "gd.\(scope).\(since)"
        case .stream(let scope, let generation, let afterSeq, let afterKey):
            text = "gs.\(scope).\(generation).\(afterSeq)" + (afterKey.map { "." + Self.base64URL($0) } ?? "")
        }
        let value = legacy && name == "!deltatoken" ? "'\(text)'" : text
        return root + backendTarget + (options.isEmpty ? "?" : "&") + name + "=" + value
    }

    static func parseToken(_ raw: String) throws(GatewayError) -> Token? {
        var text = raw.removingPercentEncoding ?? raw
        if text.hasPrefix("'"), text.hasSuffix("'"), text.count >= 2 { text = String(text.dropFirst().dropLast()) }
        guard text.hasPrefix("gp.") || text.hasPrefix("gd.") || text.hasPrefix("gs.") else { return nil }
        let fields = text.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let bad = GatewayError(status: 400, code: "BadToken", "The gateway token '\(text.prefix(80))' is malformed")
        func number(_ index: Int) throws(GatewayError) -> Int64 {
            guard index < fields.count, let value = Int64(fields[index]), value >= 0 else { throw bad }
            return value
        }
        func key(_ index: Int) throws(GatewayError) -> String {
            guard index < fields.count, let value = unbase64URL(fields[index]) else { throw bad }
            return value
        }
        if fields[0] == "gs" {
            guard fields.count == 4 || fields.count == 5 else { throw bad }
            return .stream(
                scope: try number(1), generation: try number(2), afterSeq: try number(3),
                afterKey: fields.count == 5 ? try key(4) : nil)
        }
        if fields[0] == "gp" {
            guard fields.count == 4 else { throw bad }
            return .page(scope: try number(1), published: try number(2), after: try key(3))
        }
        switch fields.count {
        case 3: return .delta(scope: try number(1), since: try number(2), upTo: nil, afterSeq: 0, afterKey: "")
        case 6:
            return .delta(
                scope: try number(1), since: try number(2), upTo: try number(3), afterSeq: try number(4),
                afterKey: try key(5))
        default: throw bad
        }
    }

    static func base64URL(_ text: String) -> String {
        Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    static func unbase64URL(_ text: String) -> String? {
        var base = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base.count % 4 != 0 { base += "=" }
        guard let data = Data(base64Encoded: base) else { return nil }
        return String(data: data, encoding: .utf8)
    }

    /// Spellings of one text that mean the same (RFC 3986, 6.2.2): percent-encodings of
    /// unreserved characters (letters, digits, `-._~`) decoded, the hex of the others in
    /// capitals, and characters a URL cannot carry as they are (a space, non-ASCII) encoded.
    /// Nothing else changes: `+` and `%2B`, `'` and `%27` stay apart, as a backend may read
    /// them apart (a `+` in a query is a space to many).
    static func normalized(_ text: String) -> String {
        let bytes = Array(text.utf8)
        let hex = Array("0123456789ABCDEF".utf8)
        func value(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        func unreserved(_ byte: UInt8) -> Bool {
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || "-._~".utf8.contains(byte)
        }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%"), index + 2 < bytes.count,
                let high = value(bytes[index + 1]), let low = value(bytes[index + 2])
            {
                let decoded = high << 4 | low
                if unreserved(decoded) {
                    out.append(decoded)
                } else {
                    out += [UInt8(ascii: "%"), hex[Int(high)], hex[Int(low)]]
                }
                index += 3
                continue
            }
            if byte <= 0x20 || byte >= 0x7f || "\"<>\\^`{|}".utf8.contains(byte) {
                out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0f)]]
            } else {
                out.append(byte)
            }
            index += 1
        }
        return String(decoding: out, as: UTF8.self)
    }
}
