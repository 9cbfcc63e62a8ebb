import Crypto
import Foundation
import ODataCore
import OfflineOData
import PostgresNIO
import Logging

extension Gateway {
    /// A device's `GET $metadata` answered from the document the gateway keeps, while it was read
    /// or confirmed within ``GatewayConfiguration/metadataCheckInterval`` (after that the
    /// device's request goes to the backend, and its answer is kept), with
    /// the gateway's ETag: a device's check at each download is a 304 without a backend
    /// request. Only for credentials the backend accepted within ``CredentialCheck/metadataLifetime``;
    /// nil otherwise (the request is forwarded, as before).
    func metadataFromGateway(_ request: GatewayRequest, backend: GatewayBackend) async -> GatewayResponse? {
        guard request.method == "GET", request.target == "$metadata",
            // A CSRF token fetch gets its token (and session cookie) from the backend.
            request.headers["X-CSRF-Token"]?.lowercased() != "fetch",
            let kept = await models.document(for: backend.url, within: configuration.metadataCheckInterval),
            await credentialCheck.acceptedLately(credentials(of: request, backend: backend), backend: backend.url)
        else { return nil }
        var headers = HTTPHeaders()
        headers["ETag"] = kept.etag
        headers["Cache-Control"] = "no-cache"
        let condition = request.headers["If-None-Match"] ?? ""
        if condition.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == kept.etag }) {
            return GatewayResponse(status: 304, headers: headers)
        }
        headers["Content-Type"] = kept.contentType ?? "application/xml"
        let body = Self.rewrite(
            kept.body, contentType: headers["Content-Type"], encoded: false, from: backend.url, to: request.gatewayRoot)
        return GatewayResponse(status: 200, headers: headers, body: body)
    }
}

/// Each backend's model, read from its `$metadata`. A backend's `$metadata` can change under
/// the gateway (SPEC §14): every `$metadata` a device reads through this instance is compared
/// with the one kept (by its bytes first), and a model older than `maximumAge` is read again.
actor ModelCache {
    private struct Entry {
        var model: Model
        /// The SHA-256 of the `$metadata` the model was read from.
        var digest: String
        var read: ContinuousClock.Instant
        /// The document as the backend sent it, its content type, and the backend's ETag.
        var body: [UInt8]
        var contentType: String?
        var backendETag: String?
    }

    /// The `$metadata` document kept for `backend`, with the gateway's ETag of it
    /// (`W/"md.<digest>"`), while it was read or confirmed within `seconds` (and ``maximumAge``).
    func document(for backend: String, within seconds: Double) -> (body: [UInt8], contentType: String?, etag: String)? {
        guard seconds > 0, let entry = models[backend],
            ContinuousClock.now - entry.read < .milliseconds(Int64(min(seconds, 300) * 1000))
        else { return nil }
        return (entry.body, entry.contentType, "W/\"md." + entry.digest.prefix(32) + "\"")
    }

    private var models: [String: Entry] = [:]

    /// Whether a model of `backend` was read (readiness).
    func hasModel(for backend: String) -> Bool { models[backend] != nil }
    /// How long a model is used before the backend's `$metadata` is read again.
    static let maximumAge: Duration = .seconds(300)

    func model(for backend: GatewayBackend, credentials: HTTPHeaders, gateway: Gateway) async throws -> Model {
        let kept = models[backend.url]
        if let kept, ContinuousClock.now - kept.read < Self.maximumAge { return kept.model }
        do {
            var headers = HTTPHeaders()
            headers["Accept"] = "application/xml"
            let sent = credentials.contains { _ in true } ? credentials : Gateway.shared(backend)
            for field in sent { headers[field.name] = field.value }
            // Conditional where the backend gave an ETag: an unchanged document is a 304.
            if let kept, let etag = kept.backendETag { headers["If-None-Match"] = etag }
            gateway.metrics.backendRequests("metadata").increment()
            let response = try await gateway.transport.send(
                TransportRequest(method: "GET", url: backend.url + "$metadata", headers: headers),
                timeout: gateway.configuration.backendTimeout)
            if response.status == 304, let kept {
                models[backend.url]?.read = .now
                return kept.model
            }
            guard response.status == 200 else { throw BackendAnswer(response: response) }
            return try learn(
                response.body, for: backend.url, contentType: response.headers["Content-Type"],
                etag: response.headers["ETag"])
        } catch {
            // A model read before goes on serving while the backend's $metadata cannot be read
            // again (it is tried again at the next request).
            guard let kept else { throw error }
            gateway.logger.warning(
                "Reading the backend's $metadata again failed; the model read before is used",
                metadata: ["backend": .string(backend.url), "error": .string("\(error)")])
            return kept.model
        }
    }

    /// Takes the `$metadata` a device just read from the backend through the gateway: a model
    /// that differs from the one kept replaces it. Returns the model now kept.
    @discardableResult
    func learn(
        _ body: [UInt8], for backend: String, contentType: String? = nil, etag: String? = nil
    ) throws -> Model {
        let digest = GatewayStore.hex(SHA256.hash(data: body))
        if let entry = models[backend], entry.digest == digest {
            models[backend]?.read = .now
            if let etag { models[backend]?.backendETag = etag }
            return entry.model
        }
        let model: Model
        do {
            model = try MetadataParser().parse(Data(body))
        } catch {
            throw GatewayError(status: 502, code: "BackendMetadata", "The backend's $metadata does not parse: \(error)")
        }
        models[backend] = Entry(
            model: model, digest: digest, read: .now, body: body, contentType: contentType, backendETag: etag)
        return model
    }
}
