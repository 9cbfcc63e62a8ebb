import ODataCore
import ODataStore

extension ODataService {
    /// The repeatability ID of a modification: `Repeatability-Request-ID` (with
    /// `Repeatability-First-Sent`) or the legacy `RequestID` (with `RepeatabilityCreation`).
    /// Under ``Options/users`` each user has IDs of its own: a repeat is answered only to the
    /// user who sent the first request.
    func repeatabilityID(_ request: ServiceRequest) -> String? {
        guard options.honorsRepeatableRequests else { return nil }
        guard ["POST", "PUT", "PATCH", "MERGE", "DELETE"].contains(request.method) else { return nil }
        let scope = request.user.map { "user:" + $0.name + ":" } ?? ""
        if let id = request.headers["Repeatability-Request-ID"], !id.isEmpty { return scope + id }
        if let id = request.headers["RequestID"], !id.isEmpty { return scope + "legacy:" + id }
        return nil
    }

    /// A stored response for a repeated request, marked `Repeatability-Result: accepted`.
    func repeatedResponse(_ request: ServiceRequest) async throws -> ServiceResponse? {
        guard let id = repeatabilityID(request) else { return nil }
        return try await store.read { reader in try Self.stored(id, reader.connection) }
    }

    static func stored(_ id: String, _ db: Connection) throws -> ServiceResponse? {
        let rows = try db.query("SELECT status, headers, body FROM server_repeatability WHERE id = ?", [.text(id)])
        guard let row = rows.first, case .integer(let status) = row[0] else { return nil }
        var response = ServiceResponse(status: Int(status))
        if case .text(let text) = row[1], let json = try? JSONValue.parse(Array(text.utf8)) {
            for member in json.objectMembers ?? [] { response.headers.add(member.name, member.value.stringValue ?? "") }
        }
        if case .blob(let body) = row[2] { response.body = body }
        response.headers["Repeatability-Result"] = "accepted"
        return response
    }

    /// Remembers the response of a successful modification in the same transaction, so that
    /// the change and the record of it commit together.
    func remember(_ request: ServiceRequest, _ response: ServiceResponse, _ writer: StoreWriter) throws {
        guard let id = repeatabilityID(request), response.status < 400 else { return }
        let headers = JSONValue.object(response.headers.map { JSONValue.Member($0.name, .string($0.value)) }).serialized
        let firstSent = request.headers["Repeatability-First-Sent"] ?? request.headers["RepeatabilityCreation"] ?? ""
        try writer.connection.execute(
            "INSERT OR REPLACE INTO server_repeatability (id, first_sent, status, headers, body) VALUES (?, ?, ?, ?, ?)",
            [.text(id), .text(firstSent), .integer(Int64(response.status)), .text(headers), .blob(response.body)])
    }

    /// A modification in its own transaction, remembered for repeats.
    func modifyRemembering(_ request: ServiceRequest) async throws -> ServiceResponse {
        let checks = try await checkRows([request])
        return try await store.write { writer in
            if let id = self.repeatabilityID(request), let stored = try Self.stored(id, writer.connection) {
                return stored
            }
            var request = request
            request.rowChecks = try self.confirmed(checks, writer)
            var response = try self.modify(request, writer)
            if self.repeatabilityID(request) != nil { response.headers["Repeatability-Result"] = "accepted" }
            try self.remember(request, response, writer)
            return response
        }
    }
}
