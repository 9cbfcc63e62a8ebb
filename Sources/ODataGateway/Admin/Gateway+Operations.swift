import Foundation
import ODataCore
import OfflineOData

/// What `/readyz` reports (issue 56): ready when PostgreSQL answers, the tables exist, each
/// backend's `$metadata` was read (or the backend answered that it wants a device's
/// credentials), and no operator put the instance on standby.
public struct ReadinessReport: Sendable, Codable, Equatable {
    /// One check and what it found.
    public struct Check: Sendable, Codable, Equatable {
        public var name: String
        public var ok: Bool
        public var detail: String
    }

    public var ready: Bool
    /// The first failed check's detail, nil when ready.
    public var reason: String?
    public var checks: [Check]
}

/// This instance's operational state: the standby switch, whether the tables were made, what
/// each backend's `$metadata` read gave, the buckets of throttling and when devices were noted.
actor GatewayOperations {
    var standby = false
    var migrated = false
    /// Per backend URL: the last probe of its `$metadata` when no model was read yet.
    var backendProbes: [String: (ok: Bool, detail: String, at: ContinuousClock.Instant)] = [:]
    /// When each device was last written to `oodata_device` (and last as syncing).
    private var deviceNotes: [String: (seen: ContinuousClock.Instant, sync: ContinuousClock.Instant?)] = [:]
    private var notesInFlight = 0
    static let notesInFlightLimit = 8

    /// The last readiness report and when it was made: the public probe answers from it for a
    /// second, so probes cannot load PostgreSQL.
    var lastReadiness: (report: ReadinessReport, at: ContinuousClock.Instant)?

    func setStandby(_ value: Bool) {
        standby = value
        lastReadiness = nil
    }
    func cachedReadiness(within seconds: Double) -> ReadinessReport? {
        guard let last = lastReadiness, ContinuousClock.now - last.at < .seconds(seconds) else { return nil }
        return last.report
    }
    func keepReadiness(_ report: ReadinessReport) { lastReadiness = (report, .now) }
    func setMigrated() { migrated = true }
    func setProbe(_ backend: String, ok: Bool, detail: String) { backendProbes[backend] = (ok, detail, .now) }
    func probe(_ backend: String, within seconds: Double) -> (ok: Bool, detail: String)? {
        guard let probe = backendProbes[backend], ContinuousClock.now - probe.at < .seconds(seconds) else { return nil }
        return (probe.ok, probe.detail)
    }

    /// Whether a device's request should be written now: at most every 30 s per device, and
    /// at most every 30 s as a sync.
    func shouldNote(_ key: String, sync: Bool) -> Bool {
        // Writes are best effort: beyond a few in flight (PostgreSQL slow), a note waits for
        // the device's next request.
        guard notesInFlight < Self.notesInFlightLimit else { return false }
        let now = ContinuousClock.now
        let last = deviceNotes[key]
        let seenDue = last.map { now - $0.seen > .seconds(30) } ?? true
        let syncDue = sync && (last?.sync.map { now - $0 > .seconds(30) } ?? true)
        guard seenDue || syncDue else { return false }
        if deviceNotes.count > 50_000 {
            deviceNotes = deviceNotes.filter { now - $0.value.seen < .seconds(30) }
            // Still full: forgetting costs at most one more write per device.
            if deviceNotes.count > 50_000 { deviceNotes.removeAll(keepingCapacity: true) }
        }
        deviceNotes[key] = (now, syncDue ? now : last?.sync)
        notesInFlight += 1
        return true
    }

    /// The end of a write `shouldNote` allowed.
    func noted() { notesInFlight -= 1 }
}

extension Gateway {
    /// The readiness as the public `/readyz` tells it: made at most once a second, and naming
    /// only which check failed (`standby`, `postgres`, `backend`); the details are the admin
    /// API's (`GET /api/status`).
    public func publicReadiness() async -> ReadinessReport {
        let report: ReadinessReport
        if let cached = await operations.cachedReadiness(within: 1) {
            report = cached
        } else {
            report = await readiness()
        }
        let failed = report.checks.first { !$0.ok }
        return ReadinessReport(
            ready: report.ready, reason: failed.map { $0.name.hasPrefix("backend") ? "backend" : $0.name }, checks: [])
    }

    /// The readiness of this instance, with each check's details (the admin API's status).
    public func readiness() async -> ReadinessReport {
        let report = await measuredReadiness()
        await operations.keepReadiness(report)
        return report
    }

    func measuredReadiness() async -> ReadinessReport {
        var checks: [ReadinessReport.Check] = []
        let standby = await operations.standby
        checks.append(
            .init(
                name: "standby", ok: !standby,
                detail: standby ? "an operator put this instance on standby (admin API)" : "serving"))
        if !(await operations.migrated) {
            checks.append(.init(name: "postgres", ok: false, detail: "the tables are being created"))
        } else {
            do {
                let missing = try await store.missingTables(within: 2)
                checks.append(
                    .init(
                        name: "postgres", ok: missing.isEmpty,
                        detail: missing.isEmpty
                            ? "answers; tables present" : "tables missing: \(missing.joined(separator: ", "))"))
            } catch {
                checks.append(.init(name: "postgres", ok: false, detail: "\(error)"))
            }
        }
        var probed: Set<String> = []
        for backend in configuration.backends where probed.insert(backend.url).inserted {
            let (ok, detail) = await backendReadiness(backend)
            checks.append(.init(name: "backend \(backend.url)", ok: ok, detail: detail))
        }
        let failed = checks.first { !$0.ok }
        return ReadinessReport(ready: failed == nil, reason: failed.map { "\($0.name): \($0.detail)" }, checks: checks)
    }

    /// Whether `backend`'s `$metadata` was read; if not, one read with the gateway's own
    /// credentials (at most every 5 s, 3 s long). A 401 or 403 counts as ready: the backend
    /// answers and wants a device's credentials, which only a device brings.
    func backendReadiness(_ backend: GatewayBackend) async -> (Bool, String) {
        if await models.hasModel(for: backend.url) { return (true, "$metadata read") }
        if let probe = await operations.probe(backend.url, within: 5) { return probe }
        var headers = Self.shared(backend)
        headers["Accept"] = "application/xml"
        let outcome: (Bool, String)
        do {
            let response = try await transport.send(
                TransportRequest(method: "GET", url: backend.url + "$metadata", headers: headers), timeout: 3)
            switch response.status {
            case 200:
                do {
                    _ = try await models.learn(
                        response.body, for: backend.url, contentType: response.headers["Content-Type"],
                        etag: response.headers["ETag"])
                    outcome = (true, "$metadata read")
                } catch {
                    outcome = (false, "its $metadata does not parse: \(error)")
                }
            case 401, 403:
                outcome = (true, "answers \(response.status): its $metadata is read with a device's credentials")
            default:
                outcome = (false, "$metadata answered \(response.status)")
            }
        } catch {
            outcome = (false, "$metadata cannot be read: \(error)")
        }
        await operations.setProbe(backend.url, ok: outcome.0, detail: outcome.1)
        return outcome
    }

    /// A `Client-Instance-ID` as the gateway keeps it: 1 to 128 visible ASCII characters.
    static func clientInstanceID(_ request: GatewayRequest) -> String? {
        guard let value = request.headers["Client-Instance-ID"], !value.isEmpty, value.utf8.count <= 128,
            value.utf8.allSatisfy({ $0 > 32 && $0 < 127 })
        else { return nil }
        return value
    }

    /// The 429 for a request over a limit of `backend` (nil: within them). The device's bucket
    /// (by `Client-Instance-ID`) and the user's are both taken from; a request the user's limit
    /// refuses gives the device's token back.
    func throttled(_ request: GatewayRequest, backend: GatewayBackend, legacy: Bool) async -> GatewayResponse? {
        guard backend.deviceThrottle != nil || backend.userThrottle != nil else { return nil }
        var wait: Double?
        var which = ""
        let device = Self.clientInstanceID(request).map { backend.url + "\n" + $0 + "\n" + request.user }
        if let rate = backend.deviceThrottle, let device, let seconds = await throttle.take("d\n" + device, rate: rate)
        {
            wait = seconds
            which = "this device (\(rate))"
        }
        if wait == nil, let rate = backend.userThrottle,
            let seconds = await throttle.take("u\n" + backend.url + "\n" + request.user, rate: rate)
        {
            if let device, let deviceRate = backend.deviceThrottle {
                await throttle.giveBack("d\n" + device, rate: deviceRate)
            }
            wait = seconds
            which = "this user's devices together (\(rate))"
        }
        guard let wait else { return nil }
        metrics.throttled.increment()
        let after = max(1, Int(min(wait, 86_400).rounded(.up)))
        var answer = GatewayResponse.error(
            GatewayError(
                status: 429, code: "TooManyRequests",
                "Requests from \(which) are over the gateway's limit; try again in \(after) s"), legacy: legacy)
        answer.headers["Retry-After"] = String(after)
        return answer
    }

    /// Notes the device behind `request` (by its `Client-Instance-ID`) in the background, at
    /// most every 30 s per device: best effort, never a request's failure.
    func noteDevice(_ request: GatewayRequest, backend: GatewayBackend, sync: Bool) async {
        guard let instance = Self.clientInstanceID(request) else { return }
        let key = backend.url + "\n" + instance + "\n" + request.user
        guard await operations.shouldNote(key, sync: sync) else { return }
        let version = request.headers["OOData-App-Version"].map { String($0.prefix(64)) }
        let store = self.store
        let user = request.user
        let operations = self.operations
        Task {
            try? await store.noteDevice(
                backend: backend.url, instance: instance, user: user, appVersion: version, sync: sync)
            await operations.noted()
        }
    }

    /// `GET $oodata/requests/<id>`: what an operator decided of a request of this identity that
    /// was in doubt (`{"requestID":…,"resolution":"applied"|"notApplied","resolvedAt":…}`),
    /// or 404: no word yet, or the request is another identity's.
    func resolutionAnswer(
        _ id: String, request: GatewayRequest, backend: GatewayBackend
    ) async throws
        -> GatewayResponse
    {
        let id = id.removingPercentEncoding ?? id
        guard !id.isEmpty, id.utf8.count <= 200 else {
            throw GatewayError(status: 400, code: "BadRequestID", "Give a repeatable-request ID of at most 200 bytes")
        }
        guard let found = try await store.resolution(backend: backend.url, requestID: id, user: request.user) else {
            throw GatewayError(status: 404, code: "NoResolution", "No operator has decided of request \(id) of yours")
        }
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers["Cache-Control"] = "no-store"
        let body = JSONValue.object([
            JSONValue.Member("requestID", .string(id)), JSONValue.Member("resolution", .string(found.resolution)),
            JSONValue.Member("resolvedAt", .string(ISO8601DateFormatter().string(from: found.at))),
        ])
        return GatewayResponse(status: 200, headers: headers, body: Array(body.serialized.utf8))
    }
}
