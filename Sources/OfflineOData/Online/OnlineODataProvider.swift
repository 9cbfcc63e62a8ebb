public import Foundation
public import ODataCore
public import ODataStore
public import Logging

/// Sends OData requests straight to the backend through the same ``Transport`` as the offline
/// provider, with the same request API: reads, writes, `$batch`, function imports and actions.
/// Useful on its own as an OData client for Swift on Linux and Apple platforms.
///
/// The backend's `$metadata` is read once, on first use, to type the answers. A backend error
/// is thrown as the backend's `ODataError` (with its HTTP status); a connection
/// failure as ``OfflineODataError`` with code `transport`.
public actor OnlineODataProvider: ODataRequestHandler {
    /// The service root, ending with `/`.
    public nonisolated let serviceRoot: String
    private let session: BackendSession
    private let timeout: TimeInterval?
    private var defaults: RequestDefaults
    private var cachedModel: Model?
    private var cache: ODataResponseCache?

    /// Creates a provider for `serviceRoot`. `customHeaders`, `customCookies` and `urlSuffix`
    /// go with every request, as with the offline provider; so do the credentials of
    /// `authenticator` and, with `csrfProtection`, SAP Gateway's CSRF token (see ``OfflineODataParameters/csrfProtection``).
    public init(
        serviceRoot: URL, transport: (any Transport)? = nil, customHeaders: [String: String] = [:],
        customCookies: [String: String] = [:], urlSuffix: String? = nil, timeout: TimeInterval? = nil,
        authenticator: (any ODataAuthenticator)? = nil, csrfProtection: Bool = true,
        logger: Logger = OfflineODataLogging.disabled
    ) {
        var root = serviceRoot.absoluteString
        if !root.hasSuffix("/") { root += "/" }
        self.serviceRoot = root
        self.session = BackendSession(
            transport: transport ?? DefaultTransport.make(logger: logger), serviceRoot: root,
            authenticator: authenticator, csrfProtection: csrfProtection, logger: logger)
        self.timeout = timeout
        self.defaults = RequestDefaults(
            serviceRoot: root, urlSuffix: urlSuffix, customHeaders: customHeaders, customCookies: customCookies,
            version: nil)
    }

    /// Keeps every collection a GET returns in `cache`, under the request URL (nil: stop).
    public func setCache(_ cache: ODataResponseCache?) { self.cache = cache }

    /// Reads `url` (every page) into the cache set with ``setCache(_:)``: the first time in
    /// full, asking for change tracking; later through the delta link kept for the URL key,
    /// merged incrementally. Returns how many entities and removals arrived.
    @discardableResult
    public func refreshCache(forURL url: String) async throws -> Int {
        guard let cache else { throw OfflineODataError(.invalidRequest, "No cache is set; call setCache first") }
        let model = try await model()
        let key = relative(url)
        let set = try DefiningQueries.entitySet(of: key, model: model)
        let token = try await cache.deltaToken(forURLKey: key)
        var next: String? = token ?? key
        var first = true
        var received = 0
        var pages = 0
        while let page = next {
            pages += 1
            guard pages <= 100_000 else {
                throw OfflineODataError(.backend, "\(url): more than 100000 pages; the backend's next links loop")
            }
            let response = try await send(method: "GET", url: page, headers: ["Prefer": "odata.track-changes"])
            let collection: EntityCollection
            do {
                collection = try model.readCollection(response.body, entityType: model.entitySet(set)?.entityType)
            } catch {
                throw OfflineODataError(.backend, "GET \(page) did not answer with a collection: \(error)")
            }
            try await cache.mergeEntries(
                collection, forURLKey: key, entitySet: set, mode: token == nil && first ? .replace : .incremental)
            received += collection.entities.count + collection.deleted.count
            first = false
            next = collection.nextLink
        }
        return received
    }

    /// Replaces the custom headers sent with every later request.
    public func setCustomHeaders(_ headers: [String: String]) { defaults.customHeaders = headers }

    /// Replaces the custom cookies sent with every later request.
    public func setCustomCookies(_ cookies: [String: String]) { defaults.customCookies = cookies }

    /// The backend's model, read from `$metadata` on first use.
    public func model() async throws -> Model {
        if let cachedModel { return cachedModel }
        let response = try await send(method: "GET", url: "$metadata", headers: ["Accept": "application/xml"])
        let parsed: Model
        do {
            parsed = try MetadataParser().parse(Data(response.body))
        } catch {
            throw OfflineODataError(
                .backend, "The backend's $metadata at \(serviceRoot)$metadata is not valid: \(error)")
        }
        cachedModel = parsed
        defaults.version = parsed.version
        return parsed
    }

    /// Sends one request as it is and returns the raw answer; a status of 400 or more throws
    /// the backend's error.
    public func send(
        method: String, url: String, headers: [String: String] = [:], body: [UInt8] = []
    ) async throws -> TransportResponse {
        let request = defaults.request(method: method.uppercased(), url: url, headers: headers, body: body)
        let response: TransportResponse
        do {
            response = try await session.send(request, timeout: timeout, tokenRequest: defaults.tokenRequest)
        } catch let error as OfflineODataError {
            throw error
        } catch let error as TransportError {
            throw OfflineODataError(.transport, error.description)
        } catch {
            throw OfflineODataError(.transport, "\(method) \(request.url) failed: \(error)")
        }
        guard response.status < 400 else { throw Self.backendError(response) }
        return response
    }

    /// The backend's error from a failed response; a body that is not an OData error becomes
    /// one with code `HTTP<status>` and the start of the body as its message.
    static func backendError(_ response: TransportResponse) -> ODataError {
        if var error = try? ODataError.parse(response.body, httpStatus: response.status) {
            error.httpStatus = response.status
            return error
        }
        return ODataError(
            code: "HTTP\(response.status)", message: String(decoding: response.body.prefix(500), as: UTF8.self),
            httpStatus: response.status)
    }

    /// Runs an OData request against the backend. JSON bodies get `Content-Type:
    /// application/json`; the answer is typed with the model where its shape is known
    /// (entities, collections, values, counts).
    public func execute(
        method: String, url: String, headers: [String: String] = [:], body: [UInt8] = [],
        options: OfflineODataRequestOptions = OfflineODataRequestOptions()
    ) async throws -> ODataResponse {
        let model = try await model()
        var fields = options.customHeaders.merging(headers) { _, new in new }
        if !body.isEmpty, !fields.keys.contains(where: { $0.lowercased() == "content-type" }) {
            fields["Content-Type"] = "application/json"
        }
        let response = try await send(method: method, url: url, headers: fields, body: body)
        var answerHeaders: [String: String] = [:]
        for field in response.headers { answerHeaders[field.name] = field.value }
        let result = Self.decode(response, method: method.uppercased(), url: relative(url), model: model)
        if let cache, method.uppercased() == "GET", case .collection(let collection)? = result,
            let set = try? DefiningQueries.entitySet(of: relative(url), model: model)
        {
            try await cache.mergeEntries(
                collection, forURLKey: relative(url), entitySet: set,
                mode: relative(url).contains("skiptoken") ? .incremental : .replace)
        }
        return ODataResponse(status: response.status, body: response.body, result: result, headers: answerHeaders)
    }

    /// Reads a URL from the backend as a model value.
    public func read(_ url: String) async throws -> QueryResult {
        let response = try await execute(method: "GET", url: url)
        guard let result = response.result else {
            throw OfflineODataError(
                .backend,
                "GET \(url): the answer (\(response.body.count) bytes) is not an entity, collection, value or count")
        }
        return result
    }

    /// Sends a multipart `$batch` and returns the backend's multipart answer, part by part.
    public func batch(_ batch: MultipartBatch) async throws -> MultipartBatch {
        _ = try await model()
        let response = try await send(
            method: "POST", url: "$batch", headers: ["Content-Type": batch.contentType], body: batch.write())
        let boundary = response.headers["Content-Type"].flatMap { ODataCore.HTTPHeaders.parameter("boundary", in: $0) }
        do {
            return try MultipartBatch.read(response.body, boundary: boundary)
        } catch {
            throw OfflineODataError(.backend, "The $batch answer is not valid multipart: \(error)")
        }
    }

    /// `url` relative to the service root.
    private func relative(_ url: String) -> String {
        Keys.relativeToRoot(url, serviceRoot: serviceRoot) ?? url
    }

    /// Types an answer by the shape of the resource the URL names.
    static func decode(_ response: TransportResponse, method: String, url: String, model: Model) -> QueryResult? {
        let path = String(url.split(separator: "?", maxSplits: 1).first ?? "")
        if path.hasSuffix("/$count") || path == "$count" {
            let text = String(decoding: response.body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            return Int64(text).map { .count($0) }
        }
        guard !response.body.isEmpty, (response.headers["Content-Type"] ?? "application/json").contains("json"),
            let (_, resolved) = try? Keys.resolve(url, model: model, what: "URL")
        else { return nil }
        let legacy = model.version.isLegacy
        switch resolved.shape {
        case .entityCollection(let type) where method == "GET":
            return (try? model.readCollection(response.body, entityType: type)).map { .collection($0) }
        case .entityCollection(let type), .entity(let type):
            // A POST to a collection answers with the created entity.
            return (try? model.readEntity(response.body, entityType: type)).map { .entity($0) }
        case .primitive(let type), .complex(let type):
            guard !legacy else { return nil }
            return
                (try? V4JSONReader(model: model).readValue(response.body, type: type.map { TypeReference(name: $0) }))
                .map { .value($0) }
        case .primitiveCollection(let type), .complexCollection(let type):
            guard !legacy else { return nil }
            return
                (try? V4JSONReader(model: model).readValue(
                    response.body, type: type.map { TypeReference(name: $0, isCollection: true) })).map { .value($0) }
        default:
            return nil
        }
    }
}
