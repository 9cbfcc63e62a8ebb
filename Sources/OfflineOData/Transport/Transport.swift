public import Foundation
public import ODataCore
public import Logging

/// An HTTP request the provider sends.
public struct TransportRequest: Sendable {
    /// HTTP method.
    public var method: String
    /// Absolute URL.
    public var url: String
    /// Request headers.
    public var headers: HTTPHeaders
    /// Request body (empty for none).
    public var body: [UInt8]

    /// Creates a value from its parts.
    public init(method: String, url: String, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// An HTTP response.
public struct TransportResponse: Sendable {
    /// HTTP status code.
    public var status: Int
    /// Response headers.
    public var headers: HTTPHeaders
    /// Response body.
    public var body: [UInt8]

    /// Creates a value from its parts.
    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// Sends HTTP requests for the providers.
///
/// Two come with the package: ``URLSessionTransport`` (the default on Apple platforms) and
/// `AsyncHTTPClientTransport` (the default on Linux, where it is the only one that needs
/// SwiftNIO). ``DefaultTransport/make(logger:)`` gives the platform's default.
public protocol Transport: Sendable {
    /// Sends one request; `timeout` is in seconds without network activity. A failure to
    /// connect, a dropped connection or a timeout throws ``TransportError``; cancelling the
    /// calling task throws `CancellationError`.
    func send(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse
}

/// The transport a provider uses when the app gives none.
public enum DefaultTransport {
    /// ``URLSessionTransport`` on Apple platforms, `AsyncHTTPClientTransport` on Linux, each
    /// logging its exchanges to `logger`.
    public static func make(logger: Logger = OfflineODataLogging.disabled) -> any Transport {
        #if os(Linux)
            AsyncHTTPClientTransport(logger: logger)
        #else
            URLSessionTransport(logger: logger)
        #endif
    }
}

/// A transport failure: the connection dropped, timed out, or the URL was bad.
public struct TransportError: Error, Sendable, CustomStringConvertible {
    /// What went wrong.
    public var message: String
    /// The URL that was being requested.
    public var url: String

    /// Creates an error.
    public init(_ message: String, url: String) {
        self.message = message
        self.url = url
    }

    public var description: String { "\(message) (\(url))" }
}

extension Duration {
    /// The duration in seconds, with its fraction.
    var timeInterval: TimeInterval {
        let parts = components
        return TimeInterval(parts.seconds) + TimeInterval(parts.attoseconds) / 1e18
    }

    /// The duration in whole milliseconds (for `duration-ms` log fields).
    var milliseconds: Int64 {
        let parts = components
        return parts.seconds * 1000 + parts.attoseconds / 1_000_000_000_000_000
    }
}
