public import Foundation
import Logging

/// The gateway's last warnings and errors, kept in memory for the admin API (`GET /api/log`)
/// and `oodata gateway diagnose`: an operator gets them without access to the host's log files.
/// Holds at most ``capacity`` lines; the oldest go first. Values that look like credentials
/// (`Authorization`, passwords, tokens) are masked before a line is kept.
public final class GatewayRecentLog: @unchecked Sendable {
    /// One kept line.
    public struct Line: Codable, Sendable, Equatable {
        /// When it was logged.
        public var time: Date
        /// `warning`, `error` or `critical`.
        public var level: String
        /// The message, then its metadata as `key=value`, masked.
        public var message: String
    }

    /// The most lines kept.
    public let capacity: Int
    private let lock = NSLock()
    private var lines: [Line] = []
    private var next = 0

    /// A log keeping the last `capacity` lines (at least 1).
    public init(capacity: Int = 500) { self.capacity = max(1, capacity) }

    /// The kept lines, oldest first.
    public var entries: [Line] {
        lock.lock()
        defer { lock.unlock() }
        return lines.count < capacity ? lines : Array(lines[next...] + lines[..<next])
    }

    func append(_ line: Line) {
        lock.lock()
        defer { lock.unlock() }
        if lines.count < capacity {
            lines.append(line)
        } else {
            lines[next] = line
            next = (next + 1) % capacity
        }
    }

    /// `text` with what looks like a credential replaced by `•••`: the value after
    /// `Authorization`, `Bearer`, `Basic`, `password`, `token`, `secret` or `key` (a `=`, `:` or
    /// a space between), and a URL's user information.
    public static func masked(_ text: String) -> String {
        var result = text
        let patterns = [
            #"(?i)(authorization["']?\s*[:=]\s*["']?)(bearer |basic )?[^\s"',;]+"#,
            #"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"#,
            #"(?i)((password|passwd|pwd|token|secret|api[_-]?key|hs_secret)["']?\s*[:=]\s*["']?)"#
                + #"[^\s"',;&]+"#,
            #"(?i)(://)[^/\s:@]+:[^/\s@]+@"#,
        ]
        let replacements = ["$1•••", "$1 •••", "$1•••", "$1•••@"]
        for (pattern, replacement) in zip(patterns, replacements) {
            guard let expression = try? NSRegularExpression(pattern: pattern) else { continue }
            result = expression.stringByReplacingMatches(
                in: result, range: NSRange(result.startIndex..., in: result), withTemplate: replacement)
        }
        return result
    }
}

/// Passes every line to the handler it wraps and keeps warnings and worse in a
/// ``GatewayRecentLog``.
struct RecordingLogHandler: LogHandler {
    var inner: any LogHandler
    let recent: GatewayRecentLog

    var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }
    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }
    var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        inner.log(event: event)
        guard event.level >= .warning else { return }
        var text = "\(event.message)"
        let all = inner.metadata.merging(event.metadata ?? [:]) { _, new in new }
        if !all.isEmpty {
            text += " " + all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        }
        let line = GatewayRecentLog.Line(
            time: Date(), level: "\(event.level)", message: GatewayRecentLog.masked(String(text.prefix(2000))))
        recent.append(line)
    }
}
