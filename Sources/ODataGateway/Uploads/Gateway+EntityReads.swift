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
        if parts.count == 2,
            parts[1].split(separator: "&").contains(where: { ($0.removingPercentEncoding ?? String($0)).hasPrefix("$") }
            )
        {
            return nil
        }
        let set = String(path[..<open])
        guard model.entitySet(set.removingPercentEncoding ?? set) != nil else { return nil }
        return (scope, hash)
    }

    /// Answers a read of one entity that names one of the gateway's ETags in `If-None-Match`:
    /// a device reading the backend's copy after a 412 (SPEC §15).
    ///
    /// The ETag's scope must be the device's user's or shared, and serve this backend. The
    /// entity is read as that scope reads it (the same read as an upload's ETag check), which
    /// gives the gateway's ETag of its row now. Then the device's own read goes to the backend,
    /// with its credentials and without the condition (which the backend does not know): the
    /// device gets that answer, and only that, with the gateway's ETag added (in the `ETag`
    /// header and in the payload), or `304 Not Modified` when the row still has the ETag named.
    /// The scope's read comes first, so that a change between the two reads leaves an older
    /// ETag with a newer body: a resend with it is refused (412), never the reverse.
    /// An answer that carries the backend's own ETag, an error, or a scope that does not hold
    /// the entity (or cannot be read) leaves the device's answer as the backend gave it.
    func readWithGatewayETag(
        _ request: GatewayRequest, scope: Int64, hash: String, backend: GatewayBackend, model: Model
    ) async throws -> GatewayResponse {
        var plain = request
        plain.headers["If-None-Match"] = nil
        let legacy = model.version.isLegacy
        var row: (payload: String, hash: String)?
        if let query = try await store.query(ofScope: scope, backend: backend.url, user: request.user),
            let check = GatewayETagCheck(
                method: "GET", url: String(request.target.prefix { $0 != "?" }), scope: scope, query: query,
                request: request, backend: backend, model: model)
        {
            row = try? await currentRow(check, request: request, backend: backend, model: model)
        }
        let answer = try await forward(plain, backend: backend)
        guard let row, answer.status == 200, answer.headers["ETag"] == nil,
            answer.headers["Content-Encoding"] == nil
        else { return answer }
        let etag = Self.gatewayETag(scope: scope, hash: row.hash)
        guard let body = Self.entity(answer.body, withETag: etag, legacy: legacy) else { return answer }
        var headers = answer.headers
        headers["ETag"] = etag
        if row.hash == hash {
            var notModified = HTTPHeaders()
            notModified["ETag"] = etag
            notModified[legacy ? "DataServiceVersion" : "OData-Version"] = legacy ? "2.0" : "4.0"
            return GatewayResponse(status: 304, headers: notModified, body: [])
        }
        return GatewayResponse(status: 200, headers: headers, body: body)
    }

    /// A single entity's payload (V4: the entity at the top level; V2: `d`) with `etag` as its
    /// ETag annotation, or nil when it is not such a payload or already carries an ETag.
    static func entity(_ body: [UInt8], withETag etag: String, legacy: Bool) -> [UInt8]? {
        guard let json = try? JSONValue.parse(body), case .object(var members) = json else { return nil }
        let tag = JSONValue.string(etag)
        if legacy {
            guard let index = members.firstIndex(where: { $0.name == "d" }),
                case .object(var entity) = members[index].value, !entity.contains(where: { $0.name == "results" })
            else { return nil }
            if let at = entity.firstIndex(where: { $0.name == "__metadata" }) {
                guard case .object(var metadata) = entity[at].value, !metadata.contains(where: { $0.name == "etag" })
                else { return nil }
                metadata.insert(JSONValue.Member("etag", tag), at: 0)
                entity[at].value = .object(metadata)
            } else {
                entity.insert(JSONValue.Member("__metadata", .object([JSONValue.Member("etag", tag)])), at: 0)
            }
            members[index].value = .object(entity)
        } else {
            guard !members.contains(where: { $0.name == "@odata.etag" || $0.name == "odata.etag" }) else {
                return nil
            }
            let at =
                members.firstIndex { $0.name == "@odata.context" || $0.name == "odata.metadata" }.map { $0 + 1 } ?? 0
            members.insert(JSONValue.Member("@odata.etag", tag), at: at)
        }
        return Array(JSONValue.object(members).serialized.utf8)
    }
}
