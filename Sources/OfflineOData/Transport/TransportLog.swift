import Foundation
public import Logging
import ODataCore

/// Logging for this package.
///
/// The providers, the transports and the reference server log through a `Logger` the app
/// passes in; by default they log nothing (``disabled``). Messages are fixed texts, with what
/// varies in metadata: request ID, method, URL with its query values and key predicates left
/// out, status, duration, batch and change-set counts. Bodies, keys and full URLs are only
/// logged at `trace` (the reference server's record of an internal error is the exception: it
/// carries the error's description, SQLite's message and SQL text, never bound values).
/// Levels:
/// - `trace`: full URLs; `debug`: each HTTP exchange;
/// - `info`: summaries of opens, uploads and downloads;
/// - `notice`: retries, CSRF token and credential refreshes;
/// - `warning`: a failed HTTP exchange or a request that went to the ErrorArchive;
/// - `error`: a failed open, upload or download.
public enum OfflineODataLogging {
    /// A logger that drops every record: the default everywhere in this package.
    public static let disabled = Logger(label: "OfflineOData", factory: { _ in SwiftLogNoOpLogHandler() })

    /// `url` as logged above `trace`: query option values and key predicates become `…`, so
    /// `https://h/odata/Customers('ALFKI')/Orders?$filter=City eq 'Rome'&$top=5` gives
    /// `https://h/odata/Customers(…)/Orders?$filter=…&$top=…`.
    public static func redacted(_ url: String) -> String { LogRedaction.url(url) }
}

/// Numbers the HTTP exchanges of the process, for the `request-id` of their log records.
enum RequestIDs {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var last: UInt64 = 0

    static func next() -> String {
        lock.withLock {
            last &+= 1
            return "r\(last)"
        }
    }
}

/// The log records of one transport's exchanges.
struct TransportLog: Sendable {
    let logger: Logger
    /// `URLSession` or `AsyncHTTPClient`.
    let transport: String

    /// Runs one exchange (`send`), logging how it ended: `debug` with the answer, `warning`
    /// when it failed with a ``TransportError``.
    func exchange(
        _ request: TransportRequest, _ send: () async throws -> TransportResponse
    ) async throws -> TransportResponse {
        let log = ExchangeLog(logger: logger, transport: transport, request: request)
        do {
            let response = try await send()
            log.finished(response)
            return response
        } catch let error as TransportError {
            log.failed(error)
            throw error
        }
    }
}

/// Logs how one exchange ended: `debug` when it got an answer, `warning` when it failed.
struct ExchangeLog {
    let logger: Logger
    let id = RequestIDs.next()
    let metadata: Logger.Metadata
    let started = ContinuousClock.now
    let url: String

    init(logger: Logger, transport: String, request: TransportRequest) {
        self.logger = logger
        self.url = request.url
        self.metadata = [
            "request-id": .string(id), "transport": .string(transport), "method": .string(request.method),
            "url": .string(OfflineODataLogging.redacted(request.url)),
            "bytes-sent": .stringConvertible(request.body.count),
        ]
        logger.trace("HTTP request", metadata: ["request-id": .string(id), "full-url": .string(request.url)])
    }

    private var milliseconds: Int { Int((ContinuousClock.now - started).milliseconds) }

    func finished(_ response: TransportResponse) {
        var metadata = self.metadata
        metadata["status"] = .stringConvertible(response.status)
        metadata["duration-ms"] = .stringConvertible(milliseconds)
        metadata["bytes-received"] = .stringConvertible(response.body.count)
        logger.debug("HTTP exchange finished", metadata: metadata)
    }

    func failed(_ error: TransportError) {
        var metadata = self.metadata
        metadata["duration-ms"] = .stringConvertible(milliseconds)
        metadata["error"] = .string(error.message)
        logger.warning("HTTP exchange failed", metadata: metadata)
    }
}
