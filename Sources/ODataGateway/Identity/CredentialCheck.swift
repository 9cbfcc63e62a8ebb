import Crypto
import Foundation
import ODataCore
import OfflineOData
import PostgresNIO
import Logging

/// Which credentials the backend accepted lately, so that answers from PostgreSQL go only to
/// devices the backend would answer. Kept in memory, by digest, for `lifetime` seconds; a
/// refusal is never kept (the next request asks again).
///
/// With `askDelta` the check also asks for change tracking (`Prefer: odata.track-changes`) and
/// tells whether the backend gives delta links for the query: `Preference-Applied:
/// odata.track-changes`, or a delta link in the answer (for AUTO, SPEC §13).
actor CredentialCheck {
    private var accepted: [String: (until: Date, offersDelta: Bool)] = [:]
    let lifetime: TimeInterval = 60
    /// Credentials (by digest, per backend) the backend accepted on a read, and until when
    /// they are trusted to get the `$metadata` document the gateway keeps.
    private var identities: [String: Date] = [:]
    static let metadataLifetime: TimeInterval = 900

    static func identityKey(_ credentials: HTTPHeaders, backend: String) -> String {
        let text = credentials.map { "\($0.name.lowercased()): \($0.value)" }.sorted().joined(separator: "\n")
        return GatewayRequest.digest(backend + "\n" + text)
    }

    /// Notes that the backend accepted `credentials` on a read of `backend` just now.
    func noteAccepted(_ credentials: HTTPHeaders, backend: String) {
        let now = Date()
        if identities.count > 10_000 { identities = identities.filter { $0.value > now } }
        identities[Self.identityKey(credentials, backend: backend)] = now.addingTimeInterval(Self.metadataLifetime)
    }

    /// Whether the backend accepted `credentials` on a read within ``metadataLifetime``.
    func acceptedLately(_ credentials: HTTPHeaders, backend: String) -> Bool {
        guard let until = identities[Self.identityKey(credentials, backend: backend)] else { return false }
        return until > Date()
    }

    func check(
        _ credentials: HTTPHeaders, url: String, askDelta: Bool, gateway: Gateway, backend: String? = nil
    ) async throws -> Bool {
        let text = credentials.map { "\($0.name.lowercased()): \($0.value)" }.joined(separator: "\n")
        let key = GatewayRequest.digest((askDelta ? "delta\n" : "\n") + url + "\n" + text)
        let now = Date()
        if let entry = accepted[key], entry.until > now { return entry.offersDelta }
        var headers = HTTPHeaders()
        headers["Accept"] = "application/json"
        if askDelta { headers["Prefer"] = "odata.track-changes" }
        for field in credentials { headers[field.name] = field.value }
        gateway.metrics.backendRequests("credentials").increment()
        let response = try await gateway.transport.send(
            TransportRequest(method: "GET", url: url, headers: headers), timeout: gateway.configuration.backendTimeout)
        switch response.status {
        case 200..<300:
            let offersDelta = askDelta && Self.offersDelta(response)
            if accepted.count > 10_000 { accepted = accepted.filter { $0.value.until > now } }
            accepted[key] = (now.addingTimeInterval(lifetime), offersDelta)
            if let backend { noteAccepted(credentials, backend: backend) }
            return offersDelta
        case 401, 403:
            throw BackendAnswer(response: response)
        case 400..<500:
            // The backend refuses the query itself (a bad option, an unknown set): the device's
            // request is wrong, and it gets the backend's words for it, not a 5xx.
            throw BackendAnswer(response: response)
        default:
            throw GatewayError(
                status: 502, code: "BackendUnavailable",
                "The backend answered \(response.status) when the device's credentials were checked")
        }
    }

    /// Whether a backend's answer to a read with `Prefer: odata.track-changes` tracks changes.
    static func offersDelta(_ response: TransportResponse) -> Bool {
        if (response.headers["Preference-Applied"] ?? "").lowercased().contains("track-changes") { return true }
        guard response.headers["Content-Encoding"] == nil, let json = try? JSONValue.parse(response.body) else {
            return false
        }
        return json["@odata.deltaLink"]?.stringValue != nil || json["odata.deltaLink"]?.stringValue != nil
            || json["d"]?["__delta"]?.stringValue != nil
    }
}
