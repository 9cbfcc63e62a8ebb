import Crypto
import Foundation
import ODataCore
import OfflineOData
import PostgresNIO
import Logging

extension Gateway {
    /// Where a device's operation is on the gateway: `{"step": …, "number": …, "count": …}`
    /// (`step` null when the gateway has no word of it yet).
    func progressAnswer(_ operation: String, user: String) async -> GatewayResponse {
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers["Cache-Control"] = "no-store"
        guard let id = Self.operationID(operation) else {
            return .error(
                GatewayError(status: 400, code: "BadOperation", "The operation ID is not one a device sends"),
                legacy: false)
        }
        let found = try? await store.progress(id, user: user)
        var members: [JSONValue.Member] = [JSONValue.Member("step", found.map { .string($0.step) } ?? .null)]
        if let number = found?.number { members.append(JSONValue.Member("number", .number(String(number)))) }
        if let count = found?.count { members.append(JSONValue.Member("count", .number(String(count)))) }
        return GatewayResponse(status: 200, headers: headers, body: Array(JSONValue.object(members).serialized.utf8))
    }

    /// A device's operation ID (`OOData-Operation`), when it has the shape one has: up to 64
    /// letters, digits and dashes.
    static func operationID(_ text: String?) -> String? {
        guard let text, !text.isEmpty, text.count <= 64,
            text.utf8.allSatisfy({ $0 < 128 }),
            text.unicodeScalars.allSatisfy({ CharacterSet.alphanumerics.contains($0) || $0 == "-" })
        else { return nil }
        return text
    }

    /// Records a step of the device's operation that `request` belongs to, if it named one.
    /// Progress is for showing: a failure to record it is ignored.
    /// On `connection` when the caller holds one (asking the pool for a second one while
    /// holding the first could wait for ever when the pool runs dry); otherwise in a task of
    /// its own, which nothing waits for (a refresh holds its transaction's connection).
    func report(
        _ request: GatewayRequest, _ step: String, number: Int? = nil, count: Int? = nil,
        on connection: PostgresConnection? = nil
    ) async {
        guard let operation = Self.operationID(request.headers["OOData-Operation"]) else { return }
        let user = request.user
        if let connection {
            try? await store.setProgress(
                operation, user: user, step: step, number: number, count: count, on: connection)
            return
        }
        let store = self.store
        Task {
            try? await store.withConnection { connection in
                try await store.setProgress(
                    operation, user: user, step: step, number: number, count: count, on: connection)
            }
        }
    }
}
