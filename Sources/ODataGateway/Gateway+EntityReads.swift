import Foundation
import ODataCore

extension Gateway {
    /// The scope and hash of the gateway's ETag a read of one entity names in `If-None-Match`,
    /// or nil when `request` is not such a read: a `GET` of `Set(key)` without `$` options.
    func conditionalEntityRead(_ request: GatewayRequest, model: Model) -> (scope: Int64, hash: String)? {
        guard request.method == "GET", configuration.gatewayETags,
            let condition = request.headers["If-None-Match"], let (scope, hash) = Self.parseGatewayETag(condition)
        else { return nil }
        let parts = request.target.split(separator: "?", maxSplits: 1)
        guard let path = parts.first.map(String.init), path.hasSuffix(")"),
            let open = path.firstIndex(of: "("), !path.contains("/")
        else { return nil }
        if parts.count == 2, parts[1].split(separator: "&").contains(where: { $0.hasPrefix("$") }) { return nil }
        let set = String(path[..<open])
        guard model.entitySet(set.removingPercentEncoding ?? set) != nil else { return nil }
        return (scope, hash)
    }

    /// Answers a read of one entity that names one of the gateway's ETags in `If-None-Match`:
    /// a device reading the backend's copy after a 412 (SPEC §15).
    ///
    /// The device's own read goes to the backend first (without the condition, which the
    /// backend does not know), so that the device gets only what its credentials may read, and
    /// an answer that carries the backend's own ETag goes back as it came. Otherwise the entity
    /// is read as the ETag's scope reads it, and answered with the gateway's ETag of that row, or
    /// `304 Not Modified` when the row still has the ETag named. A resend with the new ETag is
    /// then checked as every change is, so a third user's change in between is still caught.
    /// Where the scope's query does not hold the entity, the backend's answer goes as it came.
    func readWithGatewayETag(
        _ request: GatewayRequest, scope: Int64, hash: String, backend: GatewayBackend, model: Model
    ) async throws -> GatewayResponse {
        var plain = request
        plain.headers["If-None-Match"] = nil
        let answer = try await forward(plain, backend: backend)
        let legacy = model.version.isLegacy
        guard answer.status == 200, answer.headers["ETag"] == nil, !Self.carriesETag(answer.body, legacy: legacy),
            let query = try await store.query(ofScope: scope),
            let check = GatewayETagCheck(
                method: "GET", url: String(request.target.prefix { $0 != "?" }), scope: scope, query: query,
                request: request, backend: backend, model: model),
            let row = try await currentRow(check, request: request, backend: backend, model: model)
        else { return answer }
        var headers = HTTPHeaders()
        headers["ETag"] = Self.gatewayETag(scope: scope, hash: row.hash)
        headers[legacy ? "DataServiceVersion" : "OData-Version"] = legacy ? "2.0" : "4.0"
        if row.hash == hash { return GatewayResponse(status: 304, headers: headers, body: []) }
        let root = request.gatewayRoot
        let entity = Self.withETag(
            row.payload.replacingOccurrences(of: backend.url, with: root), scope: scope, hash: row.hash,
            legacy: legacy)
        let text: String
        if legacy {
            text = #"{"d":"# + entity + "}"
        } else {
            let context = JSONValue.string(root + "$metadata#" + check.set + "/$entity").serialized
            text = #"{"@odata.context":"# + context + (entity == "{}" ? "}" : "," + entity.dropFirst())
        }
        headers["Content-Type"] = "application/json"
        return GatewayResponse(status: 200, headers: headers, body: Array(text.utf8))
    }

    /// Whether an entity's payload carries an ETag at its top level (V4 `@odata.etag`, V3
    /// `odata.etag`, V2 `d.__metadata.etag`).
    static func carriesETag(_ body: [UInt8], legacy: Bool) -> Bool {
        guard let json = try? JSONValue.parse(body) else { return false }
        if legacy {
            let entity = json["d"]?["results"] ?? json["d"] ?? json
            return entity["__metadata"]?["etag"] != nil
        }
        return json["@odata.etag"] != nil || json["odata.etag"] != nil
    }
}
