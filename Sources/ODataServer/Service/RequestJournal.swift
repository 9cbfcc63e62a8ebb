public import Foundation
public import ODataCore

/// The last requests the service received over HTTP, rendered as text, for tests and for
/// looking at what a client really sent. A `$batch` shows its parts, with change sets
/// indented:
///
/// ```
/// POST $batch
///   changeset
///     POST Customers {"Name":"Jane"}
///     PATCH $1 {"Name":"Jane Doe"}
///   POST Products {"ProductID":"P1"}
/// ```
public actor RequestJournal {
    /// How many requests are kept (the oldest go first); 0 keeps none.
    public let capacity: Int
    /// Requests not rendered yet (rendering parses a `$batch` again: it is done when the
    /// journal is read), at most ``pendingBytes`` of bodies; and rendered ones.
    private var pending: [ServiceRequest] = []
    private var pendingSize = 0
    private var entries: [String] = []
    /// The request line and headers of the last requests, as received.
    private var heads: [(request: String, headers: HTTPHeaders)] = []
    /// When each of ``heads`` arrived.
    private var times: [Date] = []
    /// Bodies of more than this many bytes in all are rendered as they come.
    static let pendingBytes = 4 << 20

    /// Creates an empty journal.
    public init(capacity: Int) { self.capacity = capacity }

    /// Records one request.
    public func record(_ request: ServiceRequest) {
        guard capacity > 0 else { return }
        heads.append(("\(request.method) \(request.target)", request.headers))
        times.append(Date())
        if heads.count > capacity {
            heads.removeFirst()
            times.removeFirst()
        }
        pending.append(request)
        pendingSize += request.body.count
        // The oldest go first: rendered ones, then those not rendered yet.
        if entries.count + pending.count > capacity {
            if !entries.isEmpty {
                entries.removeFirst()
            } else {
                pendingSize -= pending.removeFirst().body.count
            }
        }
        if pendingSize > Self.pendingBytes { renderPending() }
    }

    private func renderPending() {
        entries += pending.map(Self.render)
        pending = []
        pendingSize = 0
        if entries.count > capacity { entries.removeFirst(entries.count - capacity) }
    }

    /// The recorded requests, oldest first.
    public func requests() -> [String] {
        renderPending()
        return entries
    }

    /// The request line (`GET Products?$top=1`) and the headers of the recorded requests,
    /// oldest first: what a client really sent.
    public func requestHeaders() -> [(request: String, headers: HTTPHeaders)] { heads }

    /// The request line of the recorded requests with the time each arrived, oldest first
    /// (how often a client read something, per period).
    public func timedRequests() -> [(at: Date, request: String)] {
        zip(times, heads).map { ($0, $1.request) }
    }

    /// Forgets every recorded request.
    public func clear() {
        heads = []
        times = []
        entries = []
        pending = []
        pendingSize = 0
    }

    static func render(_ request: ServiceRequest) -> String {
        let head = "\(request.method) \(request.target)"
        let contentType = request.headers["Content-Type"] ?? ""
        guard request.path == "$batch", contentType.lowercased().hasPrefix("multipart/") else {
            return head + body(request.body)
        }
        guard
            let batch = try? MultipartBatch.read(
                request.body, boundary: HTTPHeaders.parameter("boundary", in: contentType))
        else {
            return head + " (not valid multipart)"
        }
        var lines = [head]
        func line(_ message: BatchMessage, indent: String) {
            lines.append(indent + "\(message.method ?? "?") \(message.url ?? "?")" + body(message.body))
        }
        for part in batch.parts {
            switch part {
            case .operation(let operation): line(operation.message, indent: "  ")
            case .changeSet(let set):
                lines.append("  changeset")
                for operation in set.operations { line(operation.message, indent: "    ") }
            }
        }
        return lines.joined(separator: "\n")
    }

    private static func body(_ bytes: [UInt8]) -> String {
        guard !bytes.isEmpty else { return "" }
        let text = String(decoding: bytes.prefix(2048), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return " " + text + (bytes.count > 2048 ? "…" : "")
    }
}
