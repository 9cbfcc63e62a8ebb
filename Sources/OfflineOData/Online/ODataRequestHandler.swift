import Foundation
import ODataCore
public import ODataStore

/// The answer of a provider (offline, online or the router) to a request string.
public struct ODataResponse: Sendable {
    /// HTTP status (offline: 200, 201, 204, 404, as the backend would answer).
    public var status: Int
    /// The response body in the service's JSON format.
    public var body: [UInt8]
    /// The same answer as a model value, for reads, creates and operation results.
    public var result: QueryResult?
    /// Response headers (online answers; offline ones have none).
    public var headers: [String: String] = [:]

    /// Creates a value from its parts.
    public init(status: Int, body: [UInt8], result: QueryResult?, headers: [String: String] = [:]) {
        self.status = status
        self.body = body
        self.result = result
        self.headers = headers
    }
}

/// The offline provider's answer (the same type as every provider's).
public typealias OfflineODataResponse = ODataResponse

/// The request API that the offline provider, the online provider and the router share, so an
/// app can hold any of them.
public protocol ODataRequestHandler: Sendable {
    /// Runs an OData request string: method, URL relative to the service root (or absolute),
    /// headers and body.
    func execute(
        method: String, url: String, headers: [String: String], body: [UInt8], options: OfflineODataRequestOptions
    ) async throws -> ODataResponse
    /// Reads a URL as a model value.
    func read(_ url: String) async throws -> QueryResult
}
