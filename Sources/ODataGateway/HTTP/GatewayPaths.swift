import Foundation
import ODataCore

/// The one check of every path that leaves the gateway for a backend (SPEC §13, "Identity"):
/// a device's own request, each part of its `$batch` (multipart and JSON, relative or absolute),
/// the parts forwarded one by one, and the queries of a store build. Whatever is refused here
/// is answered 400 and never forwarded, before anything of it is recorded.
///
/// Refused: dot segments (`.` and `..`, plain, percent-encoded once or twice, or with a `;`
/// parameter), a slash or backslash encoded outside a quoted key literal, an empty segment,
/// backslashes, control characters, fragments, absolute URLs of another host or service root
/// and absolute paths outside it. A slash inside a quoted literal (`Products('a%2Fb')`) is data
/// and stays, but the path must still hold no dot segment once every encoding is undone, so that
/// no hop that decodes and normalizes can move it out of the service root.
enum LeavingPath {
    static func refused(_ url: String, _ why: String) -> GatewayError {
        GatewayError(
            status: 400, code: "BadPath",
            "The path '\(url.prefix(120))' is not forwarded: \(why); it would leave the backend's service root")
    }

    /// `url` (as a request line or a `$batch` part names it) relative to the backend's root, once
    /// checked: an absolute URL or path must name the gateway's root (or the backend's).
    static func relative(_ url: String, gatewayRoot: String, backendRoot: String) throws(GatewayError) -> String {
        var target = url
        let lowered = target.lowercased()
        if hasScheme(target) || target.hasPrefix("//") {
            guard let root = [gatewayRoot, backendRoot].first(where: { lowered.hasPrefix($0.lowercased()) }) else {
                throw refused(url, "it names another host or service")
            }
            target = String(target.dropFirst(root.count))
        } else if target.hasPrefix("/") {
            let paths = [gatewayRoot, backendRoot].compactMap { URL(string: $0)?.path }.map {
                $0.hasSuffix("/") ? $0 : $0 + "/"
            }
            guard let root = paths.first(where: { target.hasPrefix($0) }) else {
                throw refused(url, "it is an absolute path outside the service root")
            }
            target = String(target.dropFirst(root.count))
        }
        try check(target, as: url)
        return target
    }

    /// Whether `text` starts with a URL scheme (`http:`, `file:`, …).
    static func hasScheme(_ text: String) -> Bool {
        guard let colon = text.firstIndex(of: ":"), colon > text.startIndex else { return false }
        let scheme = text[..<colon]
        guard let first = scheme.unicodeScalars.first, CharacterSet.letters.contains(first) else { return false }
        return scheme.unicodeScalars.allSatisfy {
            $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "+-.".unicodeScalars.contains($0))
        }
    }

    /// Checks a target relative to the service root (`Set(key)/Nav?$options`).
    static func check(_ target: String, as url: String? = nil) throws(GatewayError) {
        let named = url ?? target
        let path = target.prefix { $0 != "?" }
        if path.contains("#") { throw refused(named, "it holds a fragment") }
        // Byte by byte, undoing one level of encoding: what is a separator outside a quoted
        // literal must be written as one.
        let bytes = Array(path.utf8)
        var quoted = false
        var segmentStart = true
        var index = 0
        while index < bytes.count {
            var byte = bytes[index]
            var encoded = false
            if byte == 0x25 {
                guard index + 2 < bytes.count, let high = hexDigit(bytes[index + 1]),
                    let low = hexDigit(bytes[index + 2])
                else { throw refused(named, "it holds a '%' that is no percent-encoding") }
                byte = high << 4 | low
                encoded = true
                index += 2
            }
            index += 1
            if byte < 0x20 || byte == 0x7F { throw refused(named, "it holds a control character") }
            if byte == 0x27 { quoted.toggle() }
            if byte == 0x5C, !quoted || !encoded { throw refused(named, "it holds a backslash") }
            if byte == 0x2F {
                if encoded, !quoted { throw refused(named, "it holds an encoded slash") }
                if !encoded {
                    if segmentStart, index < bytes.count { throw refused(named, "it holds an empty segment") }
                    segmentStart = true
                    continue
                }
            }
            segmentStart = false
        }
        // Every level of encoding undone, byte by byte (an escape that is no encoding stays as
        // it is): no dot segment anywhere, whatever a later hop decodes. A path that decodes
        // to bytes that are not UTF-8 is refused: a hop may read them in ways of its own (an
        // overlong `%c0%ae` as a dot).
        var decoded = Array(path.utf8)
        for _ in 0..<4 {
            let once = percentDecoded(decoded)
            if once == decoded { break }
            decoded = once
        }
        guard String(validating: decoded, as: UTF8.self) != nil else {
            throw refused(named, "it decodes to bytes that are not UTF-8")
        }
        for piece in decoded.split(omittingEmptySubsequences: false, whereSeparator: { $0 == 0x2F || $0 == 0x5C }) {
            var name = piece.prefix { $0 != 0x3B }[...]
            while name.first == 0x20 { name = name.dropFirst() }
            while name.last == 0x20 { name = name.dropLast() }
            if name.elementsEqual([0x2E]) || name.elementsEqual([0x2E, 0x2E]) {
                throw refused(named, "it holds a dot segment")
            }
        }
    }

    /// The value of one hexadecimal digit.
    static func hexDigit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        case 0x61...0x66: byte - 0x61 + 10
        default: nil
        }
    }

    /// `bytes` with each `%XX` escape decoded once; an escape that is no encoding stays.
    static func percentDecoded(_ bytes: [UInt8]) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if bytes[index] == 0x25, index + 2 < bytes.count, let high = hexDigit(bytes[index + 1]),
                let low = hexDigit(bytes[index + 2])
            {
                output.append(high << 4 | low)
                index += 3
            } else {
                output.append(bytes[index])
                index += 1
            }
        }
        return output
    }

    /// Checks every request of a `$batch` body (multipart or JSON) before any of it is recorded
    /// or forwarded, and gives the body written again from what was checked (with its
    /// `Content-Type`), so that a backend reads exactly the requests the gateway checked. A body
    /// that cannot be read, that has two `Content-Type`s, or whose encoding hides it, is refused:
    /// its paths cannot be checked.
    @discardableResult
    static func checkBatch(
        _ request: GatewayRequest, backendRoot: String
    ) throws(GatewayError) -> (body: [UInt8], contentType: String) {
        guard request.headers["Content-Encoding"].map({ $0.lowercased() == "identity" }) ?? true else {
            throw GatewayError(
                status: 415, code: "UnsupportedMediaType",
                "A compressed $batch is not forwarded: the paths of its requests cannot be checked")
        }
        guard request.headers.filter({ $0.name.lowercased() == "content-type" }).count <= 1 else {
            throw GatewayError(status: 400, code: "BadBatch", "The $batch has two Content-Type headers")
        }
        let contentType = (request.headers["Content-Type"] ?? "").lowercased()
        let rewritten: (body: [UInt8], contentType: String)
        if contentType.hasPrefix("multipart/") {
            guard let boundary = request.headers["Content-Type"].flatMap({ HTTPHeaders.parameter("boundary", in: $0) })
            else { throw GatewayError(status: 400, code: "BadBatch", "The $batch's Content-Type names no boundary") }
            let batch: MultipartBatch
            do {
                batch = try MultipartBatch.read(request.body, boundary: boundary)
            } catch {
                throw GatewayError(status: 400, code: "BadBatch", "The $batch body cannot be read: \(error)")
            }
            // Each request's URL as checked: relative to the backend's root, so that a backend
            // reads no absolute path or URL of its own host that the gateway did not resolve.
            func checked(_ operation: BatchOperation) throws(GatewayError) -> BatchOperation {
                var operation = operation
                if case .request(let method, let url, let version) = operation.message.startLine {
                    let target = try relative(url, gatewayRoot: request.gatewayRoot, backendRoot: backendRoot)
                    operation.message.startLine = .request(method: method, url: target, version: version)
                }
                return operation
            }
            var parts: [BatchPart] = []
            for part in batch.parts {
                switch part {
                case .operation(let operation): parts.append(.operation(try checked(operation)))
                case .changeSet(let set):
                    var operations: [BatchOperation] = []
                    for operation in set.operations { operations.append(try checked(operation)) }
                    var changed = set
                    changed.operations = operations
                    parts.append(.changeSet(changed))
                }
            }
            let again = MultipartBatch(parts: parts)
            rewritten = (again.write(), again.contentType)
        } else if contentType.hasPrefix("application/json") {
            let batch: JSONBatchRequest
            do {
                batch = try JSONBatchRequest.read(request.body)
            } catch {
                throw GatewayError(status: 400, code: "BadBatch", "The JSON $batch body cannot be read: \(error)")
            }
            var checkedBatch = batch
            for index in checkedBatch.requests.indices {
                checkedBatch.requests[index].url = try relative(
                    batch.requests[index].url, gatewayRoot: request.gatewayRoot, backendRoot: backendRoot)
            }
            rewritten = (checkedBatch.write(), request.headers["Content-Type"] ?? "application/json")
        } else {
            throw GatewayError(
                status: 415, code: "UnsupportedMediaType",
                "A $batch is multipart/mixed or application/json; its paths cannot be checked otherwise")
        }
        return rewritten
    }

    /// Whether `target` is the `$batch` resource (written as the spec writes it; any other
    /// spelling of it is refused by ``checkRequest(_:backendRoot:)``).
    static func isBatch(_ target: String) -> Bool { target.prefix { $0 != "?" } == "$batch" }

    /// Checks what `request` sends on: its target, and for a `$batch` each of its requests; gives
    /// a `$batch` written again from what was checked (see ``checkBatch(_:backendRoot:)``).
    @discardableResult
    static func checkRequest(
        _ request: GatewayRequest, backendRoot: String
    ) throws(GatewayError) -> (body: [UInt8], contentType: String)? {
        try check(request.target)
        let path = request.target.prefix { $0 != "?" }
        let decoded = String(decoding: percentDecoded(Array(path.utf8)), as: UTF8.self).lowercased()
        if decoded == "$batch" || decoded.hasPrefix("$batch/") || decoded.hasPrefix("$batch;") {
            guard path == "$batch" else {
                throw refused(request.target, "a $batch must be written $batch, so that its parts are checked")
            }
            guard request.method.uppercased() == "POST" else {
                throw GatewayError(status: 405, code: "MethodNotAllowed", "A $batch is sent with POST")
            }
            return try checkBatch(request, backendRoot: backendRoot)
        }
        return nil
    }
}
