public import ODataCore

/// A request to the service, independent of the HTTP server that carried it.
public struct ServiceRequest: Sendable {
    public var method: String
    /// The resource path and query relative to the service root, e.g. `Products('P1')?$select=Name`.
    public var target: String
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// V4 or V2, from the root the request came to.
    public var version: ODataVersion
    /// The absolute URL of the service root (`http://host:port/odata/v4/`), when known; used
    /// for V2 `__metadata` URIs and next links.
    public var serviceRoot: String?
    /// The user the request runs as under ``ODataService/Options/users``: its row filters decide
    /// what it reads and changes. The HTTP server sets it from the credentials;
    /// ``ODataService/handle(_:)`` finds it from the `Authorization` header when it is nil.
    public var user: ServiceUser?
    /// The rows a modification touches as they were before its transaction (row filters).
    var rowChecks: RowChecks?

    /// Creates a value from its parts.
    public init(method: String, target: String, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = [], version: ODataVersion = .v4) {
        self.method = method.uppercased()
        self.target = target.hasPrefix("/") ? String(target.dropFirst()) : target
        self.headers = headers
        self.body = body
        self.version = version
    }

    var path: String { String(target.split(separator: "?", maxSplits: 1).first ?? "") }

    /// An absolute context URL (`http://host/odata/v4/$metadata#Products`): a relative one
    /// would be resolved against the request URL, wrong for deeper paths.
    func contextURL(_ fragment: String) -> String { (serviceRoot ?? "") + "$metadata#" + fragment }
    var isV2: Bool { version.isLegacy }
}

/// The service's answer.
public struct ServiceResponse: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// Fault injection: the change was committed, but the connection is dropped instead of
    /// sending this response.
    public var dropConnection = false
    /// Fault injection: the body goes in 8 parts with this many milliseconds before each.
    public var trickleMilliseconds: Int?

    /// Creates a value from its parts.
    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    static func json(_ status: Int, _ body: [UInt8], version: ODataVersion) -> ServiceResponse {
        var headers = HTTPHeaders()
        headers["Content-Type"] = version.isLegacy ? "application/json" : "application/json;odata.metadata=minimal"
        headers[version.isLegacy ? "DataServiceVersion" : "OData-Version"] = version.isLegacy ? "2.0" : "4.0"
        return ServiceResponse(status: status, headers: headers, body: body)
    }

    /// A `text/plain` answer (`$count`, `$value`) with the version header.
    static func text(_ text: String, version: ODataVersion) -> ServiceResponse {
        var headers = HTTPHeaders()
        headers["Content-Type"] = "text/plain"
        headers[version.isLegacy ? "DataServiceVersion" : "OData-Version"] = version.isLegacy ? "2.0" : "4.0"
        return ServiceResponse(status: 200, headers: headers, body: Array(text.utf8))
    }

    static func error(_ status: Int, code: String, _ message: String, version: ODataVersion, target: String? = nil) -> ServiceResponse {
        let error = ODataError(code: code, message: message, target: target, httpStatus: status)
        return json(status, version.isLegacy ? error.v2JSON() : error.v4JSON(), version: version)
    }
}
