/// A 4.01 JSON batch request: `{"requests": [{"id", "method", "url", "headers", "body",
/// "atomicityGroup", "dependsOn"}]}`.
public struct JSONBatchRequest: Sendable, Hashable {
    /// One request of a JSON batch.
    public struct Request: Sendable, Hashable {
        public var id: String
        public var method: String
        public var url: String
        public var headers: [String: String]
        /// A JSON body, or a string for other media types.
        public var body: JSONValue?
        public var atomicityGroup: String?
        public var dependsOn: [String]
        /// Creates a value from its parts.
        public init(id: String, method: String, url: String, headers: [String: String] = [:], body: JSONValue? = nil,
                    atomicityGroup: String? = nil, dependsOn: [String] = []) {
            self.id = id
            self.method = method
            self.url = url
            self.headers = headers
            self.body = body
            self.atomicityGroup = atomicityGroup
            self.dependsOn = dependsOn
        }
    }

    public var requests: [Request]
    /// Creates a value from its parts.
    public init(requests: [Request]) { self.requests = requests }

    /// Reads a JSON batch request body; checks ids are unique and `dependsOn` refers back.
    public static func read(_ bytes: [UInt8]) throws(PayloadError) -> JSONBatchRequest {
        let root = try JSONValue.parse(bytes)
        guard let items = root["requests"]?.arrayValue else {
            throw PayloadError(.unexpectedValue, "A JSON batch needs a 'requests' array", offset: 0)
        }
        var requests: [Request] = []
        var seen: Set<String> = []
        var groups: Set<String> = []
        for (index, item) in items.enumerated() {
            let path = "requests[\(index)]"
            guard case .object = item else { throw PayloadError(.unexpectedValue, "A request must be an object", offset: 0, path: path) }
            guard let id = item["id"]?.stringValue, !id.isEmpty else { throw PayloadError(.missingValue, "A request needs an 'id'", offset: 0, path: path) }
            guard let method = item["method"]?.stringValue else { throw PayloadError(.missingValue, "A request needs a 'method'", offset: 0, path: path) }
            guard let url = item["url"]?.stringValue else { throw PayloadError(.missingValue, "A request needs a 'url'", offset: 0, path: path) }
            guard seen.insert(id).inserted else { throw PayloadError(.unexpectedValue, "Request id \(id) is used twice", offset: 0, path: path) }
            var request = Request(id: id, method: method.uppercased(), url: url)
            for member in item["headers"]?.objectMembers ?? [] {
                guard let value = member.value.stringValue else {
                    throw PayloadError(.wrongType, "Header \(member.name) must be a string", offset: 0, path: path + ".headers")
                }
                request.headers[member.name.lowercased()] = value
            }
            request.body = item["body"]
            request.atomicityGroup = item["atomicityGroup"]?.stringValue
            if let group = request.atomicityGroup { groups.insert(group) }
            for dependency in item["dependsOn"]?.arrayValue ?? [] {
                guard let name = dependency.stringValue, seen.contains(name) || groups.contains(name), name != id else {
                    throw PayloadError(.unexpectedValue, "dependsOn must name an earlier request or atomicity group", offset: 0, path: path + ".dependsOn")
                }
                request.dependsOn.append(name)
            }
            requests.append(request)
        }
        return JSONBatchRequest(requests: requests)
    }

    public func write() -> [UInt8] {
        var members: [JSONValue] = []
        for request in requests {
            var object: [JSONValue.Member] = [.init("id", .string(request.id)), .init("method", .string(request.method)), .init("url", .string(request.url))]
            if let group = request.atomicityGroup { object.append(.init("atomicityGroup", .string(group))) }
            if !request.dependsOn.isEmpty { object.append(.init("dependsOn", .array(request.dependsOn.map { .string($0) }))) }
            if !request.headers.isEmpty {
                object.append(.init("headers", .object(request.headers.keys.sorted().map { .init($0, .string(request.headers[$0] ?? "")) })))
            }
            if let body = request.body { object.append(.init("body", body)) }
            members.append(.object(object))
        }
        return Array(JSONValue.object([.init("requests", .array(members))]).serialized.utf8)
    }
}

/// A 4.01 JSON batch response: `{"responses": [{"id", "status", "headers", "body",
/// "atomicityGroup"}]}`.
public struct JSONBatchResponse: Sendable, Hashable {
    /// One response of a JSON batch.
    public struct Response: Sendable, Hashable {
        public var id: String
        public var status: Int
        public var headers: [String: String]
        public var body: JSONValue?
        public var atomicityGroup: String?
        /// Creates a value from its parts.
        public init(id: String, status: Int, headers: [String: String] = [:], body: JSONValue? = nil, atomicityGroup: String? = nil) {
            self.id = id
            self.status = status
            self.headers = headers
            self.body = body
            self.atomicityGroup = atomicityGroup
        }
    }

    public var responses: [Response]
    /// `@odata.nextLink` for asynchronous batches that continue later.
    public var nextLink: String?
    /// Creates a value from its parts.
    public init(responses: [Response], nextLink: String? = nil) {
        self.responses = responses
        self.nextLink = nextLink
    }

    public static func read(_ bytes: [UInt8]) throws(PayloadError) -> JSONBatchResponse {
        let root = try JSONValue.parse(bytes)
        guard let items = root["responses"]?.arrayValue else {
            throw PayloadError(.unexpectedValue, "A JSON batch response needs a 'responses' array", offset: 0)
        }
        var responses: [Response] = []
        for (index, item) in items.enumerated() {
            let path = "responses[\(index)]"
            guard let id = item["id"]?.stringValue else { throw PayloadError(.missingValue, "A response needs an 'id'", offset: 0, path: path) }
            guard case .number(let statusText)? = item["status"], let status = Int(statusText), (100...599).contains(status) else {
                throw PayloadError(.missingValue, "A response needs a numeric 'status'", offset: 0, path: path)
            }
            var response = Response(id: id, status: status, body: item["body"], atomicityGroup: item["atomicityGroup"]?.stringValue)
            for member in item["headers"]?.objectMembers ?? [] {
                response.headers[member.name.lowercased()] = member.value.stringValue ?? member.value.serialized
            }
            responses.append(response)
        }
        return JSONBatchResponse(responses: responses, nextLink: root["@odata.nextLink"]?.stringValue)
    }

    public func write() -> [UInt8] {
        var members: [JSONValue] = []
        for response in responses {
            var object: [JSONValue.Member] = [.init("id", .string(response.id)), .init("status", .number(String(response.status)))]
            if let group = response.atomicityGroup { object.append(.init("atomicityGroup", .string(group))) }
            if !response.headers.isEmpty {
                object.append(.init("headers", .object(response.headers.keys.sorted().map { .init($0, .string(response.headers[$0] ?? "")) })))
            }
            if let body = response.body { object.append(.init("body", body)) }
            members.append(.object(object))
        }
        var root: [JSONValue.Member] = [.init("responses", .array(members))]
        if let nextLink { root.append(.init("@odata.nextLink", .string(nextLink))) }
        return Array(JSONValue.object(root).serialized.utf8)
    }
}
