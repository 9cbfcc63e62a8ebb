import Foundation
import ODataCore
import OfflineOData
import PostgresNIO

/// One modification request of a device's upload, as the gateway forwards and records it.
struct UploadOperation: Sendable {
    /// The repeatable-request ID (`Repeatability-Request-ID`, or the legacy `RequestID`).
    var id: String?
    /// When the device sent it first (`Repeatability-First-Sent` or `RepeatabilityCreation`).
    var firstSent: Date?
    var partHeaders: HTTPHeaders
    var message: BatchMessage

    /// Its `Content-ID`, which later requests of the batch may name as `$<id>`.
    var contentID: String? { partHeaders["Content-ID"] ?? message.headers["Content-ID"] }

    /// The method, `X-HTTP-Method` of a tunnelled `POST` included.
    var method: String {
        let method = (message.method ?? "GET").uppercased()
        if method == "POST", let tunnelled = message.headers["X-HTTP-Method"] { return tunnelled.uppercased() }
        return method
    }

    /// Its method and URL, as operators see it in doubt.
    var line: String { method + " " + (message.url ?? "") }
}

/// What a backend applies at once: a change set, or one request on its own.
struct UploadUnit: Sendable {
    var isChangeSet: Bool
    var operations: [UploadOperation]

    /// The IDs of its requests when every one carries an ID (the unit is recorded), else none
    /// (a read, or a device without repeatable requests: forwarded as it is).
    var ids: [String] {
        let ids = operations.compactMap(\.id)
        return ids.count == operations.count && operations.allSatisfy({ $0.method != "GET" }) ? ids : []
    }
}

/// What becomes of a unit of an upload.
enum UnitOutcome: Sendable {
    /// Answered without the backend: recorded earlier (`accepted`), or refused.
    case answered([RecordedAnswer], accepted: Bool)
    /// Sent to the backend now.
    case forward
}

/// What reading the backend tells about a request whose forwarding was cut off.
enum Evidence {
    case applied(RecordedAnswer)
    case notApplied
    case unknown
    /// The backend could not be read now: nothing is concluded.
    case unreachable
}

/// A unit in doubt whose backend cannot be read now: its requests stay in doubt, and the
/// device is told to send them again later (its request queue keeps them).
struct Deferred: Error {}

extension Gateway {
    /// The methods of modification requests.
    static let modifying: Set<String> = ["POST", "PUT", "PATCH", "MERGE", "DELETE"]

    /// Answers an upload (a `$batch`, or a modification request) whose requests carry
    /// repeatable-request IDs, applying each request exactly once (SPEC §13, "Uploads"); nil
    /// when `request` is no such upload (it is forwarded as it is).
    func upload(_ request: GatewayRequest, backend: GatewayBackend, model: Model) async throws -> GatewayResponse? {
        try Self.refuseUncheckedJSONBatch(request)
        guard let (units, boundary) = try Self.units(of: request),
            units.contains(where: { unit in
                !unit.ids.isEmpty || (boundary != nil && !backend.supportsBatch)
                    || (configuration.gatewayETags
                        && unit.operations.contains {
                            Self.parseGatewayETag($0.message.headers["If-Match"] ?? "") != nil
                        })
            })
        else { return nil }
        metrics.uploads.increment()
        // Runs to its end even when the device goes away: the answers are recorded, and the
        // device's repeat collects them.
        // The backend's new rows are written into the scopes before the device is answered.
        let task = Task {
            let (answer, applied) = try await self.applyOnce(
                units, batchBoundary: boundary, request: request, backend: backend, model: model)
            do {
                try await self.writeThrough(applied, request: request, backend: backend, model: model)
            } catch {
                // Neither written through nor made due: the device's next download could bring an
                // older copy. The upload fails instead; its repeat is answered as recorded (and
                // written through then).
                self.logger.warning("Write-through failed", metadata: ["error": "\(error)"])
                throw GatewayError(
                    status: 503, code: "GatewayState",
                    "The gateway could not write the upload's changes into PostgreSQL; upload again (it is "
                        + "applied once)")
            }
            return answer
        }
        let result = await task.result
        var noted = true
        do {
            try await store.noteWrite(backend: backend.url, user: request.user)
        } catch {
            noted = false
            logger.warning("Noting an upload failed", metadata: ["error": "\(error)"])
        }
        await housekeep()
        do {
            let answer = try result.get()
            // Without the note, a device could be told its rows match a scope older than its
            // upload: the upload fails instead, and its repeat is answered as recorded.
            guard noted else {
                throw GatewayError(
                    status: 503, code: "GatewayState",
                    "The gateway could not note the upload in PostgreSQL; upload again (it is applied once)")
            }
            return answer
        } catch {
            guard boundary != nil else {
                // A request on its own: any answer would land in the device's ErrorArchive,
                // though the request may be applied later (by this gateway's repeat or another's).
                // Its connection is cut instead, as a lost answer, and the device sends it again.
                logger.notice(
                    "A request on its own is answered by a cut connection",
                    metadata: ["error": "\(error)"])
                var response = GatewayResponse(status: 502)
                response.dropsConnection = true
                return response
            }
            if error is Deferred {
                throw GatewayError(
                    status: 503, code: "BackendAnswerLost",
                    "The backend's answer was lost and the backend cannot tell yet what it applied; the "
                        + "requests stay queued on the device: upload again later")
            }
            throw error
        }
    }

    /// Refuses a JSON `$batch` with a modification request that carries a repeatable-request ID
    /// or one of the gateway's ETags: the gateway records requests and checks its ETags only in
    /// multipart batches (the client's), and forwarding such a batch as it is would apply a
    /// repeat again, or a stale change over another user's (a backend without ETags ignores
    /// the gateway's).
    static func refuseUncheckedJSONBatch(_ request: GatewayRequest) throws(GatewayError) {
        guard request.method.uppercased() == "POST", LeavingPath.isBatch(request.target),
            (request.headers["Content-Type"] ?? "").lowercased().hasPrefix("application/json"),
            let batch = try? JSONBatchRequest.read(request.body)
        else { return }
        for part in batch.requests where modifying.contains(part.method.uppercased()) {
            let headers = Dictionary(
                part.headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
            let recorded = headers["repeatability-request-id"] != nil || headers["requestid"] != nil
            let gatewayETag = (headers["if-match"] ?? "").trimmingCharacters(in: .whitespaces).hasPrefix("W/\"gw.")
            if recorded || gatewayETag {
                throw GatewayError(
                    status: 415, code: "UnsupportedMediaType",
                    "Request \(part.id) of the JSON $batch carries "
                        + (recorded ? "a repeatable-request ID" : "one of the gateway's ETags")
                        + ": the gateway applies such requests exactly once and checks its ETags only in a "
                        + "multipart/mixed $batch; send the batch as multipart/mixed")
            }
        }
    }

    /// The units of an upload and, for a `$batch`, its boundary; nil for other requests.
    static func units(of request: GatewayRequest) throws -> ([UploadUnit], String?)? {
        let method = request.method.uppercased()
        let path = String(request.target.prefix { $0 != "?" })
        guard request.headers["Content-Encoding"] == nil else { return nil }
        if method == "POST", path == "$batch" {
            guard let contentType = request.headers["Content-Type"], contentType.lowercased().hasPrefix("multipart/"),
                let boundary = HTTPHeaders.parameter("boundary", in: contentType)
            else { return nil }
            let batch: MultipartBatch
            do {
                batch = try MultipartBatch.read(request.body, boundary: boundary)
            } catch {
                // Not forwarded unread: its requests would go unrecorded.
                throw GatewayError(status: 400, code: "BadBatch", "The $batch body cannot be read: \(error)")
            }
            let units = batch.parts.map { part -> UploadUnit in
                switch part {
                case .operation(let operation): UploadUnit(isChangeSet: false, operations: [Self.operation(operation)])
                case .changeSet(let set): UploadUnit(isChangeSet: true, operations: set.operations.map(Self.operation))
                }
            }
            return (units, boundary)
        }
        guard modifying.contains(method) else { return nil }
        var headers = HTTPHeaders()
        for field in request.headers where !hopByHop.contains(field.name.lowercased()) {
            headers.add(field.name, field.value)
        }
        let message = BatchMessage.request(method, request.target, headers: headers, body: request.body)
        return ([UploadUnit(isChangeSet: false, operations: [Self.operation(BatchOperation(message: message))])], nil)
    }

    static func operation(_ operation: BatchOperation) -> UploadOperation {
        let headers = operation.message.headers
        let id = headers["Repeatability-Request-ID"] ?? headers["RequestID"]
        let sent = (headers["Repeatability-First-Sent"] ?? headers["RepeatabilityCreation"]).flatMap(httpDate)
        return UploadOperation(
            id: id?.isEmpty == false ? id : nil, firstSent: sent, partHeaders: operation.partHeaders,
            message: operation.message)
    }

    /// The instant of a `Repeatability-First-Sent` (an HTTP date, in any of its three forms) or
    /// a `RepeatabilityCreation` (the same, or an ISO 8601 instant); nil when it is neither, and
    /// then the request's age is not checked.
    static func httpDate(_ text: String) -> Date? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if let seconds = HTTPDate.parse(trimmed, now: Int64(Date().timeIntervalSince1970)) {
            return Date(timeIntervalSince1970: Double(seconds))
        }
        if case .dateTimeOffset(let instant)? = try? Literal.parsePayloadValue(trimmed, as: .dateTimeOffset) {
            return instant.foundationDate
        }
        return nil
    }

    /// Takes the locks of the upload's requests (waiting while another gateway forwards one of
    /// them), then answers each unit from its record, resolves units in doubt, and forwards the
    /// rest, recording them before they go and their answers when they come.
    func applyOnce(
        _ units: [UploadUnit], batchBoundary: String?, request: GatewayRequest, backend: GatewayBackend,
        model: Model
    ) async throws -> (GatewayResponse, [AppliedRequest]) {
        let ids = units.flatMap(\.ids)
        let deadline = ContinuousClock.now + .seconds(configuration.backendTimeout + 30)
        while true {
            // The connection is held only while the locks are: a repeat waiting for another
            // gateway's forward sleeps without one.
            let answer: (GatewayResponse, [AppliedRequest])? = try await store.withConnection { connection in
                do {
                    guard try await store.tryLockRequests(ids, backend: backend.url, on: connection) else { return nil }
                    let response = try await applyLocked(
                        units, batchBoundary: batchBoundary, request: request, backend: backend, model: model,
                        connection: connection)
                    try await store.unlockRequests(on: connection)
                    return response
                } catch {
                    // Also when taking the locks failed part way: some may be held.
                    do {
                        try await store.unlockRequests(on: connection)
                    } catch {
                        // Locks that cannot be released go with the connection.
                        try? await connection.close()
                    }
                    throw error
                }
            }
            if let answer { return answer }
            guard ContinuousClock.now < deadline else {
                throw GatewayError(
                    status: 503, code: "RequestBeingForwarded",
                    "Another gateway is still forwarding a request of this upload; try again later")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    func applyLocked(
        _ units: [UploadUnit], batchBoundary: String?, request: GatewayRequest, backend: GatewayBackend,
        model: Model, connection: PostgresConnection
    ) async throws -> (GatewayResponse, [AppliedRequest]) {
        // A backend without `$batch` gets the requests of a `$batch` one by one, each recorded
        // on its own: here every request is a unit, and the answer puts them back into their
        // change sets (`groups`: each request's unit of the device's batch).
        let oneByOne = batchBoundary != nil && !backend.supportsBatch
        let original = units
        var groups: [Int] = []
        var units = units
        if oneByOne {
            groups = original.indices.flatMap { index in
                Array(repeating: index, count: original[index].operations.count)
            }
            units = original.flatMap { unit in unit.operations.map { UploadUnit(isChangeSet: false, operations: [$0]) }
            }
        }
        let user = request.user
        let requestCount = units.reduce(0) { $0 + $1.operations.count }
        await report(request, "analyzingReceivedData", number: 0, count: requestCount, on: connection)
        let records = try await store.requestRecords(units.flatMap(\.ids), backend: backend.url, on: connection)
        var outcomes: [UnitOutcome] = []
        for unit in units {
            let ids = unit.ids
            guard !ids.isEmpty else {
                outcomes.append(.forward)
                continue
            }
            let found = ids.map { records[$0] }
            // A request ID recorded for another identity: its record is never shown and the
            // request never sent (a device whose credentials changed between a lost answer and
            // its repeat sees this, never a duplicate).
            if found.contains(where: { $0 != nil && $0?.owner != user }) {
                metrics.foreignRepeats.increment()
                let answer = Self.errorAnswer(
                    status: 409, code: "RequestOfOtherCredentials",
                    "Request \(ids[0]) was sent before with other credentials: only those credentials get its "
                        + "answer, and it is not sent again. Check the backend before repeating the change",
                    legacy: model.version.isLegacy)
                outcomes.append(.answered(Array(repeating: answer, count: unit.operations.count), accepted: false))
                continue
            }
            if found.allSatisfy({ $0?.answered == true }) {
                metrics.repeatsAnswered.increment()
                outcomes.append(.answered(found.compactMap { $0?.answer }, accepted: true))
                continue
            }
            if found.allSatisfy({ $0 == nil }) {
                // A repeat of a request whose record is past the retention is refused: it may
                // have been applied.
                let cut = Date().addingTimeInterval(-configuration.requestRetention)
                if let first = unit.operations.compactMap(\.firstSent).min(), first < cut {
                    let answer = Self.errorAnswer(
                        status: 409, code: "RequestExpired",
                        "Request \(ids[0]) was first sent on \(first), longer ago than the gateway keeps answers "
                            + "(\(Int(configuration.requestRetention)) s): it may have been applied, so it is not "
                            + "sent again", legacy: model.version.isLegacy)
                    outcomes.append(.answered(Array(repeating: answer, count: unit.operations.count), accepted: false))
                } else {
                    outcomes.append(.forward)
                }
                continue
            }
            // Recorded as being forwarded, but no live gateway holds its lock: the forwarder
            // died, or the backend's answer was lost. Reading the backend may tell.
            metrics.inDoubt.increment()
            var resolved = try await resolve(unit, records: records, request: request, backend: backend, model: model)
            if case .answered(let answers, true) = resolved, configuration.gatewayETags {
                // An update resolved as applied carries the entity's ETag now, as a fresh answer
                // does: the device's next change of it is not refused for an ETag it never got.
                resolved = .answered(
                    await withGatewayETags(
                        answers, unit: unit, request: request, backend: backend, model: model, connection: connection),
                    accepted: true)
            }
            if case .answered(let answers, _) = resolved {
                try await store.recordAnswers(
                    Array(zip(ids, answers)).map { ($0, $1) }, backend: backend.url,
                    user: user, on: connection)
            }
            outcomes.append(resolved)
        }
        // The gateway's ETags (a backend without its own): checked against the backend's
        // current row now; a unit with a stale one is answered 412 and not forwarded.
        var checked: [Int: [Int: GatewayETagCheck]] = [:]
        if configuration.gatewayETags {
            // Each checked entity is locked from its check until its answer is recorded: two
            // devices' changes of one entity, through any instances, are checked one after the
            // other, and the second sees the first's change (412).
            let entities = units.indices.flatMap { index -> [String] in
                guard case .forward = outcomes[index] else { return [] }
                return units[index].operations.compactMap {
                    Self.checkedEntity($0, request: request, backend: backend, model: model)
                }
            }
            try await store.lockEntities(
                entities, backend: backend.url, timeout: configuration.backendTimeout + 30, on: connection)
            for index in units.indices {
                guard case .forward = outcomes[index] else { continue }
                switch try await checkGatewayETags(
                    &units[index], request: request, backend: backend, model: model, connection: connection)
                {
                case .passed(let checks): if !checks.isEmpty { checked[index] = checks }
                case .failed(let answer):
                    let answers = Array(repeating: answer, count: units[index].operations.count)
                    if !units[index].ids.isEmpty {
                        try await store.recordAnswers(
                            Array(zip(units[index].ids, answers)).map { ($0, $1) },
                            backend: backend.url, user: user, on: connection)
                    }
                    outcomes[index] = .answered(answers, accepted: false)
                }
            }
        }
        let forwarded = outcomes.indices.filter { if case .forward = outcomes[$0] { true } else { false } }
        var fresh: [Int: (part: BatchPart?, answers: [RecordedAnswer])] = [:]
        var status = model.version.isLegacy ? 202 : 200
        let answeredHere = requestCount - forwarded.reduce(0) { $0 + units[$1].operations.count }
        await report(request, "processingRequests", number: answeredHere, count: requestCount, on: connection)
        var refusedWith: TransportResponse?
        if !forwarded.isEmpty {
            let sent = forwarded.flatMap { units[$0].ids }
            if batchBoundary != nil, !oneByOne {
                // Every path as it will go, references to creates answered from records resolved,
                // checked before anything is recorded.
                let locations = Self.answeredLocations(units, outcomes: outcomes)
                for index in forwarded {
                    for operation in units[index].operations {
                        _ = try LeavingPath.relative(
                            ContentIDReferences.resolve(url: operation.message.url ?? "", locations),
                            gatewayRoot: request.gatewayRoot, backendRoot: backend.url)
                    }
                }
            }
            // Recorded (committed) before anything reaches the backend; one by one, each request
            // just before it goes.
            if !oneByOne {
                let lines = forwarded.filter { !units[$0].ids.isEmpty }.flatMap { units[$0].operations.map(\.line) }
                try await store.recordForwarding(sent, lines: lines, backend: backend.url, user: user, on: connection)
            }
            metrics.backendRequests("upload").increment()
            do {
                if oneByOne {
                    let result = try await forwardOneByOne(
                        units, outcomes: outcomes, groups: groups, changeSets: original.map(\.isChangeSet),
                        request: request, backend: backend, model: model, connection: connection)
                    for (index, answer) in result.answers { fresh[index] = (nil, [answer]) }
                    refusedWith = result.refused
                } else if batchBoundary != nil {
                    // A later request may name a create answered without the backend (`$<id>`):
                    // the reference becomes the created entity's URL.
                    let locations = Self.answeredLocations(units, outcomes: outcomes)
                    let answer = try await forwardBatch(
                        forwarded.map { units[$0] }, request: request, backend: backend,
                        locations: locations)
                    switch answer {
                    case .refused(let response):
                        // The batch as a whole was refused: nothing of it was applied (a 4xx),
                        // or nobody knows (a 5xx: the requests stay in doubt).
                        if response.status < 500 {
                            try await store.forgetRequests(sent, backend: backend.url, on: connection)
                        }
                        let applied = Self.applied(units, outcomes: outcomes, fresh: [:])
                        return (rewritten(response, backend: backend, gatewayRoot: request.gatewayRoot), applied)
                    case .parts(let parts, let backendStatus):
                        status = backendStatus
                        for (position, index) in forwarded.enumerated() {
                            let unit = units[index]
                            guard position < parts.count else {
                                // The backend stopped before this unit: not applied.
                                try await store.forgetRequests(unit.ids, backend: backend.url, on: connection)
                                continue
                            }
                            // A change set answered for fewer requests than it had: what the
                            // backend did is unknown, and the unit stays in doubt.
                            guard let answers = Self.answers(of: parts[position], count: unit.operations.count)
                            else { continue }
                            fresh[index] = (parts[position], answers)
                        }
                    }
                } else {
                    let operation = units[0].operations[0]
                    let response = try await forwardSingle(operation.message, request: request, backend: backend)
                    fresh[0] = (
                        nil,
                        [
                            RecordedAnswer(
                                status: response.status, headers: response.headers,
                                body: response.body)
                        ]
                    )
                }
            } catch is TransportError {
                // The backend's answer was lost after the requests went: it may have applied
                // them, or be applying them still. What it shows applied is answered now; the
                // rest stays in doubt, waiting from now on (`inDoubtAfter`).
                metrics.inDoubt.increment()
                try await store.touchRequests(sent, backend: backend.url, on: connection)
                for index in forwarded where !units[index].ids.isEmpty {
                    do {
                        if case .answered(let answers, _) = try await resolve(
                            units[index], records: [:], request: request, backend: backend, model: model)
                        {
                            fresh[index] = (nil, answers)
                        }
                    } catch is Deferred {
                        continue
                    }
                }
                guard !fresh.isEmpty else { throw Deferred() }
            }
            // An update checked against the gateway's ETag is answered with the new one.
            for (index, checks) in checked {
                guard var result = fresh[index] else { continue }
                var changed = false
                for (position, check) in checks
                where position < result.answers.count
                    && result.answers[position].status < 300 && check.method != "DELETE"
                {
                    // Best effort: the backend applied the request; a failed read only leaves
                    // the answer without the new ETag (the next change of it then gets 412 and
                    // the device reads it again).
                    if let hash = try? await currentHash(check, request: request, backend: backend, model: model) {
                        result.answers[position].headers["ETag"] = Self.gatewayETag(scope: check.scope, hash: hash)
                        changed = true
                    }
                }
                if changed { fresh[index] = (nil, result.answers) }
            }
            await report(request, "processingRequests", number: requestCount, count: requestCount, on: connection)
            var toRecord: [(id: String, answer: RecordedAnswer)] = []
            var toForget: [String] = []
            for (index, result) in fresh where !oneByOne {
                let ids = units[index].ids
                guard !ids.isEmpty else { continue }
                if batchBoundary == nil, Self.notApplied(result.answers[0].status) {
                    toForget += ids
                } else {
                    toRecord += zip(ids, result.answers).map { ($0, $1) }
                }
            }
            try await store.recordAnswers(toRecord, backend: backend.url, user: user, on: connection)
            try await store.forgetRequests(toForget, backend: backend.url, on: connection)
        }
        // One by one, the backend refused a request unapplied (credentials, throttling): the
        // device gets that answer for its whole batch, as from a backend's `$batch`, and sends it
        // again; the requests answered before are recorded and answered from their records then.
        let applied = Self.applied(units, outcomes: outcomes, fresh: fresh.mapValues(\.answers))
        if let refusedWith {
            return (rewritten(refusedWith, backend: backend, gatewayRoot: request.gatewayRoot), applied)
        }
        if oneByOne {
            let answer = try oneByOneAnswer(
                original, singles: units, outcomes: outcomes, fresh: fresh.mapValues(\.answers), status: status,
                request: request, backend: backend, model: model)
            return (answer, applied)
        }
        if batchBoundary == nil {
            let answer: RecordedAnswer
            var accepted = false
            switch outcomes[0] {
            case .answered(let answers, let wasRecorded):
                answer = answers[0]
                accepted = wasRecorded
            case .forward:
                guard let result = fresh[0] else {
                    throw GatewayError(status: 502, code: "BackendAnswer", "The backend gave no answer")
                }
                answer = result.answers[0]
            }
            var headers = answer.headers
            if accepted { headers["Repeatability-Result"] = "accepted" }
            return (
                rewritten(
                    TransportResponse(status: answer.status, headers: headers, body: answer.body),
                    backend: backend, gatewayRoot: request.gatewayRoot), applied
            )
        }
        // The device's answer: each unit in order, until one the backend did not answer.
        var parts: [BatchPart] = []
        answering: for (index, unit) in units.enumerated() {
            switch outcomes[index] {
            case .answered(let answers, let accepted):
                parts.append(Self.part(unit, answers: answers, accepted: accepted))
            case .forward:
                guard let result = fresh[index] else { break answering }
                parts.append(result.part ?? Self.part(unit, answers: result.answers, accepted: false))
            }
        }
        return (try batchAnswer(parts, status: status, request: request, backend: backend, model: model), applied)
    }

    /// The requests the backend applied, now or before (answered from their records), in order:
    /// what write-through reads back.
    static func applied(
        _ units: [UploadUnit], outcomes: [UnitOutcome], fresh: [Int: [RecordedAnswer]]
    ) -> [AppliedRequest] {
        var result: [AppliedRequest] = []
        for (index, unit) in units.enumerated() {
            let answers: [RecordedAnswer]
            switch outcomes[index] {
            case .answered(let recorded, let accepted):
                guard accepted else { continue }
                answers = recorded
            case .forward:
                guard let found = fresh[index] else { continue }
                answers = found
            }
            for (operation, answer) in zip(unit.operations, answers) where (200..<300).contains(answer.status) {
                result.append(
                    AppliedRequest(
                        method: operation.method, url: operation.message.url ?? "", status: answer.status,
                        location: answer.headers["Location"] ?? answer.headers["OData-EntityId"],
                        contentID: operation.contentID))
            }
        }
        return result
    }

    /// The URLs of the creates answered without the backend (from their records), by Content-ID.
    static func answeredLocations(_ units: [UploadUnit], outcomes: [UnitOutcome]) -> [String: String] {
        var locations: [String: String] = [:]
        for (index, unit) in units.enumerated() {
            guard case .answered(let answers, _) = outcomes[index] else { continue }
            for (operation, answer) in zip(unit.operations, answers) where answer.status < 300 {
                if let id = operation.contentID, let location = answer.headers["Location"] {
                    locations[id] = location
                }
            }
        }
        return locations
    }

    /// The device's `$batch` answer of `parts`; a batch-level failure when not even the first
    /// unit was answered (it says more than an empty batch).
    func batchAnswer(
        _ parts: [BatchPart], status: Int, request: GatewayRequest, backend: GatewayBackend, model: Model
    ) throws -> GatewayResponse {
        guard !parts.isEmpty else { throw Deferred() }
        let batch = MultipartBatch(parts: parts)
        var headers = HTTPHeaders()
        headers["Content-Type"] = batch.contentType
        headers[model.version.isLegacy ? "DataServiceVersion" : "OData-Version"] =
            model.version.isLegacy ? "2.0" : "4.0"
        return rewritten(
            TransportResponse(status: status, headers: headers, body: batch.write()), backend: backend,
            gatewayRoot: request.gatewayRoot)
    }

    /// What forwarding a `$batch`'s requests one by one gave.
    struct OneByOneResult {
        /// Each forwarded request's answer, by its place among the requests.
        var answers: [Int: RecordedAnswer] = [:]
        /// The answer of a request the backend refused unapplied (credentials, throttling): no
        /// request after it was sent.
        var refused: TransportResponse?
    }

    /// Sends the forwarded requests of a `$batch` (each its own unit; `groups` gives each one's
    /// unit in the device's batch) to a backend without `$batch`, in order, each recorded just
    /// before it goes and its answer as it comes, its Content-ID's `Location` named by the
    /// requests after it. A request of a change set with a failed request is not sent but
    /// answered 424 (the backend cannot undo the ones applied before the failure). A lost answer
    /// is resolved by reading the backend (applied, or `409 RequestInDoubt` when reading cannot
    /// tell); when the backend cannot be read or the request may still be being applied, it
    /// stays in doubt and the requests after it are not sent.
    func forwardOneByOne(
        _ units: [UploadUnit], outcomes: [UnitOutcome], groups: [Int], changeSets: [Bool], request: GatewayRequest,
        backend: GatewayBackend, model: Model, connection: PostgresConnection
    ) async throws -> OneByOneResult {
        var result = OneByOneResult()
        var locations: [String: String] = [:]
        var failed: Set<Int> = []
        var answered = 0
        func took(_ index: Int, _ answer: RecordedAnswer) {
            if answer.status >= 400 {
                failed.insert(groups[index])
            } else if let id = units[index].operations[0].contentID,
                let location = answer.headers["Location"] ?? answer.headers["OData-EntityId"]
            {
                locations[id] = location
            }
        }
        // Each answer is recorded as it comes: a gateway that dies half way through the batch
        // leaves in doubt only the request it was forwarding.
        func record(_ index: Int, _ answer: RecordedAnswer) async throws {
            result.answers[index] = answer
            took(index, answer)
            let ids = units[index].ids
            guard !ids.isEmpty else { return }
            try await store.recordAnswers(
                [(ids[0], answer)], backend: backend.url, user: request.user, on: connection)
        }
        // A change set with a request answered already with a failure (from its record, or a
        // stale ETag) sends none of its other requests: nothing of it is applied yet, or (a
        // repeat) what was is answered from the records.
        for index in units.indices {
            if case .answered(let answers, _) = outcomes[index], let answer = answers.first { took(index, answer) }
        }
        for index in units.indices {
            let unit = units[index]
            guard case .forward = outcomes[index] else {
                answered += 1
                continue
            }
            if changeSets[groups[index]], failed.contains(groups[index]) {
                try await record(
                    index,
                    Self.errorAnswer(
                        status: 424, code: "DependencyFailed",
                        "Not sent: an earlier request of its change set failed, and the backend, which has no "
                            + "$batch, cannot undo the ones applied before it", legacy: model.version.isLegacy))
                answered += 1
                continue
            }
            // Its path, with the references to earlier creates resolved, is checked before it
            // is recorded: a request that cannot go is answered, never left in doubt.
            do {
                _ = try LeavingPath.relative(
                    ContentIDReferences.resolve(url: unit.operations[0].message.url ?? "", locations),
                    gatewayRoot: request.gatewayRoot, backendRoot: backend.url)
            } catch {
                try await record(
                    index,
                    Self.errorAnswer(
                        status: error.status, code: error.code, error.message, legacy: model.version.isLegacy))
                answered += 1
                continue
            }
            try await store.recordForwarding(
                unit.ids, lines: unit.operations.map(\.line), backend: backend.url, user: request.user,
                on: connection)
            let response: TransportResponse
            do {
                response = try await forwardOperation(
                    unit.operations[0], request: request, backend: backend, locations: locations)
            } catch is TransportError {
                metrics.inDoubt.increment()
                try await store.touchRequests(unit.ids, backend: backend.url, on: connection)
                if !unit.ids.isEmpty,
                    case .answered(let answers, _)? = try? await resolve(
                        unit, records: [:], request: request, backend: backend, model: model),
                    let answer = answers.first
                {
                    try await record(index, answer)
                    continue
                }
                break
            }
            if Self.notApplied(response.status) {
                try await store.forgetRequests(unit.ids, backend: backend.url, on: connection)
                result.refused = response
                break
            }
            try await record(
                index, RecordedAnswer(status: response.status, headers: response.headers, body: response.body))
            answered += 1
            await report(request, "processingRequests", number: answered, count: units.count, on: connection)
        }
        return result
    }

    /// Sends one request of a `$batch` to the backend on its own: the `$batch`'s own headers
    /// (credentials, cookies) with the request's over them, `$<Content-ID>` references resolved.
    func forwardOperation(
        _ operation: UploadOperation, request: GatewayRequest, backend: GatewayBackend, locations: [String: String]
    ) async throws -> TransportResponse {
        var message = operation.message
        var target = try LeavingPath.relative(
            ContentIDReferences.resolve(url: message.url ?? "", locations), gatewayRoot: request.gatewayRoot,
            backendRoot: backend.url)
        // The `$batch`'s own query options (`sap-client`, an app's URL suffix) go with each request.
        if let question = request.target.firstIndex(of: "?") {
            let options = request.target[request.target.index(after: question)...]
            if !options.isEmpty { target += (target.contains("?") ? "&" : "?") + options }
        }
        if !locations.isEmpty, (message.headers["Content-Type"] ?? "").lowercased().contains("json") {
            message.body = ContentIDReferences.resolve(body: message.body, locations)
        }
        let body = Self.rewrite(
            message.body, contentType: message.headers["Content-Type"], encoded: false,
            from: request.gatewayRoot, to: backend.url)
        let own = Set(message.headers.map { $0.name.lowercased() })
        var headers = HTTPHeaders()
        for field in request.headers {
            let name = field.name.lowercased()
            // The `$batch`'s own content negotiation stays with it.
            guard !Self.hopByHop.contains(name), !own.contains(name),
                !["content-type", "prefer", "accept"].contains(name)
            else { continue }
            headers.add(field.name, field.value)
        }
        for field in message.headers where !Self.hopByHop.contains(field.name.lowercased()) {
            headers.add(field.name, field.value)
        }
        let response = try await transport.send(
            TransportRequest(
                method: message.method ?? "GET", url: backend.url + target, headers: headers, body: body),
            timeout: configuration.backendTimeout)
        return Self.withoutHopByHop(response)
    }

    /// The device's answer to a `$batch` forwarded one by one: each of its units with the
    /// answers of its requests, in order, until a unit with a request not answered (it stays
    /// queued on the device, and its repeat collects what was answered).
    func oneByOneAnswer(
        _ original: [UploadUnit], singles: [UploadUnit], outcomes: [UnitOutcome], fresh: [Int: [RecordedAnswer]],
        status: Int, request: GatewayRequest, backend: GatewayBackend, model: Model
    ) throws -> GatewayResponse {
        var parts: [BatchPart] = []
        var index = 0
        answering: for unit in original {
            var answers: [(answer: RecordedAnswer, accepted: Bool)] = []
            for _ in unit.operations {
                defer { index += 1 }
                switch outcomes[index] {
                case .answered(let found, let accepted):
                    guard let answer = found.first else { break answering }
                    answers.append((answer, accepted))
                case .forward:
                    guard let answer = fresh[index]?.first else { break answering }
                    answers.append((answer, false))
                }
            }
            parts.append(Self.part(unit, answered: answers))
        }
        return try batchAnswer(parts, status: status, request: request, backend: backend, model: model)
    }

    /// Statuses of a single request that the backend answers without applying it and that a
    /// resend may get past (credentials, CSRF token, throttling): not recorded.
    static func notApplied(_ status: Int) -> Bool {
        [401, 403, 407, 408, 429].contains(status)
    }

    /// The answer of a `$batch`: its parts, or the whole batch refused.
    enum BatchAnswer {
        case parts([BatchPart], status: Int)
        case refused(TransportResponse)
    }

    /// Sends `units` to the backend as one `$batch`, each change set as a change set.
    func forwardBatch(
        _ units: [UploadUnit], request: GatewayRequest, backend: GatewayBackend,
        locations: [String: String]
    ) async throws -> BatchAnswer {
        let parts = try units.map { unit throws(GatewayError) -> BatchPart in
            let operations = try unit.operations.map { operation throws(GatewayError) -> BatchOperation in
                var message = operation.message
                if case .request(let method, let url, let version) = message.startLine {
                    let target = try LeavingPath.relative(
                        ContentIDReferences.resolve(url: url, locations), gatewayRoot: request.gatewayRoot,
                        backendRoot: backend.url)
                    message.startLine = .request(method: method, url: target, version: version)
                }
                if !locations.isEmpty, (message.headers["Content-Type"] ?? "").lowercased().contains("json") {
                    message.body = ContentIDReferences.resolve(body: message.body, locations)
                }
                message.body = Self.rewrite(
                    message.body, contentType: message.headers["Content-Type"], encoded: false,
                    from: request.gatewayRoot, to: backend.url)
                return BatchOperation(partHeaders: operation.partHeaders, message: message)
            }
            return unit.isChangeSet ? .changeSet(ChangeSet(operations: operations)) : .operation(operations[0])
        }
        let batch = MultipartBatch(parts: parts)
        var headers = HTTPHeaders()
        for field in request.headers
        where !Self.hopByHop.contains(field.name.lowercased())
            && field.name.lowercased() != "content-type"
        {
            headers.add(field.name, field.value)
        }
        headers["Content-Type"] = batch.contentType
        let response = try await transport.send(
            TransportRequest(method: "POST", url: backend.url + request.target, headers: headers, body: batch.write()),
            timeout: configuration.backendTimeout)
        guard response.status < 300 else { return .refused(response) }
        let boundary = response.headers["Content-Type"].flatMap { HTTPHeaders.parameter("boundary", in: $0) }
        guard let answer = try? MultipartBatch.read(response.body, boundary: boundary) else {
            // An answer nobody can read: what was applied is unknown (the requests stay in doubt).
            throw GatewayError(
                status: 502, code: "BackendPayload", "The backend's $batch answer is not valid multipart")
        }
        return .parts(answer.parts, status: response.status)
    }

    /// Sends one modification request to the backend as it came.
    func forwardSingle(
        _ message: BatchMessage, request: GatewayRequest, backend: GatewayBackend
    ) async throws
        -> TransportResponse
    {
        var headers = HTTPHeaders()
        for field in message.headers where !Self.hopByHop.contains(field.name.lowercased()) {
            headers.add(field.name, field.value)
        }
        let body = Self.rewrite(
            message.body, contentType: message.headers["Content-Type"], encoded: false,
            from: request.gatewayRoot, to: backend.url)
        try LeavingPath.check(request.target)
        let response = try await transport.send(
            TransportRequest(
                method: message.method ?? request.method, url: backend.url + request.target,
                headers: headers, body: body),
            timeout: configuration.backendTimeout)
        return Self.withoutHopByHop(response)
    }

    /// A backend's answer with its hop-by-hop headers left out (its content encoding kept: the
    /// body is passed on as it came).
    static func withoutHopByHop(_ response: TransportResponse) -> TransportResponse {
        var kept = HTTPHeaders()
        for field in response.headers where !hopByHop.contains(field.name.lowercased()) {
            kept.add(field.name, field.value)
        }
        if let encoding = response.headers["Content-Encoding"] { kept["Content-Encoding"] = encoding }
        return TransportResponse(status: response.status, headers: kept, body: response.body)
    }

    /// Each request's answer in a unit's part: a change set answers each, one operation (a
    /// failed change set) answers all of them.
    static func answers(of part: BatchPart, count: Int) -> [RecordedAnswer]? {
        func answer(_ message: BatchMessage) -> RecordedAnswer {
            RecordedAnswer(status: message.status ?? 500, headers: message.headers, body: message.body)
        }
        switch part {
        case .operation(let operation):
            return Array(repeating: answer(operation.message), count: count)
        case .changeSet(let set):
            guard set.operations.count == count else { return nil }
            return set.operations.map { answer($0.message) }
        }
    }

    /// A unit's part of the device's answer from its answers.
    static func part(_ unit: UploadUnit, answers: [RecordedAnswer], accepted: Bool) -> BatchPart {
        part(unit, answered: answers.map { ($0, accepted) })
    }

    /// A unit's part of the device's answer from its answers, each marked `accepted` when it
    /// comes from the request's record.
    static func part(_ unit: UploadUnit, answered: [(answer: RecordedAnswer, accepted: Bool)]) -> BatchPart {
        let operations = zip(unit.operations, answered).map { operation, pair -> BatchOperation in
            let (answer, accepted) = pair
            var headers = answer.headers
            if accepted { headers["Repeatability-Result"] = "accepted" }
            var partHeaders = HTTPHeaders([
                ("Content-Type", "application/http"), ("Content-Transfer-Encoding", "binary"),
            ])
            if let contentID = operation.partHeaders["Content-ID"] { partHeaders["Content-ID"] = contentID }
            return BatchOperation(
                partHeaders: partHeaders, message: .response(answer.status, headers: headers, body: answer.body))
        }
        return unit.isChangeSet ? .changeSet(ChangeSet(operations: operations)) : .operation(operations[0])
    }

    static func errorAnswer(status: Int, code: String, _ message: String, legacy: Bool) -> RecordedAnswer {
        let error = ODataError(code: code, message: message, httpStatus: status)
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        return RecordedAnswer(status: status, headers: headers, body: legacy ? error.v2JSON() : error.v4JSON())
    }

    // MARK: The gateway's ETags

    /// What checking a unit's gateway ETags gave: each checked request's check (by its place
    /// in the unit), or the 412 that answers the unit.
    enum ETagOutcome {
        case passed([Int: GatewayETagCheck])
        case failed(RecordedAnswer)
    }

    /// The entity (`Set(key)`, relative to the backend's root) of an update or delete that
    /// carries one of the gateway's ETags; nil for other requests.
    static func checkedEntity(
        _ operation: UploadOperation, request: GatewayRequest, backend: GatewayBackend, model: Model
    ) -> String? {
        guard ["PATCH", "PUT", "MERGE", "DELETE"].contains(operation.method),
            parseGatewayETag(operation.message.headers["If-Match"] ?? "") != nil
        else { return nil }
        var url = String((operation.message.url ?? "").prefix { $0 != "?" })
        for root in [request.gatewayRoot, backend.url] where url.hasPrefix(root) {
            url = String(url.dropFirst(root.count))
        }
        // By its parsed key, so that every spelling of one entity takes one lock.
        if let path = try? URLParser(version: model.version.grammar).parsePath(url), path.segments.count == 2,
            case .key(let parts) = path.segments[1].kind
        {
            let set: String? =
                switch path.segments[0].kind {
                case .entitySet(let name), .unresolved(let name): name
                default: nil
                }
            if let set, let key = try? model.keyValues(parts, ofEntitySet: set) {
                let text = key.keys.sorted().map { name in
                    name + "=" + Literal.format(.primitive(key[name] ?? .string("")), version: .v4)
                }
                return set + "(" + text.joined(separator: ",") + ")"
            }
        }
        return url.removingPercentEncoding ?? url
    }

    /// `answers` of `unit` (applied), each update's with the gateway's ETag of its entity as the
    /// backend holds it now, where the request carried one of the gateway's ETags and the answer
    /// none. Best effort: a read that fails leaves the answer as it was.
    func withGatewayETags(
        _ answers: [RecordedAnswer], unit: UploadUnit, request: GatewayRequest, backend: GatewayBackend, model: Model,
        connection: PostgresConnection
    ) async -> [RecordedAnswer] {
        var answers = answers
        for (position, operation) in unit.operations.enumerated() where position < answers.count {
            guard ["PATCH", "PUT", "MERGE"].contains(operation.method), answers[position].status < 300,
                answers[position].headers["ETag"] == nil,
                let (scope, _) = Self.parseGatewayETag(operation.message.headers["If-Match"] ?? ""),
                let query = try? await store.query(
                    ofScope: scope, backend: backend.url, user: request.user, on: connection),
                let check = GatewayETagCheck(
                    operation: operation, scope: scope, query: query, request: request, backend: backend, model: model),
                let hash = try? await currentHash(check, request: request, backend: backend, model: model)
            else { continue }
            answers[position].headers["ETag"] = Self.gatewayETag(scope: scope, hash: hash)
        }
        return answers
    }

    /// Checks each update or delete of `unit` that carries one of the gateway's ETags against
    /// the backend's current row, read with the query of the ETag's scope; a match sends the
    /// request on with `If-Match: *` (the backend does not know the gateway's ETags).
    func checkGatewayETags(
        _ unit: inout UploadUnit, request: GatewayRequest, backend: GatewayBackend, model: Model,
        connection: PostgresConnection
    ) async throws -> ETagOutcome {
        var checks: [Int: GatewayETagCheck] = [:]
        for (position, operation) in unit.operations.enumerated() {
            guard ["PATCH", "PUT", "MERGE", "DELETE"].contains(operation.method),
                let ifMatch = operation.message.headers["If-Match"], let (scope, hash) = Self.parseGatewayETag(ifMatch)
            else { continue }
            let legacy = model.version.isLegacy
            // One answer for every refusal: whether the row is gone, changed, in another user's
            // scope or not readable with the device's credentials is not told apart, so that
            // the check answers nothing about rows the device cannot read.
            let refusal = ETagOutcome.failed(
                Self.errorAnswer(
                    status: 412, code: "PreconditionFailed",
                    "\(operation.method) \(operation.message.url ?? ""): the entity does not match the ETag the "
                        + "gateway gave (If-Match \(ifMatch)); read it again", legacy: legacy))
            // Only a scope of this backend, shared or the device's user's, is used.
            guard
                let query = try await store.query(
                    ofScope: scope, backend: backend.url, user: request.user, on: connection),
                let check = GatewayETagCheck(
                    operation: operation, scope: scope, query: query, request: request,
                    backend: backend, model: model)
            else { return refusal }
            // Shared data is read with the gateway's credentials: the device must be one the
            // backend lets read the scope's query, or the check would answer it about rows it
            // may not read.
            if backend.isShared(check.query), let scoped = try? TrackedQuery(target: check.query) {
                do {
                    _ = try await credentialCheck.check(
                        credentials(of: request, backend: backend), url: backend.url + scoped.probeTarget,
                        askDelta: false, gateway: self)
                } catch let answer as BackendAnswer {
                    // Credentials refused as a whole say nothing of the row: the backend's 401.
                    if answer.response.status == 401 { throw answer }
                    return refusal
                }
            }
            guard let current = try await currentHash(check, request: request, backend: backend, model: model),
                current == hash
            else { return refusal }
            unit.operations[position].message.headers["If-Match"] = "*"
            checks[position] = check
        }
        return .passed(checks)
    }

    /// The hash the gateway keeps for the checked entity's row as the backend holds it now
    /// (read with its scope's query narrowed to its key), or nil when the query holds no such
    /// row. A backend that cannot be read fails the upload (the device sends it again).
    /// The read is made as the scope's refresh makes it (the same headers and credentials),
    /// so that an unchanged row hashes the same.
    func currentHash(
        _ check: GatewayETagCheck, request: GatewayRequest, backend: GatewayBackend, model: Model
    ) async throws -> String? {
        try await currentRow(check, request: request, backend: backend, model: model)?.hash
    }

    /// The checked entity's row as the backend holds it now (its payload as the scope keeps
    /// it, and its hash), or nil when the scope's query holds no such row.
    func currentRow(
        _ check: GatewayETagCheck, request: GatewayRequest, backend: GatewayBackend, model: Model
    ) async throws -> (payload: String, hash: String)? {
        if let row = try await currentRow(check, target: check.target, request: request, backend: backend, model: model)
        {
            return row
        }
        // Out of the scope's query now: checked by its key, read with the scope's other options
        // (so that an unchanged entity hashes the same). Not for shared data: that read would be
        // made with the gateway's credentials, outside the query the device was checked for.
        guard let keyTarget = check.keyTarget, !backend.isShared(check.query) else { return nil }
        return try await currentRow(check, target: keyTarget, request: request, backend: backend, model: model)
    }

    func currentRow(
        _ check: GatewayETagCheck, target: String, request: GatewayRequest, backend: GatewayBackend, model: Model
    ) async throws -> (payload: String, hash: String)? {
        var headers = HTTPHeaders()
        headers["Accept"] = "application/json"
        let credentials =
            backend.isShared(check.query) ? Self.shared(backend) : self.credentials(of: request, backend: backend)
        for field in credentials { headers[field.name] = field.value }
        metrics.backendRequests("etag").increment()
        let response = try await transport.send(
            TransportRequest(method: "GET", url: backend.url + target, headers: headers),
            timeout: configuration.backendTimeout)
        guard response.status == 200 else {
            // Not found, or not the device's to read: no row (the same refusal either way). A 401
            // is about the credentials, not the row: the upload fails as the backend would fail it.
            if [403, 404].contains(response.status) { return nil }
            throw GatewayError(
                status: 502, code: "BackendUnavailable",
                "The backend answered \(response.status) when the entity's ETag was checked")
        }
        let (rows, _) = try Self.rows(
            of: response.body, keyNames: check.keyNames, legacy: model.version.isLegacy,
            set: check.set)
        return rows.first.map { ($0.payload, GatewayStore.md5($0.payload)) }
    }

    // MARK: In doubt

    /// Headers of a device's modification request that its reads of the backend leave out.
    static let notOnReads: Set<String> = [
        "content-type", "if-match", "if-none-match", "x-http-method", "repeatability-request-id",
        "repeatability-first-sent", "requestid", "repeatabilitycreation", "prefer", "x-csrf-token", "accept",
    ]

    /// Whether `current` holds every property value `sent` has.
    static func holds(_ current: Entity, _ sent: Entity) -> Bool {
        sent.properties.allSatisfy { property in current[property.name] == property.value }
    }

    /// A unit whose forwarding was cut off: answered as applied when reading the backend shows
    /// every request applied, forwarded again when it shows none applied, and otherwise
    /// answered `RequestInDoubt` (409), so that it lands in the device's ErrorArchive instead
    /// of being applied twice.
    ///
    /// "Not applied" is believed only once the requests were forwarded more than
    /// `inDoubtAfter` seconds ago: until then the backend may still be applying them (a gateway
    /// that died does not stop a backend's request), and the unit stays in doubt (``Deferred``).
    func resolve(
        _ unit: UploadUnit, records: [String: RequestRecord], request: GatewayRequest,
        backend: GatewayBackend, model: Model
    ) async throws -> UnitOutcome {
        var evidence: [Evidence] = []
        for operation in unit.operations {
            if let id = operation.id, let answer = records[id]?.answer {
                evidence.append(.applied(answer))
            } else {
                let found = await self.evidence(operation, request: request, backend: backend, model: model)
                if case .unreachable = found { throw Deferred() }
                evidence.append(found)
            }
        }
        let applied = evidence.compactMap { if case .applied(let answer) = $0 { answer } else { nil } }
        if applied.count == evidence.count {
            metrics.inDoubtResolved.increment()
            return .answered(applied, accepted: true)
        }
        if evidence.allSatisfy({ if case .notApplied = $0 { true } else { false } }) {
            let age = unit.ids.compactMap { records[$0]?.age }.min() ?? 0
            guard age >= configuration.inDoubtAfter else { throw Deferred() }
            metrics.inDoubtResolved.increment()
            return .forward
        }
        let answers = unit.operations.map { operation in
            Self.errorAnswer(
                status: 409, code: "RequestInDoubt",
                "The gateway cannot tell whether request \(operation.id ?? "?") (\(operation.method) "
                    + "\(operation.message.url ?? "")) was applied: its forwarding was cut off (a gateway stopped or "
                    + "the backend's answer was lost) and reading the backend does not tell. It was not sent again; "
                    + "check the backend before repeating the change", legacy: model.version.isLegacy)
        }
        logger.warning("Request in doubt", metadata: ["requests": "\(unit.ids)"])
        return .answered(answers, accepted: false)
    }

    /// What the backend's current entity says about one request.
    func evidence(
        _ operation: UploadOperation, request: GatewayRequest, backend: GatewayBackend, model: Model
    ) async
        -> Evidence
    {
        guard
            let url = try? LeavingPath.relative(
                operation.message.url ?? "", gatewayRoot: request.gatewayRoot, backendRoot: backend.url),
            !url.hasPrefix("$"), !url.contains("?")
        else { return .unknown }
        let set = String(url.prefix { $0 != "(" && $0 != "/" })
        guard let type = model.entityType(ofEntitySet: set.removingPercentEncoding ?? set) else { return .unknown }
        let rest = url.dropFirst(set.count)
        let legacy = model.version.isLegacy
        func read(_ body: [UInt8]) -> Entity? {
            legacy
                ? try? V2JSONReader(model: model).readEntity(body, entityType: type.qualifiedName)
                : try? V4JSONReader(model: model).readEntity(body, entityType: type.qualifiedName)
        }
        func get(_ target: String) async -> TransportResponse? {
            // The device's own headers (credentials, cookies, `sap-client`, …), as a read.
            var headers = HTTPHeaders()
            for field in request.headers
            where !Self.hopByHop.contains(field.name.lowercased())
                && !Self.notOnReads.contains(field.name.lowercased())
            {
                headers.add(field.name, field.value)
            }
            headers["Accept"] = "application/json"
            metrics.backendRequests("in-doubt").increment()
            return try? await transport.send(
                TransportRequest(method: "GET", url: backend.url + target, headers: headers),
                timeout: configuration.backendTimeout)
        }
        /// The answer of a read that tells something: nil when the backend cannot be read now.
        func readable(_ target: String) async -> TransportResponse? {
            guard let response = await get(target), response.status < 500 else { return nil }
            return response
        }
        switch operation.method {
        case "POST" where rest.isEmpty:
            // A create that names its key: the entity exists once it was applied.
            guard let entity = read(operation.message.body) else { return .unknown }
            var parts: [String] = []
            for ref in model.key(of: type) {
                guard let value = entity[ref.name], case .primitive = value else { return .unknown }
                parts.append(ref.name + "=" + QueryText.pathLiteral(value, version: model.version))
            }
            let single =
                parts.count == 1 ? String(parts[0].drop { $0 != "=" }.dropFirst()) : parts.joined(separator: ",")
            let target = set + "(" + single + ")"
            guard let response = await readable(target) else { return .unreachable }
            switch response.status {
            case 200:
                // There, but with other values: created by someone else, or changed since.
                guard let current = read(response.body), Self.holds(current, entity) else { return .unknown }
                var headers = HTTPHeaders()
                headers["Content-Type"] = response.headers["Content-Type"] ?? "application/json"
                headers["Location"] = backend.url + target
                if let etag = response.headers["ETag"] { headers["ETag"] = etag }
                return .applied(RecordedAnswer(status: 201, headers: headers, body: response.body))
            case 404: return .notApplied
            default: return .unknown
            }
        case "PATCH", "MERGE", "PUT":
            guard rest.hasPrefix("("), rest.hasSuffix(")"), let change = read(operation.message.body) else {
                return .unknown
            }
            guard let response = await readable(set + rest) else { return .unreachable }
            let ifMatch = operation.message.headers["If-Match"]
            let guarded = ifMatch != nil && ifMatch != "*"
            guard response.status == 200, let current = read(response.body) else {
                return response.status == 404 && guarded ? .notApplied : .unknown
            }
            // Only a change of values can be seen in the entity (not one of links alone).
            guard !change.properties.isEmpty, change.navigation.isEmpty else { return .unknown }
            if Self.holds(current, change) {
                var headers = HTTPHeaders()
                if let etag = response.headers["ETag"] { headers["ETag"] = etag }
                return .applied(RecordedAnswer(status: 204, headers: headers, body: []))
            }
            // Not as the request left it: not applied, or changed again since. Only an ETag
            // check at the backend can tell which.
            return guarded ? .notApplied : .unknown
        case "DELETE":
            guard rest.hasPrefix("("), rest.hasSuffix(")") else { return .unknown }
            guard let response = await readable(set + rest) else { return .unreachable }
            switch response.status {
            case 404: return .applied(RecordedAnswer(status: 204, headers: HTTPHeaders(), body: []))
            case 200: return .notApplied
            default: return .unknown
            }
        default:
            return .unknown
        }
    }
}

/// How an update or delete that carries one of the gateway's ETags is checked: its entity's
/// row read with its scope's query narrowed to the entity's key.
struct GatewayETagCheck: Sendable {
    var method: String
    var scope: Int64
    /// The scope's query, canonical.
    var query: String
    var set: String
    var keyNames: [String]
    /// The scope's query with a `$filter` on the entity's key (relative to the backend's root).
    var target: String
    /// When the scope's query filters: the same read by the key alone (the entity may have left
    /// the query, by this device's change or another's, and is checked all the same).
    var keyTarget: String?

    init?(
        operation: UploadOperation, scope: Int64, query: String, request: GatewayRequest, backend: GatewayBackend,
        model: Model
    ) {
        self.init(
            method: operation.method, url: operation.message.url ?? "", scope: scope, query: query, request: request,
            backend: backend, model: model)
    }

    /// The check of the entity at `url` (`Set(key)`, absolute or relative to either root). The
    /// read's `$filter` is written from the key as the model's URL parser reads it, each value
    /// with the model's own literal writer: nothing of the URL's text is pasted into it, and a
    /// predicate that is not exactly the entity set's key gives no check at all.
    init?(
        method: String, url: String, scope: Int64, query: String, request: GatewayRequest, backend: GatewayBackend,
        model: Model
    ) {
        guard let relative = try? LeavingPath.relative(url, gatewayRoot: request.gatewayRoot, backendRoot: backend.url)
        else { return nil }
        let pathText = String(relative.prefix { $0 != "?" })
        guard let path = try? URLParser(version: model.version.grammar).parsePath(pathText),
            path.segments.count == 2, case .key(let parts) = path.segments[1].kind
        else { return nil }
        let set: String
        switch path.segments[0].kind {
        case .entitySet(let name), .unresolved(let name): set = name
        default: return nil
        }
        guard let scoped = try? TrackedQuery(target: query),
            scoped.path == set || scoped.path.removingPercentEncoding == set,
            let type = model.entityType(ofEntitySet: set),
            let key = try? model.keyValues(parts, ofEntitySet: set, aliases: [:])
        else { return nil }
        let keyNames = model.key(of: type).map(\.name)
        var terms: [String] = []
        for name in keyNames {
            guard let value = key[name] else { return nil }
            terms.append(name + " eq " + Literal.format(.primitive(value), version: model.version))
        }
        guard terms.count == key.count else { return nil }
        let byKey = terms.joined(separator: " and ")
        let kept = scoped.options.filter {
            !["$top", "$skip", "$orderby", "$skiptoken", "$count", "$inlinecount"].contains($0.name)
        }
        func target(_ filter: (inout [(name: String, value: String)]) -> String) -> String {
            var options = kept
            let value = filter(&options)
            options.append(("$filter", value))
            return scoped.path + "?"
                + options.map { $0.value.isEmpty ? $0.name : $0.name + "=" + $0.value }.joined(separator: "&")
        }
        self.method = method
        self.scope = scope
        self.query = query
        self.set = set
        self.keyNames = keyNames
        self.target = target { WriteThroughPlan.narrowed(options: &$0, by: byKey) }
        if kept.contains(where: { $0.name == "$filter" }) {
            self.keyTarget = target { options in
                options.removeAll { $0.name == "$filter" }
                return WriteThroughPlan.narrowed(options: &options, by: byKey)
            }
        } else {
            self.keyTarget = nil
        }
    }
}
