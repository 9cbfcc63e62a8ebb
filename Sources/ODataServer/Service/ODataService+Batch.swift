import Foundation
import ODataCore
import ODataStore

extension ODataService {
    /// A request inside a batch, relative to the service root.
    func subrequest(_ message: BatchMessage, _ outer: ServiceRequest, contentIDs: [String: String]) -> ServiceRequest {
        var url = ContentIDReferences.resolve(url: message.url ?? "", contentIDs)
        if let root = outer.serviceRoot, url.hasPrefix(root) { url = String(url.dropFirst(root.count)) }
        // An absolute path is appended to the batch's scheme, host and port: this service's
        // own root path (``checkPartURL(_:_:part:)`` refused any other).
        if url.hasPrefix("/"), let root = Self.rootPath(outer), url.hasPrefix(root) {
            url = String(url.dropFirst(root.count))
        }
        let body = ContentIDReferences.resolve(body: message.body, contentIDs)
        var request = ServiceRequest(
            method: message.method ?? "GET", target: url, headers: message.headers, body: body, version: outer.version)
        request.serviceRoot = outer.serviceRoot
        // Every part runs as the user of the `$batch` request, whatever the part's own headers say.
        request.user = outer.user
        return request
    }

    /// Throws when a part's URL is absolute and not under this service's root: a batch is
    /// answered by one service, and a part for another host must not run here as if it were
    /// ours.
    func checkPartURL(_ url: String, _ outer: ServiceRequest, part: String) throws {
        // Absolute: a scheme before anything else (`https://a.example` in a filter is not one).
        let target = url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? url
        if target.hasPrefix("/") {
            // An absolute path: on this host, so under this service's root or another service.
            let root = Self.rootPath(outer) ?? "/"
            guard target.hasPrefix(root) else {
                throw ServiceFailure(
                    400, "BadBatch",
                    "\(part) of the $batch request is addressed to another service (\(url) is not under \(root)); "
                        + "a part's URL is relative to this service's root, or starts with it")
            }
            return
        }
        guard let schemeEnd = target.firstByteRange(of: "://"),
            target[..<schemeEnd.lowerBound].allSatisfy({ $0.isLetter || $0.isNumber || "+-.".contains($0) }),
            !target[..<schemeEnd.lowerBound].isEmpty
        else { return }
        // The same host and root whatever the scheme (a TLS proxy in front of the server).
        func withoutScheme(_ text: String) -> String {
            text.firstByteRange(of: "://").map { String(text[$0.upperBound...]) } ?? text
        }
        if let root = outer.serviceRoot, withoutScheme(url).hasPrefix(withoutScheme(root)) { return }
        throw ServiceFailure(
            400, "BadBatch",
            "\(part) of the $batch request is addressed to another service (\(url)); "
                + "a part's URL is relative to this service's root, or starts with it")
    }

    /// The path of this service's root (`/odata/v4/`), from the batch request's service root.
    static func rootPath(_ outer: ServiceRequest) -> String? {
        guard let root = outer.serviceRoot, let scheme = root.firstByteRange(of: "://") else { return nil }
        let rest = root[scheme.upperBound...]
        guard let slash = rest.firstIndex(of: "/") else { return "/" }
        return String(rest[slash...])
    }

    /// Where the entity a GET of a batch answered is, for `$<id>` references: the request's
    /// own path when the answer is one entity (its context ends in `/$entity`).
    static func entityLocation(of response: ServiceResponse, _ request: ServiceRequest) -> String? {
        guard response.status == 200, let body = try? JSONValue.parse(response.body),
            let context = body["@odata.context"]?.stringValue ?? body["@context"]?.stringValue,
            context.hasSuffix("/$entity")
        else { return nil }
        let path = request.target.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.target
        return (request.serviceRoot ?? "") + path
    }

    static func batchMessage(_ response: ServiceResponse) -> BatchMessage {
        var headers = response.headers
        if !response.body.isEmpty { headers["Content-Length"] = String(response.body.count) }
        return .response(response.status, headers: headers, body: response.body)
    }

    /// `$batch`: multipart (V2 and V4) or JSON (4.01).
    func batch(_ request: ServiceRequest) async throws -> ServiceResponse {
        let contentType = request.headers["Content-Type"] ?? ""
        if contentType.lowercased().hasPrefix("application/json") { return try await jsonBatch(request) }
        guard contentType.lowercased().hasPrefix("multipart/mixed") else {
            throw ServiceFailure(
                400, "BadBatch", "A $batch request needs Content-Type multipart/mixed or application/json")
        }
        guard let boundary = HTTPHeaders.parameter("boundary", in: contentType), !boundary.isEmpty else {
            throw ServiceFailure(
                400, "BadBatch", "Content-Type multipart/mixed of a $batch request needs a boundary parameter")
        }
        let batch = try MultipartBatch.read(request.body, boundary: boundary)
        options.logger.debug(
            "Batch received",
            metadata: [
                "parts": .stringConvertible(batch.parts.count),
                "change-sets": .stringConvertible(
                    batch.parts.filter { if case .changeSet = $0 { true } else { false } }.count),
            ])
        // Every part says what it is: application/http, or multipart/mixed for a change set; a
        // Content-ID names one part of the whole batch.
        var seenIDs: Set<String> = []
        for part in batch.parts {
            let operations: [BatchOperation]
            switch part {
            case .operation(let operation): operations = [operation]
            case .changeSet(let set): operations = set.operations
            }
            // V2 scopes a Content-ID to its change set; V4 to the whole batch.
            if request.isV2 { seenIDs = [] }
            for id in operations.compactMap(\.contentID) where !seenIDs.insert(id).inserted {
                throw ServiceFailure(400, "BadBatch", "Content-ID \(id) is used by two parts of the $batch request")
            }
        }
        for (index, part) in batch.parts.enumerated() {
            let headers: [HTTPHeaders]
            switch part {
            case .operation(let operation): headers = [operation.partHeaders]
            case .changeSet(let set): headers = set.operations.map(\.partHeaders)
            }
            for partHeaders in headers
            where partHeaders["Content-Type"]?.lowercased().hasPrefix("application/http") != true {
                throw ServiceFailure(
                    400, "BadBatch", "Part \(index + 1) of the $batch request needs Content-Type application/http")
            }
        }
        for (index, part) in batch.parts.enumerated() {
            switch part {
            case .operation(let operation):
                try checkPartURL(operation.message.url ?? "", request, part: "Part \(index + 1)")
            case .changeSet(let set):
                for operation in set.operations {
                    try checkPartURL(operation.message.url ?? "", request, part: "Part \(index + 1)")
                }
            }
        }
        let continueOnError = request.isV2 || Preferences(request.headers["Prefer"]).continueOnError
        // Fault rules are matched against each request with the Content-IDs before it resolved,
        // which a run matched ahead of time would not have: with rules in force, each change set
        // commits alone, as without grouping.
        let grouping = continueOnError ? await faults.isEmpty : false
        var parts: [BatchPart] = []
        var contentIDs: [String: String] = [:]
        var index = 0
        while index < batch.parts.count {
            let part = batch.parts[index]
            index += 1
            switch part {
            case .changeSet(let first) where grouping:
                // Consecutive change sets commit together (one sync instead of one each); each
                // keeps its own savepoint, so a failing one is rolled back alone.
                var run = [first]
                while index < batch.parts.count, case .changeSet(let next) = batch.parts[index] {
                    run.append(next)
                    index += 1
                }
                parts += await changeSets(run, request, &contentIDs)
                continue
            case .operation(let operation):
                let sub = subrequest(operation.message, request, contentIDs: contentIDs)
                let response = await handle(sub)
                var partHeaders = HTTPHeaders([
                    ("Content-Type", "application/http"), ("Content-Transfer-Encoding", "binary"),
                ])
                if let id = operation.contentID {
                    partHeaders["Content-ID"] = id
                    if let location = response.headers["Location"] { contentIDs[id] = location }
                }
                parts.append(.operation(BatchOperation(partHeaders: partHeaders, message: Self.batchMessage(response))))
            case .changeSet(let set):
                parts += await changeSets([set], request, &contentIDs)
            }
            if case .operation(let last)? = parts.last, (last.message.status ?? 200) >= 400, !continueOnError { break }
        }
        let result = MultipartBatch(boundary: "batchresponse_" + UUID().uuidString.lowercased(), parts: parts)
        var headers = HTTPHeaders()
        headers["Content-Type"] = result.contentType
        headers[request.isV2 ? "DataServiceVersion" : "OData-Version"] = request.isV2 ? "2.0" : "4.0"
        // V2 answers a batch with 202 Accepted, V4 with 200.
        return ServiceResponse(status: request.isV2 ? 202 : 200, headers: headers, body: result.write())
    }

    /// Change sets, each applied entirely or not at all, committed in one
    /// transaction: a change set that fails is rolled back to its savepoint alone, and the
    /// answers go out only after the commit. When the commit itself fails, no change set was
    /// applied and each is answered with the error.
    private func changeSets(
        _ sets: [ChangeSet], _ outer: ServiceRequest, _ contentIDs: inout [String: String]
    ) async -> [BatchPart] {
        struct Failed: Error { var response: ServiceResponse }
        /// The transaction ended under a change set (SQLite rolls back on some errors): what
        /// follows would commit statement by statement, so the whole group stops.
        struct TransactionLost: Error { var cause: any Error }
        // Injected faults, matched in request order before anything runs.
        var injected: [[ServiceResponse?]] = []
        var minimalAnswers: [Set<Int>] = []
        for set in sets {
            var faults: [ServiceResponse?] = []
            var minimal: Set<Int> = []
            for (index, operation) in set.operations.enumerated() {
                let fault = await self.faults.match(subrequest(operation.message, outer, contentIDs: contentIDs))
                if fault?.minimal == true { minimal.insert(index) }
                faults.append(
                    fault?.status.map { status in
                        .error(
                            status, code: fault?.code ?? "InjectedFault", fault?.message ?? "Injected failure",
                            version: outer.version)
                    })
            }
            injected.append(faults)
            minimalAnswers.append(minimal)
        }
        let faultResponses = injected
        let minimal = minimalAnswers
        let known = contentIDs
        do {
            // The rows the parts touch, under the users' row filters (a part that names a row
            // by a Content-ID of this run addresses a row the run creates).
            let checks = try await checkRows(
                sets.flatMap { set in set.operations.map { subrequest($0.message, outer, contentIDs: known) } })
            let (parts, ids) = try await store.write { writer -> ([BatchPart], [String: String]) in
                var ids = known
                var parts: [BatchPart] = []
                let rowChecks = try self.confirmed(checks, writer)
                for (setIndex, set) in sets.enumerated() {
                    // A savepoint of its own (not `Connection.savepoint`: a rollback that fails
                    // here must stop the whole run, never be passed over).
                    try writer.connection.execute("SAVEPOINT change_set")
                    let outcome: Result<([BatchOperation], [String: String]), any Error>
                    do {
                        outcome = .success(
                            try self.applyChangeSet(
                                set, outer, ids, faults: faultResponses[setIndex], minimal: minimal[setIndex],
                                writer: writer, rowChecks: rowChecks, failed: { Failed(response: $0) }))
                    } catch {
                        outcome = .failure(error)
                    }
                    // SQLite ends the whole transaction after some errors (a full disk), also
                    // inside a request that is answered as failed: what follows would commit
                    // statement by statement, so the run stops and nothing of it is applied.
                    guard writer.connection.isInTransaction else {
                        if case .failure(let error) = outcome { throw TransactionLost(cause: error) }
                        throw TransactionLost(cause: ServiceFailure(500, "TransactionLost", "The transaction ended"))
                    }
                    switch outcome {
                    case .success(let (operations, setIDs)):
                        try writer.connection.execute("RELEASE change_set")
                        ids = setIDs
                        parts.append(
                            .changeSet(
                                ChangeSet(
                                    boundary: "changesetresponse_" + UUID().uuidString.lowercased(),
                                    operations: operations)))
                    case .failure(let error):
                        do {
                            try writer.connection.execute("ROLLBACK TO change_set")
                            try writer.connection.execute("RELEASE change_set")
                        } catch let rollback {
                            throw TransactionLost(cause: rollback)
                        }
                        let response =
                            (error as? Failed)?.response ?? self.errorResponse(error, version: outer.version)
                        parts.append(.operation(BatchOperation(message: Self.batchMessage(response))))
                    }
                }
                CrashPoint.reach("batch-applied")
                return (parts, ids)
            }
            CrashPoint.reach("batch-committed")
            contentIDs = ids
            return parts
        } catch {
            let cause = (error as? TransactionLost)?.cause ?? error
            let answer = Self.batchMessage(
                (cause as? Failed)?.response ?? errorResponse(cause, version: outer.version))
            return sets.map { _ in .operation(BatchOperation(message: answer)) }
        }
    }

    /// Applies one change set's operations with `writer` (the caller's transaction or
    /// savepoint rolls back on a throw); returns their answers and the Content-IDs known after.
    private func applyChangeSet(
        _ set: ChangeSet, _ outer: ServiceRequest, _ known: [String: String], faults: [ServiceResponse?],
        minimal: Set<Int>, writer: StoreWriter, rowChecks: RowChecks, failed: (ServiceResponse) -> any Error
    ) throws -> ([BatchOperation], [String: String]) {
        var ids = known
        var operations: [BatchOperation] = []
        for (index, operation) in set.operations.enumerated() {
            var sub = subrequest(operation.message, outer, contentIDs: ids)
            sub.rowChecks = rowChecks
            if minimal.contains(index) { sub.headers["Prefer"] = "return=minimal" }
            var response: ServiceResponse
            if let failure = faults[index] {
                throw failed(failure)
            } else if let id = repeatabilityID(sub), let stored = try Self.stored(id, writer.connection) {
                response = stored
            } else {
                do {
                    response = try modify(sub, writer)
                } catch {
                    response = errorResponse(error, version: outer.version)
                }
                if response.status >= 400 { throw failed(response) }
                try remember(sub, response, writer)
            }
            response = configured(response)
            var partHeaders = HTTPHeaders([
                ("Content-Type", "application/http"), ("Content-Transfer-Encoding", "binary"),
            ])
            if let id = operation.contentID {
                partHeaders["Content-ID"] = id
                if let location = response.headers["Location"] { ids[id] = location }
            }
            operations.append(BatchOperation(partHeaders: partHeaders, message: Self.batchMessage(response)))
        }
        return (operations, ids)
    }

    /// A 4.01 JSON batch: requests in order, each atomicity group in one transaction.
    private func jsonBatch(_ request: ServiceRequest) async throws -> ServiceResponse {
        let batch = try JSONBatchRequest.read(request.body)
        for item in batch.requests { try checkPartURL(item.url, request, part: "Request \(item.id)") }
        var responses: [JSONBatchResponse.Response] = []
        var locations: [String: String] = [:]
        var failed: Set<String> = []
        var index = 0
        func toResponse(_ id: String, _ response: ServiceResponse, group: String?) -> JSONBatchResponse.Response {
            var headers: [String: String] = [:]
            for field in response.headers { headers[field.name.lowercased()] = field.value }
            let body =
                response.body.isEmpty
                ? nil
                : ((try? JSONValue.parse(response.body)) ?? .string(String(decoding: response.body, as: UTF8.self)))
            return JSONBatchResponse.Response(
                id: id, status: response.status, headers: headers, body: body, atomicityGroup: group)
        }
        @Sendable func message(_ item: JSONBatchRequest.Request) -> BatchMessage {
            var headers = HTTPHeaders()
            for (name, value) in item.headers { headers[name] = value }
            if item.body != nil && headers["Content-Type"] == nil { headers["Content-Type"] = "application/json" }
            let body: [UInt8] =
                item.body.map { value in
                    if case .string(let text) = value, headers["Content-Type"]?.hasPrefix("application/json") == false {
                        return Array(text.utf8)
                    }
                    return Array(value.serialized.utf8)
                } ?? []
            return .request(item.method, item.url, headers: headers, body: body)
        }
        func refusal(_ item: JSONBatchRequest.Request, _ status: Int, _ code: String, _ message: String)
            -> JSONBatchResponse.Response
        {
            let error = JSONValue.object([
                .init("error", .object([.init("code", .string(code)), .init("message", .string(message))]))
            ])
            return JSONBatchResponse.Response(
                id: item.id, status: status, headers: ["content-type": "application/json"], body: error,
                atomicityGroup: item.atomicityGroup)
        }
        let noConditions =
            "This service does not evaluate 'if' conditions (Capabilities.BatchSupport): the request was not run"
        while index < batch.requests.count {
            let item = batch.requests[index]
            if item.atomicityGroup == nil, item.condition != nil {
                failed.insert(item.id)
                responses.append(refusal(item, 424, "FailedDependency", noConditions))
                index += 1
                continue
            }
            if item.dependsOn.contains(where: failed.contains) {
                failed.insert(item.id)
                if let group = item.atomicityGroup { failed.insert(group) }
                responses.append(
                    JSONBatchResponse.Response(id: item.id, status: 424, atomicityGroup: item.atomicityGroup))
                index += 1
                continue
            }
            guard let group = item.atomicityGroup else {
                let sub = subrequest(message(item), request, contentIDs: locations)
                let response = await handleUnfaulted(sub)
                if let location = response.headers["Location"] {
                    locations[item.id] = location
                } else if item.method == "GET", let location = Self.entityLocation(of: response, sub) {
                    // `$1` may name the entity a GET returned, as well as one created.
                    locations[item.id] = location
                }
                if response.status >= 400 { failed.insert(item.id) }
                responses.append(toResponse(item.id, response, group: nil))
                index += 1
                continue
            }
            // Every consecutive request of the group runs in one transaction.
            var members: [JSONBatchRequest.Request] = []
            while index < batch.requests.count, batch.requests[index].atomicityGroup == group {
                members.append(batch.requests[index])
                index += 1
            }
            // Not run at all: a member with a condition (424), or a read (which this service
            // answers outside a transaction: 501); the others of the group get 424.
            if let blocker = members.first(where: { $0.condition != nil || $0.method == "GET" }) {
                failed.insert(group)
                for member in members { failed.insert(member.id) }
                responses += members.map { member in
                    if member.id == blocker.id, member.condition != nil {
                        return refusal(member, 424, "FailedDependency", noConditions)
                    }
                    if member.id == blocker.id {
                        return refusal(
                            member, 501, "NotImplemented",
                            "A GET inside an atomicity group is not supported by this service: send it outside the "
                                + "group, with dependsOn naming the group to read what it changed")
                    }
                    return refusal(
                        member, 424, "FailedDependency",
                        "Not run: request \(blocker.id) of atomicity group \(group) could not be run")
                }
                continue
            }
            struct Failed: Error { var id: String; var response: ServiceResponse }
            let known = locations
            let groupMembers = members
            do {
                let checks = try await checkRows(groupMembers.map { subrequest(message($0), request, contentIDs: known) })
                let (results, newLocations) = try await store.write {
                    writer -> ([(String, ServiceResponse)], [String: String]) in
                    var ids = known
                    var results: [(String, ServiceResponse)] = []
                    let rowChecks = try self.confirmed(checks, writer)
                    for member in groupMembers {
                        var sub = self.subrequest(message(member), request, contentIDs: ids)
                        sub.rowChecks = rowChecks
                        var response: ServiceResponse
                        if let id = self.repeatabilityID(sub), let repeated = try Self.stored(id, writer.connection) {
                            // Applied before: answered as then, in this transaction (so two
                            // copies sent at once apply once).
                            response = repeated
                        } else {
                            do {
                                response = try self.modify(sub, writer)
                            } catch {
                                throw Failed(
                                    id: member.id, response: self.errorResponse(error, version: request.version))
                            }
                            if response.status >= 400 { throw Failed(id: member.id, response: response) }
                            if self.repeatabilityID(sub) != nil {
                                response.headers["Repeatability-Result"] = "accepted"
                            }
                            try self.remember(sub, response, writer)
                        }
                        response = self.configured(response)
                        if let location = response.headers["Location"] { ids[member.id] = location }
                        results.append((member.id, response))
                    }
                    return (results, ids)
                }
                locations = newLocations
                responses += results.map { toResponse($0.0, $0.1, group: group) }
            } catch let failure as Failed {
                failed.insert(group)
                for member in members { failed.insert(member.id) }
                responses += members.map { member in
                    member.id == failure.id
                        ? toResponse(member.id, failure.response, group: group)
                        : JSONBatchResponse.Response(id: member.id, status: 424, atomicityGroup: group)
                }
            }
        }
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers["OData-Version"] = "4.01"
        return ServiceResponse(status: 200, headers: headers, body: JSONBatchResponse(responses: responses).write())
    }
}
