import Foundation
public import Logging

/// Keeps every log record, for tests: a `LogHandler` of the test, not of the code under test.
public final class LogCapture: @unchecked Sendable {
    public struct Record: CustomStringConvertible {
        public var level: Logger.Level
        public var message: String
        public var metadata: [String: String]
        /// The message and the metadata values, as a log line would show them.
        public var text: String {
            ([message] + metadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }).joined(separator: " ")
        }
        public var description: String { "\(level) \(text)" }
    }

    private let lock = NSLock()
    private var records: [Record] = []

    public init() {}

    /// Every record so far, in order.
    public var all: [Record] { lock.withLock { records } }

    func append(_ record: Record) { lock.withLock { records.append(record) } }

    /// A logger whose records at `level` and above are kept here.
    public func logger(level: Logger.Level) -> Logger {
        var logger = Logger(label: "test") { _ in Handler(capture: self) }
        logger.logLevel = level
        return logger
    }

    struct Handler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            var merged = metadata
            for (key, value) in event.metadata ?? [:] { merged[key] = value }
            capture.append(
                Record(level: event.level, message: event.message.description, metadata: merged.mapValues { "\($0)" }))
        }
    }
}
