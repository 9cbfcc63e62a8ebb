import Foundation
import ODataCore
import OfflineOData

extension Gateway {
    /// `POST $oodata/support[/<name>]`: a chunk of a store the device sends for support
    /// (``OfflineODataProvider/sendStore(to:supportKey:chunkSize:)``, `Content-Range: bytes
    /// a-b/total`), kept in PostgreSQL per identity and name, within the endpoint's size limit.
    /// Only the admin port lists and serves them; a device can only send.
    func supportChunk(_ request: GatewayRequest, backend: GatewayBackend, rest: String) async throws -> GatewayResponse
    {
        guard request.method == "POST" else {
            throw GatewayError(
                status: 405, code: "MethodNotAllowed",
                "A device sends support stores with POST $oodata/support/<name>; operators read them on the admin port")
        }
        // Only a device the backend takes may leave a store here (its refusal is the answer),
        // and never one without credentials: anonymous callers would share one identity.
        try await requireCredentials(
            request, backend: backend, code: "SupportNeedsCredentials",
            "A support store is kept per identity: send it with the credentials the backend takes")
        let name = rest.isEmpty ? "store" : (rest.removingPercentEncoding ?? rest)
        guard (1...100).contains(name.utf8.count),
            name.utf8.allSatisfy({
                $0 < 128
                    && (Character(UnicodeScalar($0)).isLetter || Character(UnicodeScalar($0)).isNumber
                        || "._-".utf8.contains($0))
            }),
            !name.hasPrefix(".")
        else {
            throw GatewayError(
                status: 400, code: "BadSupportName",
                "A support store's name is 1 to 100 letters, digits, '.', '_' or '-', not starting with '.'")
        }
        let bytes = request.body
        let (start, end, total) = try Self.contentRange(request.headers["Content-Range"], count: bytes.count)
        guard total <= backend.supportStoreLimit else {
            throw GatewayError(
                status: 413, code: "SupportStoreTooLarge",
                "The store is \(total) bytes; this gateway keeps support stores of at most "
                    + "\(backend.supportStoreLimit) bytes (support_store_max_mb)")
        }
        let outcome = try await store.takeSupportChunk(
            backend: backend.url, user: request.user, name: name, instance: Self.clientInstanceID(request),
            appVersion: request.headers["OOData-App-Version"].map { String($0.prefix(64)) }, start: start,
            total: total, bytes: bytes, totalLimit: backend.supportStoreTotalLimit)
        let received: Int64
        switch outcome {
        case .taken(let taken, _): received = taken
        case .notContinued:
            throw GatewayError(
                status: 416, code: "SupportRangeNotContinued",
                "bytes \(start)-\(end)/\(total) do not continue support store \(name): send it again from byte 0")
        case .full(let used):
            throw GatewayError(
                status: 413, code: "SupportStoresFull",
                "The support stores of this endpoint take \(used) bytes; a store of \(total) more would pass "
                    + "\(backend.supportStoreTotalLimit) (support_store_total_mb): ask the operator to remove some")
        }
        if received == total, end + 1 == total {
            logger.notice(
                "A device sent a store for support",
                metadata: ["name": .string(name), "bytes": .stringConvertible(total), "backend": .string(backend.url)])
        }
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers["Cache-Control"] = "no-store"
        let body = JSONValue.object([
            JSONValue.Member("name", .string(name)), JSONValue.Member("received", .string(String(received))),
            JSONValue.Member("total", .string(String(total))),
        ])
        return GatewayResponse(status: 200, headers: headers, body: Array(body.serialized.utf8))
    }

    /// `bytes a-b/total` with `b - a + 1 == count`; no header: the body is the whole store.
    static func contentRange(_ header: String?, count: Int) throws -> (Int64, Int64, Int64) {
        guard count > 0 else {
            throw GatewayError(status: 400, code: "BadContentRange", "A support store's chunk is not empty")
        }
        guard let header else { return (0, Int64(count) - 1, Int64(count)) }
        let text = header.trimmingCharacters(in: .whitespaces)
        let fail = GatewayError(
            status: 400, code: "BadContentRange",
            "Content-Range '\(text.prefix(80))' is not 'bytes FIRST-LAST/TOTAL' for the \(count) bytes sent")
        guard text.lowercased().hasPrefix("bytes ") else { throw fail }
        // Digits only, each part present: `bytes 0--3/10` or `+5` are no ranges.
        func number(_ part: Substring) -> Int64? {
            guard !part.isEmpty, part.count <= 18, part.utf8.allSatisfy({ (48...57).contains($0) }) else { return nil }
            return Int64(part)
        }
        let parts = text.dropFirst(6).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let total = number(parts[1]) else { throw fail }
        let range = parts[0].split(separator: "-", omittingEmptySubsequences: false)
        guard range.count == 2, let first = number(range[0]), let last = number(range[1]), last >= first,
            last < total, last - first + 1 == Int64(count)
        else { throw fail }
        return (first, last, total)
    }
}
