public import ODataCore
import ODataStore

/// Typed writes collected for one `$batch` change set: applied all together or not at all.
/// Build it in ``DataService/changeSet(_:)``.
public struct TypedChangeSet: Sendable {
    /// The service's version (URL literals, PATCH or MERGE, link syntax).
    public let version: ODataVersion
    var operations: [BatchOperation] = []

    init(version: ODataVersion) { self.version = version }

    /// How many requests the change set holds.
    public var count: Int { operations.count }

    private mutating func add(_ method: String, _ url: String, headers: [String: String], body: [UInt8]) {
        var fields = ODataCore.HTTPHeaders()
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { fields[name] = value }
        if !body.isEmpty, fields["Content-Type"] == nil { fields["Content-Type"] = "application/json" }
        var operation = BatchOperation(message: .request(method, url, headers: fields, body: body))
        operation.partHeaders["Content-ID"] = String(operations.count + 1)
        operations.append(operation)
    }

    /// Creates `entity` (with its navigation values: a deep insert); see
    /// ``DataService/create(_:in:keyGeneratedByBackend:headers:)``.
    public mutating func create<E: ODataEntity>(
        _ entity: E, in set: TypedEntitySet<E>? = nil, keyGeneratedByBackend: Bool = false
    ) throws(DataServiceError) {
        let body = DataService.createBody(entity, keyGeneratedByBackend: keyGeneratedByBackend)
        let bytes = version.requestBody(body)
        add("POST", try DataService.target(set).name, headers: [:], body: bytes)
    }

    /// Sends what changed from `original` to `entity`; nothing when nothing changed.
    public mutating func update<E: ODataEntity>(
        _ entity: E, from original: E, in set: TypedEntitySet<E>? = nil
    ) throws(DataServiceError) {
        guard let request = try DataService.updateRequest(entity, from: original, in: set, version: version) else {
            return
        }
        add(request.method, request.url, headers: request.headers, body: request.body)
    }

    /// Deletes `entity`.
    public mutating func delete<E: ODataEntity>(_ entity: E, in set: TypedEntitySet<E>? = nil) throws(DataServiceError)
    {
        let path = try DataService.target(set).path(entity.key).text(for: version)
        add("DELETE", path, headers: DataService.ifMatch(entity.odataETag), body: [])
    }

    /// Adds `target` to a to-many navigation property of `entity`.
    public mutating func link<E: ODataEntity, T>(
        _ entity: E, _ navigation: KeyPath<E.Fields, ToMany<T>>, to target: T, in set: TypedEntitySet<E>? = nil,
        targetSet: TypedEntitySet<T>? = nil
    ) throws(DataServiceError) {
        let request = try DataService.linkRequest(
            "POST", entity, E.Fields(prefix: .root)[keyPath: navigation].path, target, set, targetSet, version: version)
        add(request.method, request.url, headers: request.headers, body: request.body)
    }
}

/// The answer to one request of a change set.
public struct ChangeSetResponse: Sendable {
    /// The HTTP status of the request.
    public let status: Int
    /// The entity the request answered with (creates), untyped.
    public let entity: Entity?

    /// The answered entity as a generated type.
    public func entity<E: ODataEntity>(as type: E.Type) throws(DataServiceError) -> E? {
        guard let entity else { return nil }
        do {
            return try E(entity: entity)
        } catch {
            throw DataServiceError.wrap(error, "change set answer")
        }
    }
}

extension DataService {
    /// Sends the writes that `build` collects as one `$batch` change set: the service applies
    /// all of them or none. Returns one answer per request, in order. A refused request fails
    /// the whole change set with its error.
    ///
    /// ```swift
    /// try await service.changeSet { changes in
    ///     try changes.create(order)
    ///     try changes.update(partner, from: original)
    /// }
    /// ```
    @discardableResult
    public func changeSet(
        _ build: (inout TypedChangeSet) throws -> Void
    ) async throws(DataServiceError) -> [ChangeSetResponse] {
        var changes = TypedChangeSet(version: version)
        do {
            try build(&changes)
        } catch {
            throw DataServiceError.wrap(error, "change set")
        }
        guard !changes.operations.isEmpty else { return [] }
        let batch = MultipartBatch(parts: [.changeSet(ChangeSet(operations: changes.operations))])
        let response = try await send(
            "POST", "$batch", headers: ["Content-Type": batch.contentType], body: batch.write())
        let contentType = response.headers.first { $0.key.lowercased() == "content-type" }?.value
        let answer: MultipartBatch
        do {
            answer = try MultipartBatch.read(
                response.body, boundary: contentType.flatMap { ODataCore.HTTPHeaders.parameter("boundary", in: $0) })
        } catch {
            throw DataServiceError(.unexpectedResponse, "POST $batch: the answer is not a multipart batch: \(error)")
        }
        var results: [ChangeSetResponse] = []
        for operation in answer.operations {
            let status = operation.message.status ?? 0
            if status >= 400 {
                let backend =
                    (try? ODataError.parse(operation.message.body, httpStatus: status))
                    ?? ODataError(code: "HTTP\(status)", message: "a change set request failed", httpStatus: status)
                throw DataServiceError.wrap(backend, "POST $batch (change set of \(changes.count))")
            }
            var entity: Entity?
            if !operation.message.body.isEmpty, status == 200 || status == 201 {
                entity =
                    version.isLegacy
                    ? try? V2JSONReader().readEntity(operation.message.body)
                    : try? V4JSONReader().readEntity(operation.message.body)
            }
            results.append(ChangeSetResponse(status: status, entity: entity))
        }
        guard results.count == changes.count else {
            throw DataServiceError(
                .unexpectedResponse,
                "POST $batch: \(changes.count) requests, \(results.count) answers in the change set")
        }
        return results
    }
}
