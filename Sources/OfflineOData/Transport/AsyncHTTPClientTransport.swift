public import AsyncHTTPClient
public import Foundation
import NIOCore
import NIOHTTP1
import ODataCore

/// The default transport on Linux, on AsyncHTTPClient.
public final class AsyncHTTPClientTransport: Transport {
    private let client: HTTPClient

    /// Uses `client`, or the shared singleton client.
    public init(client: HTTPClient = .shared) {
        self.client = client
    }

    /// Sends the request; a connection failure or timeout becomes a `TransportError`.
    public func send(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
        var http = HTTPClientRequest(url: request.url)
        http.method = HTTPMethod(rawValue: request.method)
        for field in request.headers { http.headers.add(name: field.name, value: field.value) }
        if !request.body.isEmpty {
            http.body = .bytes(ByteBuffer(bytes: request.body))
        }
        let limit = TimeAmount.milliseconds(Int64((timeout ?? 60) * 1000))
        do {
            let response = try await client.execute(http, timeout: limit)
            var headers = ODataCore.HTTPHeaders()
            for field in response.headers { headers.add(field.name, field.value) }
            let body = try await response.body.collect(upTo: 1 << 30)
            return TransportResponse(status: Int(response.status.code), headers: headers, body: Array(body.readableBytesView))
        } catch {
            throw TransportError("The request failed: \(error)", url: request.url)
        }
    }
}
