public import Foundation

/// An HTTP request or response embedded in a `$batch` part.
public struct BatchMessage: Sendable, Hashable {
    /// The start line: a request (`GET url HTTP/1.1`) or a response (`HTTP/1.1 201 Created`).
    public enum StartLine: Sendable, Hashable {
        case request(method: String, url: String, version: String)
        case response(version: String, status: Int, reason: String)
    }
    public var startLine: StartLine
    public var headers: HTTPHeaders
    public var body: [UInt8]

    /// Creates a value from its parts.
    public init(startLine: StartLine, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.startLine = startLine
        self.headers = headers
        self.body = body
    }

    /// A request.
    public static func request(_ method: String, _ url: String, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) -> BatchMessage {
        BatchMessage(startLine: .request(method: method, url: url, version: "HTTP/1.1"), headers: headers, body: body)
    }

    /// A response.
    public static func response(_ status: Int, reason: String = "", headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) -> BatchMessage {
        BatchMessage(startLine: .response(version: "HTTP/1.1", status: status, reason: reason.isEmpty ? HTTPStatus.reason(status) : reason), headers: headers, body: body)
    }

    public var method: String? {
        if case .request(let method, _, _) = startLine { return method }
        return nil
    }

    public var url: String? {
        if case .request(_, let url, _) = startLine { return url }
        return nil
    }

    public var status: Int? {
        if case .response(_, let status, _) = startLine { return status }
        return nil
    }
}

/// One operation of a batch: MIME part headers (`Content-Type`, `Content-ID`, …) and the
/// embedded message.
public struct BatchOperation: Sendable, Hashable {
    public var partHeaders: HTTPHeaders
    public var message: BatchMessage

    /// Creates a value from its parts.
    public init(partHeaders: HTTPHeaders = HTTPHeaders([("Content-Type", "application/http"), ("Content-Transfer-Encoding", "binary")]),
                message: BatchMessage) {
        self.partHeaders = partHeaders
        self.message = message
    }

    /// The Content-ID, from the part headers or (as some V2 servers write it) the message headers.
    public var contentID: String? { partHeaders["Content-ID"] ?? message.headers["Content-ID"] }
}

/// A change set: operations applied all or nothing.
public struct ChangeSet: Sendable, Hashable {
    public var boundary: String
    public var partHeaders: HTTPHeaders
    public var operations: [BatchOperation]

    /// Creates a value from its parts.
    public init(boundary: String = "changeset_" + UUID().uuidString.lowercased(), partHeaders: HTTPHeaders = HTTPHeaders(), operations: [BatchOperation]) {
        self.boundary = boundary
        self.partHeaders = partHeaders
        self.operations = operations
    }
}

/// A top-level part of a batch.
public enum BatchPart: Sendable, Hashable {
    case operation(BatchOperation)
    case changeSet(ChangeSet)
}

/// A multipart/mixed `$batch` request or response body.
public struct MultipartBatch: Sendable, Hashable {
    public var boundary: String
    public var parts: [BatchPart]
    /// Text before the first boundary (ignored by readers).
    public var preamble: [UInt8]
    /// Text after the closing boundary.
    public var epilogue: [UInt8]

    /// Creates a value from its parts.
    public init(boundary: String = "batch_" + UUID().uuidString.lowercased(), parts: [BatchPart], preamble: [UInt8] = [], epilogue: [UInt8] = []) {
        self.boundary = boundary
        self.parts = parts
        self.preamble = preamble
        self.epilogue = epilogue
    }

    /// The `Content-Type` header value for this batch.
    public var contentType: String { "multipart/mixed; boundary=\(boundary)" }

    /// Every operation in order, change-set members included.
    public var operations: [BatchOperation] {
        parts.flatMap { part -> [BatchOperation] in
            switch part {
            case .operation(let operation): [operation]
            case .changeSet(let set): set.operations
            }
        }
    }

    // MARK: Reading

    /// Reads a batch body. Without `boundary`, the first `--boundary` line gives it. A leading
    /// HTTP message head (`POST …/$batch HTTP/1.1` and its headers) is skipped when present.
    /// A UTF-8 byte-order mark before the body is skipped.
    public static func read(_ body: [UInt8], boundary: String? = nil) throws(PayloadError) -> MultipartBatch {
        var start = body.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
        var boundary = boundary
        if boundary == nil {
            // A full HTTP message: take the boundary from its Content-Type.
            let lines = Lines(body, start..<body.count)
            if let first = lines.first, let text = lines.text(first), text.hasPrefix("POST ") || text.hasPrefix("HTTP/") {
                var headerEnd = body.count
                for line in lines.all.dropFirst() where line.content.isEmpty {
                    headerEnd = line.next
                    break
                }
                for line in lines.all.dropFirst() {
                    if line.next > headerEnd { break }
                    if let text = lines.text(line), text.lowercased().hasPrefix("content-type:"), let b = HTTPHeaders.parameter("boundary", in: text) {
                        boundary = b
                    }
                }
                start = headerEnd
            }
        }
        if boundary == nil {
            for line in Lines(body, start..<body.count).all {
                if let text = Lines.text(body, line.content), text.hasPrefix("--"), text.count > 2 {
                    boundary = String(text.dropFirst(2)).trimmingCharacters(in: .whitespaces)
                    break
                }
            }
        }
        guard let boundary, !boundary.isEmpty else {
            throw PayloadError(.malformedBatch, "No boundary: the body has no '--boundary' line and none was given", offset: 0)
        }
        let split = try splitParts(body, start..<body.count, boundary: boundary, path: "batch")
        // Part headers before the first delimiter mean a delimiter was not recognised (a
        // damaged first line, or a change set's boundary taken for the batch's): reading on
        // would return a wrong structure.
        for line in Lines(body, start..<split.preambleEnd).all {
            guard let text = Lines.text(body, line.content)?.lowercased() else { continue }
            if text.hasPrefix("content-type:") || text.hasPrefix("content-transfer-encoding:") {
                throw PayloadError(.malformedBatch, "Part headers ('\(text)') stand before the first delimiter --\(boundary): "
                                   + "a delimiter line is unreadable", offset: line.content.lowerBound, path: "batch")
            }
        }
        var parts: [BatchPart] = []
        for (index, range) in split.parts.enumerated() {
            parts.append(try readPart(body, range, path: "batch part \(index + 1)", allowChangeSet: true))
        }
        return MultipartBatch(boundary: boundary, parts: parts, preamble: Array(body[start..<split.preambleEnd]), epilogue: Array(body[split.epilogueStart..<body.count]))
    }

    /// Line positions: the content range and the start of the next line.
    struct Lines {
        struct Line {
            var content: Range<Int>
            var next: Int
        }
        var all: [Line] = []
        init(_ bytes: [UInt8], _ range: Range<Int>) {
            var start = range.lowerBound
            var i = range.lowerBound
            while i < range.upperBound {
                if bytes[i] == 0x0A {
                    let end = i > start && bytes[i - 1] == 0x0D ? i - 1 : i
                    all.append(Line(content: start..<end, next: i + 1))
                    start = i + 1
                }
                i += 1
            }
            if start < range.upperBound { all.append(Line(content: start..<range.upperBound, next: range.upperBound)) }
            bytesRef = bytes
        }
        private let bytesRef: [UInt8]
        var first: Line? { all.first }
        /// The line that starts at `start`, without reading further than its end (`nil` at
        /// `end`): for readers that stop early, such as at the blank line after headers.
        static func line(in bytes: [UInt8], from start: Int, before end: Int) -> Line? {
            guard start < end else { return nil }
            guard let newline = bytes[start..<end].firstIndex(of: 0x0A) else {
                return Line(content: start..<end, next: end)
            }
            let contentEnd = newline > start && bytes[newline - 1] == 0x0D ? newline - 1 : newline
            return Line(content: start..<contentEnd, next: newline + 1)
        }
        func text(_ line: Line) -> String? { Lines.text(bytesRef, line.content) }
        static func text(_ bytes: [UInt8], _ range: Range<Int>) -> String? { String(decoding: bytes[range], as: UTF8.self) }
    }

    /// Finds the parts between `--boundary` lines. A part's content ends before the line
    /// break that precedes the next delimiter.
    static func splitParts(_ body: [UInt8], _ range: Range<Int>, boundary: String, path: String) throws(PayloadError)
        -> (parts: [Range<Int>], preambleEnd: Int, epilogueStart: Int) {
        let delimiter = Array(("--" + boundary).utf8)
        var parts: [Range<Int>] = []
        var currentStart: Int?
        var preambleEnd = range.lowerBound
        var closed = false
        var epilogueStart = range.upperBound
        for line in Lines(body, range).all {
            let content = body[line.content]
            guard content.starts(with: delimiter) else { continue }
            let rest = content.dropFirst(delimiter.count)
            var isClose = false
            var tail = rest[...]
            if tail.starts(with: [UInt8(ascii: "-"), UInt8(ascii: "-")]) {
                isClose = true
                tail = tail.dropFirst(2)
            }
            // Transport padding: only whitespace may follow a delimiter.
            guard tail.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) else { continue }
            // The line break before the delimiter belongs to it.
            var contentEnd = line.content.lowerBound
            if contentEnd > range.lowerBound, body[contentEnd - 1] == 0x0A {
                contentEnd -= 1
                if contentEnd > range.lowerBound, body[contentEnd - 1] == 0x0D { contentEnd -= 1 }
            }
            if let start = currentStart {
                parts.append(start..<max(start, contentEnd))
            } else {
                preambleEnd = contentEnd
            }
            if isClose {
                closed = true
                epilogueStart = line.next
                break
            }
            currentStart = line.next
        }
        guard closed else {
            throw PayloadError(.malformedBatch, "The closing delimiter --\(boundary)-- is missing", offset: range.upperBound, path: path)
        }
        guard !parts.isEmpty || currentStart != nil else {
            throw PayloadError(.malformedBatch, "No part is delimited by --\(boundary)", offset: range.lowerBound, path: path)
        }
        return (parts, preambleEnd, epilogueStart)
    }

    /// Reads headers up to an empty line; returns them and where the content starts.
    static func readHeaders(_ body: [UInt8], _ range: Range<Int>, path: String) throws(PayloadError) -> (HTTPHeaders, Int) {
        var headers = HTTPHeaders()
        // Spaces and tabs around a name or value are not part of it (trimmed on the bytes:
        // Foundation's trimming was a tenth of the reference server's time in a large upload).
        func trimmed(_ bytes: Range<Int>) -> String {
            String(decoding: body[bytes].withoutOuterBlanks, as: UTF8.self)
        }
        var position = range.lowerBound
        while let line = Lines.line(in: body, from: position, before: range.upperBound) {
            position = line.next
            if line.content.isEmpty { return (headers, line.next) }
            let first = body[line.content.lowerBound]
            if first == 0x20 || first == 0x09, let last = headers.fields.last {
                // A folded continuation line.
                headers[last.name] = last.value + " " + trimmed(line.content)
                continue
            }
            guard let colon = body[line.content].firstIndex(of: UInt8(ascii: ":")) else {
                let text = String(decoding: body[line.content], as: UTF8.self)
                throw PayloadError(.malformedBatch, "Expected a header line 'Name: value', found '\(text.prefix(60))'", offset: line.content.lowerBound, path: path)
            }
            headers.add(trimmed(line.content.lowerBound..<colon), trimmed((colon + 1)..<line.content.upperBound))
        }
        // Headers with no blank line after them: the part has no body.
        return (headers, range.upperBound)
    }

    static func readPart(_ body: [UInt8], _ range: Range<Int>, path: String, allowChangeSet: Bool) throws(PayloadError) -> BatchPart {
        let (headers, contentStart) = try readHeaders(body, range, path: path)
        let contentType = headers["Content-Type"] ?? ""
        if contentType.lowercased().hasPrefix("multipart/mixed") {
            guard allowChangeSet else {
                throw PayloadError(.malformedBatch, "Change sets must not be nested", offset: range.lowerBound, path: path)
            }
            guard let boundary = HTTPHeaders.parameter("boundary", in: contentType) else {
                throw PayloadError(.malformedBatch, "A change set's Content-Type needs a boundary", offset: range.lowerBound, path: path)
            }
            let split = try splitParts(body, contentStart..<range.upperBound, boundary: boundary, path: path)
            var operations: [BatchOperation] = []
            for (index, inner) in split.parts.enumerated() {
                let innerPath = "\(path), change set part \(index + 1)"
                guard case .operation(let operation) = try readPart(body, inner, path: innerPath, allowChangeSet: false) else {
                    throw PayloadError(.malformedBatch, "A change set may only hold operations", offset: inner.lowerBound, path: innerPath)
                }
                // Requests only (a response has no method): reads do not belong in a change set.
                if let method = operation.message.method?.uppercased(), method == "GET" || method == "HEAD" {
                    throw PayloadError(.malformedBatch, "A change set may not hold a \(method) request: put reads outside change sets",
                                       offset: inner.lowerBound, path: innerPath)
                }
                operations.append(operation)
            }
            return .changeSet(ChangeSet(boundary: boundary, partHeaders: headers, operations: operations))
        }
        if !contentType.isEmpty && !contentType.lowercased().hasPrefix("application/http") {
            throw PayloadError(.malformedBatch, "A batch part must be application/http or multipart/mixed, not \(contentType)", offset: range.lowerBound, path: path)
        }
        return .operation(BatchOperation(partHeaders: headers, message: try readMessage(body, contentStart..<range.upperBound, path: path)))
    }

    static func readMessage(_ body: [UInt8], _ range: Range<Int>, path: String) throws(PayloadError) -> BatchMessage {
        // Skip blank lines before the start line.
        var line = Lines.line(in: body, from: range.lowerBound, before: range.upperBound)
        while let blank = line, blank.content.isEmpty {
            line = Lines.line(in: body, from: blank.next, before: range.upperBound)
        }
        guard let first = line else {
            throw PayloadError(.malformedBatch, "The part holds no HTTP message", offset: range.lowerBound, path: path)
        }
        let text = String(decoding: body[first.content], as: UTF8.self).withoutOuterBlanks
        let words = text.split(separator: " ", maxSplits: 2).map(String.init)
        let startLine: BatchMessage.StartLine
        if let version = words.first, version.hasPrefix("HTTP/") {
            guard words.count >= 2, let status = Int(words[1]), (100...599).contains(status) else {
                throw PayloadError(.malformedBatch, "Malformed status line '\(text.prefix(60))'", offset: first.content.lowerBound, path: path)
            }
            startLine = .response(version: version, status: status, reason: words.count > 2 ? words[2] : "")
        } else {
            guard words.count >= 2, words[0].utf8.allSatisfy({ $0 >= 0x41 && $0 <= 0x5A }) else {
                throw PayloadError(.malformedBatch, "Malformed request line '\(text.prefix(60))'", offset: first.content.lowerBound, path: path)
            }
            startLine = .request(method: words[0], url: words[1], version: words.count > 2 ? words[2] : "HTTP/1.1")
        }
        let (headers, bodyStart) = try readHeaders(body, first.next..<range.upperBound, path: path)
        return BatchMessage(startLine: startLine, headers: headers, body: Array(body[min(bodyStart, range.upperBound)..<range.upperBound]))
    }

    // MARK: Writing

    /// Writes the batch with CRLF line ends; each embedded message's Content-Length is set to
    /// its body's size.
    public func write() -> [UInt8] {
        var out: [UInt8] = []
        func line(_ text: String) {
            out.append(contentsOf: text.utf8)
            out.append(contentsOf: [0x0D, 0x0A])
        }
        func writeHeaders(_ headers: HTTPHeaders) {
            for field in headers { line("\(field.name): \(field.value)") }
        }
        func writeOperation(_ operation: BatchOperation) {
            writeHeaders(operation.partHeaders)
            line("")
            switch operation.message.startLine {
            case .request(let method, let url, let version): line("\(method) \(url) \(version)")
            case .response(let version, let status, let reason):
                line("\(version) \(status) \(reason)".withoutOuterBlanks)
            }
            var headers = operation.message.headers
            if !operation.message.body.isEmpty || headers["Content-Length"] != nil {
                headers["Content-Length"] = String(operation.message.body.count)
            }
            writeHeaders(headers)
            line("")
            out.append(contentsOf: operation.message.body)
        }
        out.append(contentsOf: preamble)
        if !preamble.isEmpty { out.append(contentsOf: [0x0D, 0x0A]) }
        for part in parts {
            line("--" + boundary)
            switch part {
            case .operation(let operation):
                writeOperation(operation)
                out.append(contentsOf: [0x0D, 0x0A])
            case .changeSet(let set):
                var headers = set.partHeaders
                headers["Content-Type"] = "multipart/mixed; boundary=\(set.boundary)"
                writeHeaders(headers)
                line("")
                for operation in set.operations {
                    line("--" + set.boundary)
                    writeOperation(operation)
                    out.append(contentsOf: [0x0D, 0x0A])
                }
                line("--" + set.boundary + "--")
            }
        }
        line("--" + boundary + "--")
        out.append(contentsOf: epilogue)
        return out
    }
}

/// Reason phrases for common statuses.
enum HTTPStatus {
    static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 409: "Conflict"
        case 410: "Gone"
        case 412: "Precondition Failed"
        case 424: "Failed Dependency"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        default: ""
        }
    }
}

/// Content-ID references: `$1` at the start of a URL or as a bind value refers to the entity
/// created by the operation with `Content-ID: 1` earlier in the same change set.
public enum ContentIDReferences {
    /// Replaces a leading `$id` segment of `url` with the resolved location.
    public static func resolve(url: String, _ locations: [String: String]) -> String {
        guard url.hasPrefix("$") else { return url }
        let end = url.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? url.endIndex
        let id = String(url[url.index(after: url.startIndex)..<end])
        guard let location = locations[id] else { return url }
        return location + url[end...]
    }

    /// Replaces `"$id"` string values (binds, V2 `__metadata.uri`) in a JSON body.
    public static func resolve(body: [UInt8], _ locations: [String: String]) -> [UInt8] {
        guard !locations.isEmpty, let json = try? JSONValue.parse(body) else { return body }
        func replace(_ value: JSONValue) -> JSONValue {
            switch value {
            case .string(let s) where s.hasPrefix("$"):
                return .string(resolve(url: s, locations))
            case .array(let items): return .array(items.map(replace))
            case .object(let members): return .object(members.map { JSONValue.Member($0.name, replace($0.value)) })
            default: return value
            }
        }
        let replaced = replace(json)
        return replaced == json ? body : Array(replaced.serialized.utf8)
    }
}
