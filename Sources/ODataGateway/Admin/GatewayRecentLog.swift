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

    /// `text` with what looks like a credential replaced by `•••`: an `Authorization` value
    /// (its scheme, any, kept), a `Bearer`, `Basic` or `Negotiate` credential anywhere, a
    /// `Cookie` or `Set-Cookie` value, a JWT, the value after `password`, `token`, `secret`,
    /// `api_key` and the like (a `=` or `:` between), Digest's `response` and `nonce`, and a
    /// URL's user information.
    public static func masked(_ text: String) -> String {
        var result = text
        for (expression, template) in maskings {
            result = expression.stringByReplacingMatches(
                in: result, range: NSRange(result.startIndex..., in: result), withTemplate: template)
        }
        return result
    }

    private static let maskings: [(NSRegularExpression, String)] = {
        let secretNames = "password|passwd|pwd|token|secret|api[_-]?key|credential"
        let patterns: [(String, String)] = [
            // A JWT wherever it is (three base64url parts, the first a JSON object).
            (#"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"#, "•••"),
            // Authorization: SCHEME CREDENTIAL, whatever the scheme and the spaces.
            (
                #"(?i)((?:proxy-)?authorization["']?\s*[:=]\s*["']?(?:[A-Za-z][A-Za-z0-9_-]*[ \t]+)?)"#
                    + #"[^\s"',;]+"#, "$1•••"
            ),
            (#"(?i)\b(bearer|basic|negotiate)[ \t]+[A-Za-z0-9._~+/=-]{4,}"#, "$1 •••"),
            // A cookie header's value, to the end of the line or quote.
            (#"(?i)(\b(?:set-)?cookie["']?\s*[:=]\s*["']?)[^\r\n"']+"#, "$1•••"),
            (#"(?i)((?:"# + secretNames + #")["']?\s*[:=]\s*["']?)[^\s"',;&]+"#, "$1•••"),
            (#"(?i)(\b(?:response|nonce|cnonce)\s*=\s*"?)[^\s"',;]+"#, "$1•••"),
            (#"(?i)(://)[^/\s:@]+:[^/\s@]+@"#, "$1•••@"),
        ]
        return patterns.compactMap { pattern, template in
            (try? NSRegularExpression(pattern: pattern)).map { ($0, template) }
        }
    }()
}

/// Passes the lines of the log level set to the handler it wraps, and keeps warnings and
/// worse in a ``GatewayRecentLog`` whatever that level (`--log-level error` still keeps
/// warnings for the admin API).
struct RecordingLogHandler: LogHandler {
    private var inner: any LogHandler
    private var innerLevel: Logger.Level
    let recent: GatewayRecentLog

    init(inner: any LogHandler, recent: GatewayRecentLog) {
        self.inner = inner
        self.innerLevel = inner.logLevel
        self.recent = recent
    }

    var logLevel: Logger.Level {
        get { min(innerLevel, .warning) }
        set {
            innerLevel = newValue
            inner.logLevel = newValue
        }
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
        if event.level >= innerLevel { inner.log(event: event) }
        guard event.level >= .warning else { return }
        var text = "\(event.message)"
        let all = inner.metadata.merging(event.metadata ?? [:]) { _, new in new }
        if !all.isEmpty {
            text += " " + all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        }
        // Masked before it is cut, so that no credential is cut short of its pattern.
        let masked = GatewayRecentLog.masked(String(text.prefix(16_000)))
        recent.append(
            GatewayRecentLog.Line(time: Date(), level: "\(event.level)", message: String(masked.prefix(2000))))
    }
}
