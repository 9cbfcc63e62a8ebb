import Foundation
import ODataCore
import OfflineOData

extension Gateway {
    /// `GET $oodata/shared-device`: the endpoint's policy for devices that several users share
    /// in turn (SPEC §16; `user_switch_policy` and `force_upload_on_user_switch` in the
    /// configuration file, as SAP's per-app shared-device settings). A device reads it at each
    /// download and follows it at its next user switch. Only for credentials the backend takes:
    /// the policy is not secret, but the gateway answers no one it does not know.
    func sharedDevicePolicy(_ request: GatewayRequest, backend: GatewayBackend) async throws -> GatewayResponse {
        try await requireCredentials(
            request, backend: backend, code: "SharedDeviceNeedsCredentials",
            "The shared-device policy is given to devices with credentials the backend takes")
        var members: [JSONValue.Member] = []
        if let policy = backend.userSwitchPolicy {
            members.append(JSONValue.Member("userSwitchPolicy", .string(policy.rawValue)))
        }
        if let force = backend.forceUploadOnUserSwitch {
            members.append(JSONValue.Member("forceUploadOnUserSwitch", .bool(force)))
        }
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers["Cache-Control"] = "no-store"
        return GatewayResponse(status: 200, headers: headers, body: Array(JSONValue.object(members).serialized.utf8))
    }

    /// Refuses a request without credentials (401 `code`, `message`) or with credentials the
    /// backend refuses (its answer), for endpoints the gateway answers itself.
    func requireCredentials(
        _ request: GatewayRequest, backend: GatewayBackend, code: String, _ message: String
    ) async throws {
        guard !request.user.isEmpty else { throw GatewayError(status: 401, code: code, message) }
        _ = try await credentialCheck.check(
            credentials(of: request, backend: backend), url: backend.url, askDelta: false, gateway: self)
    }
}
