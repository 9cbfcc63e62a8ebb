import Foundation
import ODataCore
import ODataStore

/// Requests the offline store applies as one change set: all or none, queued together and
/// uploaded as one change set of one `$batch` (SPEC §5). A request names an entity created
/// earlier in the set by its Content-ID reference (`$1`), in its URL or in its body
/// (`"Customer@odata.bind": "$1"`).
///
/// ```swift
/// let responses = try await provider.changeSet { set in
///     let customer = set.add("POST", "Customers", json: #"{"Name":"Jan"}"#)
///     set.add("PATCH", customer, json: #"{"Name":"Jane"}"#)
/// }
/// ```
public struct OfflineODataChangeSet: Sendable {
    /// One request of a change set.
    public struct Request: Sendable {
        /// POST, PUT, PATCH, MERGE or DELETE.
        public var method: String
        /// The URL relative to the service root; it may start with a Content-ID reference.
        public var url: String
        /// Request headers (`Content-Type` of a media stream, say).
        public var headers: [String: String]
        /// The body: JSON, or a media stream.
        public var body: [UInt8]
        /// The Content-ID that later requests refer to as `$<contentID>`.
        public var contentID: String

        /// Creates a request from its parts.
        public init(method: String, url: String, headers: [String: String] = [:], body: [UInt8] = [], contentID: String)
        {
            self.method = method
            self.url = url
            self.headers = headers
            self.body = body
            self.contentID = contentID
        }
    }

    /// The requests, in order.
    public private(set) var requests: [Request] = []

    /// An empty change set.
    public init() {}

    /// Adds a request and returns its Content-ID reference (`$1`, `$2`, …) for later requests.
    @discardableResult
    public mutating func add(
        _ method: String, _ url: String, body: [UInt8] = [], headers: [String: String] = [:]
    ) -> String {
        // The next number no request of the set uses yet.
        let used = Set(requests.map(\.contentID))
        var number = requests.count + 1
        while used.contains("\(number)") { number += 1 }
        return add(Request(method: method, url: url, headers: headers, body: body, contentID: "\(number)"))
    }

    /// Adds a request with a JSON body and returns its Content-ID reference.
    @discardableResult
    public mutating func add(_ method: String, _ url: String, json: String) -> String {
        add(method, url, body: Array(json.utf8), headers: ["Content-Type": "application/json"])
    }

    /// Adds a request with its own Content-ID and returns its reference.
    @discardableResult
    public mutating func add(_ request: Request) -> String {
        requests.append(request)
        return "$" + request.contentID
    }
}

extension OfflineODataProvider {
    /// Builds a change set with `build` (run in the caller's isolation, so it may use the
    /// caller's state) and applies it (see ``execute(_:options:)``).
    public func changeSet(
        options: OfflineODataRequestOptions = OfflineODataRequestOptions(),
        isolation: isolated (any Actor)? = #isolation,
        _ build: (inout OfflineODataChangeSet) throws -> Void
    ) async throws -> [OfflineODataResponse] {
        var set = OfflineODataChangeSet()
        try build(&set)
        return try await execute(set, options: options)
    }

    /// Applies a change set to the store in one transaction: when one request is refused,
    /// none is applied or queued. The requests are queued with one transaction ID (the one in
    /// `options`, or a new one) and so uploaded as one change set. Returns one response per
    /// request.
    public func execute(
        _ changeSet: OfflineODataChangeSet, options: OfflineODataRequestOptions = OfflineODataRequestOptions()
    )
        async throws -> [OfflineODataResponse]
    {
        try await gatedLocalWrite { try await executeNow(changeSet, options: options) }
    }

    private func executeNow(
        _ changeSet: OfflineODataChangeSet, options: OfflineODataRequestOptions
    )
        async throws -> [OfflineODataResponse]
    {
        let store = try openStore()
        let model = store.model
        let root = serviceRoot
        let repeatable = parameters.enableRepeatableRequests
        var options = options
        if options.transactionID == nil { options.transactionID = "changeset-" + UUID().uuidString.lowercased() }
        let shared = options
        let requests = changeSet.requests
        var seen: Set<String> = []
        for request in requests {
            guard ["POST", "PUT", "PATCH", "MERGE", "DELETE"].contains(request.method.uppercased()) else {
                throw OfflineODataError(
                    .invalidRequest,
                    "A change set holds modifications only; \(request.method) \(request.url) is not one")
            }
            guard seen.insert(request.contentID).inserted else {
                throw OfflineODataError(
                    .invalidRequest, "The Content-ID \(request.contentID) is used twice in one change set")
            }
        }
        let results: [Entity?]
        do {
            results = try await store.write { writer -> [Entity?] in
                let keyMap = try RequestQueue.keyMap(writer.connection)
                // `$n` → the URL of the entity request n created, with its local key.
                var created: [String: String] = [:]
                var answers: [Entity?] = []
                for request in requests {
                    let verb = request.method.uppercased()
                    let url = Self.mapped(Self.resolvingContentIDs(request.url, created), keyMap)
                    let body =
                        created.isEmpty ? request.body : Self.resolvingContentIDs(inLinksOf: request.body, created)
                    let change = try LocalChange.makeChange(
                        method: verb, url: url, headers: request.headers, body: body, options: shared,
                        model: model, serviceRoot: root, keyMap: keyMap)
                    guard change.target.entitySet != LocalSchema.errorArchive else {
                        throw OfflineODataError(
                            .invalidRequest, "ErrorArchive rows are deleted one at a time, not in a change set")
                    }
                    let entity = try LocalExecutor(writer, model: model, serviceRoot: root).apply(
                        change, repeatable: repeatable)
                    if verb == "POST", !change.target.isRef, let entity {
                        let target = change.target
                        let set =
                            target.navigation.flatMap {
                                model.targetEntitySet(from: target.entitySet, navigationPath: $0)?.name
                            }
                            ?? target.entitySet
                        if let key = Keys.key(of: entity, in: set, model: model) {
                            created["$" + request.contentID] = set + Keys.predicate(key, in: set, model: model)
                        }
                    }
                    answers.append(entity)
                }
                return answers
            }
        } catch let error as OfflineODataError {
            throw error
        } catch let error as DatabaseError where OfflineODataProvider.isDiskFull(error) {
            throw error  // reported as diskFull, naming the store, by `execute`
        } catch {
            throw OfflineODataError(.store, "The change set could not be applied locally (nothing of it was): \(error)")
        }
        return results.map { entity in
            OfflineODataResponse(
                status: entity == nil ? 204 : 201, body: entity.map { Self.encode(.entity($0), model: model) } ?? [],
                result: entity.map { .entity($0) })
        }
    }

    /// `$1/Orders` → `Customers(-1)/Orders` for the entities created so far.
    static func resolvingContentIDs(_ url: String, _ created: [String: String]) -> String {
        guard url.hasPrefix("$") else { return url }
        let reference = String(url.prefix { $0 != "/" && $0 != "?" })
        guard let target = created[reference] else { return url }
        return target + url.dropFirst(reference.count)
    }

    /// A JSON body whose links (`…@odata.bind`, `@odata.id`, V2 `uri`) name entities of the
    /// change set by Content-ID reference, with those resolved; other values stay as they are
    /// (a `"$1"` that is a property's value is text). Bodies that are not JSON are unchanged.
    static func resolvingContentIDs(inLinksOf body: [UInt8], _ created: [String: String]) -> [UInt8] {
        guard body.contains(UInt8(ascii: "$")), let json = try? JSONValue.parse(body) else { return body }
        func resolve(_ value: JSONValue) -> JSONValue {
            switch value {
            case .string(let text): return .string(resolvingContentIDs(text, created))
            case .array(let items): return .array(items.map(resolve))
            default: return value
            }
        }
        func walk(_ value: JSONValue, depth: Int) -> JSONValue {
            guard depth < 64 else { return value }
            switch value {
            case .object(let members):
                return .object(
                    members.map { member in
                        let name = member.name
                        if name.hasSuffix("@odata.bind") || name == "@odata.id" || name == "uri" {
                            return JSONValue.Member(name, resolve(member.value))
                        }
                        return JSONValue.Member(name, walk(member.value, depth: depth + 1))
                    })
            case .array(let items):
                return .array(items.map { walk($0, depth: depth + 1) })
            default:
                return value
            }
        }
        return Array(walk(json, depth: 0).serialized.utf8)
    }

    /// A URL whose entity has been re-keyed by the backend, with the backend's key.
    static func mapped(_ url: String, _ keyMap: [String: String]) -> String {
        for (local, server) in keyMap where url == local || url.hasPrefix(local + "/") || url.hasPrefix(local + "?") {
            return server + url.dropFirst(local.count)
        }
        return url
    }

    /// A `$batch` sent to the offline provider (multipart, V2 and V4, or 4.01 JSON): reads are
    /// answered from the store, each change set (atomicity group) is applied as one with
    /// ``execute(_:options:)``, and a modification outside one on its own. The answer is a
    /// batch response of the same format; a change set that fails is answered with one error.
    func executeBatch(
        headers: [String: String], body: [UInt8], options: OfflineODataRequestOptions
    ) async throws -> OfflineODataResponse {
        let contentType = LocalChange.header("Content-Type", in: headers) ?? ""
        if contentType.lowercased().hasPrefix("application/json") {
            return try await executeJSONBatch(body, options: options)
        }
        guard contentType.lowercased().hasPrefix("multipart/mixed") else {
            throw OfflineODataError(
                .invalidRequest,
                "POST $batch needs Content-Type multipart/mixed (with a boundary) or application/json, not '\(contentType)'"
            )
        }
        let batch: MultipartBatch
        do {
            batch = try MultipartBatch.read(
                body, boundary: ODataCore.HTTPHeaders.parameter("boundary", in: contentType))
        } catch {
            throw OfflineODataError(.invalidRequest, "The $batch body is not a valid multipart batch: \(error)")
        }
        var parts: [BatchPart] = []
        for part in batch.parts {
            switch part {
            case .operation(let operation):
                let message = operation.message
                let method = (message.method ?? "GET").uppercased()
                let request = Self.changeSetRequest(operation, index: parts.count)
                parts.append(
                    .operation(BatchOperation(message: await singleAnswer(request, method: method, options: options))))
            case .changeSet(let set):
                let requests = set.operations.enumerated().map { Self.changeSetRequest($1, index: $0) }
                let answers = await changeSetAnswers(requests, options: options)
                if answers.count == requests.count {
                    let operations = zip(requests, answers).map { request, answer in
                        var partHeaders = ODataCore.HTTPHeaders([
                            ("Content-Type", "application/http"),
                            ("Content-Transfer-Encoding", "binary"),
                        ])
                        partHeaders["Content-ID"] = request.contentID
                        return BatchOperation(partHeaders: partHeaders, message: answer)
                    }
                    parts.append(.changeSet(ChangeSet(operations: operations)))
                } else {
                    // The change set failed: one answer for all of it, nothing applied.
                    parts.append(.operation(BatchOperation(message: answers[0])))
                }
            }
        }
        let answer = MultipartBatch(parts: parts)
        return OfflineODataResponse(
            status: 200, body: answer.write(), result: nil, headers: ["Content-Type": answer.contentType])
    }

    /// A 4.01 JSON batch: requests with the same `atomicityGroup` form one change set.
    private func executeJSONBatch(
        _ body: [UInt8], options: OfflineODataRequestOptions
    ) async throws -> OfflineODataResponse {
        let batch: JSONBatchRequest
        do {
            batch = try JSONBatchRequest.read(body)
        } catch {
            throw OfflineODataError(.invalidRequest, "The $batch body is not a valid JSON batch: \(error)")
        }
        var responses: [JSONBatchResponse.Response] = []
        var index = 0
        let requests = batch.requests
        // Requests and groups that failed (a dependant gets 424), and the entities earlier
        // requests created or read (for `$<id>` in a URL).
        var failed: Set<String> = []
        var locations: [String: String] = [:]
        func refusal(_ request: JSONBatchRequest.Request, _ status: Int, _ code: String, _ message: String)
            -> JSONBatchResponse.Response
        {
            let error = JSONValue.object([
                .init("error", .object([.init("code", .string(code)), .init("message", .string(message))]))
            ])
            return JSONBatchResponse.Response(
                id: request.id, status: status, body: error, atomicityGroup: request.atomicityGroup)
        }
        while index < requests.count {
            let first = requests[index]
            var group = [first]
            if let atomicity = first.atomicityGroup {
                while index + group.count < requests.count, requests[index + group.count].atomicityGroup == atomicity {
                    group.append(requests[index + group.count])
                }
            }
            index += group.count
            func fail(_ answers: [JSONBatchResponse.Response]) {
                responses += answers
                for request in group { failed.insert(request.id) }
                if let atomicity = first.atomicityGroup { failed.insert(atomicity) }
            }
            // Not run: what depends on a failure, a condition (not evaluated offline), a read
            // inside an atomicity group (a change set holds modifications only).
            if let blocked = group.first(where: { $0.dependsOn.contains(where: failed.contains) }) {
                let names = blocked.dependsOn.filter(failed.contains).joined(separator: ", ")
                fail(group.map { refusal($0, 424, "FailedDependency", "Not run: \(names) failed") })
                continue
            }
            if let blocker = group.first(where: { $0.condition != nil || ($0.atomicityGroup != nil && $0.method == "GET") }) {
                fail(
                    group.map { request in
                        if request.id != blocker.id {
                            return refusal(request, 424, "FailedDependency", "Not run: request \(blocker.id) was not")
                        }
                        if request.condition != nil {
                            return refusal(
                                request, 424, "FailedDependency",
                                "The offline store does not evaluate 'if' conditions: the request was not run")
                        }
                        return refusal(
                            request, 501, OfflineODataError.Code.notSupportedOffline.rawValue,
                            "A GET inside an atomicity group is not supported: send it outside the group, with "
                                + "dependsOn naming the group")
                    })
                continue
            }
            let changeSet = group.map { request in
                OfflineODataChangeSet.Request(
                    method: request.method,
                    // Requests of an earlier group or alone; the change set resolves its own.
                    url: ContentIDReferences.resolve(url: request.url, locations),
                    headers: request.headers,
                    body: request.body.map { Array($0.serialized.utf8) } ?? [], contentID: request.id)
            }
            if first.atomicityGroup == nil {
                let message = await singleAnswer(changeSet[0], method: first.method.uppercased(), options: options)
                let status = message.status ?? 500
                if status >= 400 { failed.insert(first.id) }
                if let location = message.headers["Location"] {
                    locations[first.id] = location
                } else if first.method == "GET", status == 200,
                    let path = changeSet[0].url.split(separator: "?", maxSplits: 1).first.map(String.init),
                    path.hasSuffix(")"), let body = try? JSONValue.parse(message.body), body.objectMembers != nil,
                    body["value"] == nil
                {
                    // One entity read by its key: `$<id>` may name it too.
                    locations[first.id] = path
                }
                responses.append(
                    JSONBatchResponse.Response(
                        id: first.id, status: status,
                        body: message.body.isEmpty ? nil : try? JSONValue.parse(message.body)))
                continue
            }
            let answers = await changeSetAnswers(changeSet, options: options)
            let whole = answers.count == group.count
            for (request, answer) in zip(group, whole ? answers : Array(repeating: answers[0], count: group.count)) {
                if let location = answer.headers["Location"], whole { locations[request.id] = location }
                responses.append(
                    JSONBatchResponse.Response(
                        id: request.id, status: answer.status ?? 500,
                        body: answer.body.isEmpty ? nil : try? JSONValue.parse(answer.body),
                        atomicityGroup: request.atomicityGroup))
            }
            if !whole || answers.contains(where: { ($0.status ?? 500) >= 400 }) {
                for request in group { failed.insert(request.id) }
                if let atomicity = first.atomicityGroup { failed.insert(atomicity) }
            }
        }
        return OfflineODataResponse(
            status: 200, body: JSONBatchResponse(responses: responses).write(), result: nil,
            headers: ["Content-Type": "application/json"])
    }

    static func changeSetRequest(_ operation: BatchOperation, index: Int) -> OfflineODataChangeSet.Request {
        let message = operation.message
        var headers: [String: String] = [:]
        for field in message.headers { headers[field.name] = field.value }
        // A part without a Content-ID cannot be referred to: its made-up one cannot clash.
        return OfflineODataChangeSet.Request(
            method: message.method ?? "", url: message.url ?? "", headers: headers, body: message.body,
            contentID: operation.contentID ?? "part-\(index + 1)")
    }

    /// The answers of a change set: one per request, or one error for all of it. Each change
    /// set of a batch gets a transaction ID of its own (the app's options otherwise apply).
    private func changeSetAnswers(
        _ requests: [OfflineODataChangeSet.Request],
        options: OfflineODataRequestOptions
    ) async -> [BatchMessage] {
        var set = OfflineODataChangeSet()
        for request in requests { set.add(request) }
        var own = options
        own.transactionID = nil
        do {
            return try await execute(set, options: own).map(Self.answer)
        } catch {
            return [Self.errorAnswer(error)]
        }
    }

    /// A request of a batch outside any change set, answered as the provider answers it alone
    /// (a modification is queued as if sent by itself).
    private func singleAnswer(
        _ request: OfflineODataChangeSet.Request, method: String,
        options: OfflineODataRequestOptions
    ) async -> BatchMessage {
        do {
            return Self.answer(
                try await execute(
                    method: method, url: request.url, headers: request.headers, body: request.body,
                    options: options))
        } catch {
            return Self.errorAnswer(error)
        }
    }

    static func answer(_ response: OfflineODataResponse) -> BatchMessage {
        var headers = ODataCore.HTTPHeaders()
        for (name, value) in response.headers { headers[name] = value }
        if !response.body.isEmpty, headers["Content-Type"] == nil { headers["Content-Type"] = "application/json" }
        return .response(response.status, headers: headers, body: response.body)
    }

    /// An OData error answer: 400 for a refused request, 404 for a missing entity.
    static func errorAnswer(_ error: any Error) -> BatchMessage {
        let status: Int
        let code: String
        if let error = error as? OfflineODataError {
            status = error.httpStatus ?? (error.code == .notSupportedOffline ? 501 : 400)
            code = error.code.rawValue
        } else {
            status = 400
            code = "invalidRequest"
        }
        let message = (error as? OfflineODataError)?.message ?? "\(error)"
        let body = JSONValue.object([
            .init("error", .object([.init("code", .string(code)), .init("message", .string(message))]))
        ])
        return .response(
            status, headers: ODataCore.HTTPHeaders([("Content-Type", "application/json")]),
            body: Array(body.serialized.utf8))
    }
}
