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
        /// The `if` member: a condition on earlier requests (OData JSON Format 4.01 §19.1). Read
        /// so that it is answered as the format says for a service without them: the request
        /// is not executed and gets 424, and so does its atomicity group.
        public var condition: JSONValue?
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

    /// The methods a request of a batch may have.
    public static let methods: Set<String> = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    /// The members a request object may have (OData JSON Format 4.01, §19.1).
    static let requestMembers: Set<String> = [
        "id", "method", "url", "headers", "body", "atomicityGroup", "dependsOn", "if",
    ]
    /// First segments that start with `$` and name a system resource, not a request.
    static let systemResources: Set<String> = [
        "$batch", "$crossjoin", "$all", "$entity", "$root", "$id", "$metadata",
    ]

    /// The request a relative URL refers to by its first segment (`$1/Items` names request
    /// `1`), nil when it names none (a system resource such as `$metadata`, or no `$`).
    public static func referencedRequest(_ url: String) -> String? {
        guard url.hasPrefix("$") else { return nil }
        let end = url.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? url.endIndex
        let segment = String(url[..<end])
        guard !systemResources.contains(segment), segment.count > 1 else { return nil }
        return String(segment.dropFirst())
    }

    /// OData ABNF `request-id = 1*unreserved`: what an id and an atomicity group are made of.
    static func isRequestID(_ text: String) -> Bool {
        !text.isEmpty
            && text.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                    || c == UInt8(ascii: "-") || c == UInt8(ascii: ".") || c == UInt8(ascii: "_")
                    || c == UInt8(ascii: "~")
            }
    }

    /// Reads a JSON batch request body and checks the rules of OData JSON Format 4.01 §19.1:
    /// unique ids; ids and group names that are `request-id`s; known members only, each once
    /// and of its type, and headers each once; known methods; no body on GET or DELETE; no
    /// nested `$batch`; the members of an atomicity group adjacent; group names distinct from
    /// ids; `dependsOn` naming an earlier request or group, a group rather than a member of
    /// another group, and never its own group; a URL that starts with `$<id>` naming a request
    /// that `dependsOn` names.
    public static func read(_ bytes: [UInt8]) throws(PayloadError) -> JSONBatchRequest {
        let root = try JSONValue.parse(bytes)
        guard let rootMembers = root.objectMembers else {
            throw PayloadError(.wrongType, "A JSON batch is an object with a 'requests' array", offset: 0)
        }
        for member in rootMembers where member.name != "requests" && !member.name.hasPrefix("@") {
            throw PayloadError(.unexpectedValue, "A JSON batch has no member '\(member.name)'", offset: 0)
        }
        guard rootMembers.filter({ $0.name == "requests" }).count <= 1 else {
            throw PayloadError(.unexpectedValue, "'requests' is given twice", offset: 0)
        }
        guard let items = root["requests"]?.arrayValue else {
            throw PayloadError(.unexpectedValue, "A JSON batch needs a 'requests' array", offset: 0)
        }
        var requests: [Request] = []
        var seen: Set<String> = []
        var groups: Set<String> = []
        /// The group of each request id that has one.
        var groupOf: [String: String] = [:]
        for (index, item) in items.enumerated() {
            let path = "requests[\(index)]"
            func fail(_ message: String, _ member: String? = nil) -> PayloadError {
                PayloadError(.unexpectedValue, message, offset: 0, path: path + (member.map { "." + $0 } ?? ""))
            }
            func string(_ name: String) throws(PayloadError) -> String? {
                guard let value = item[name] else { return nil }
                guard let text = value.stringValue else {
                    throw PayloadError(.wrongType, "'\(name)' must be a string", offset: 0, path: path + "." + name)
                }
                return text
            }
            guard let members = item.objectMembers else { throw fail("A request must be an object") }
            var names: Set<String> = []
            for member in members {
                guard Self.requestMembers.contains(member.name) || member.name.hasPrefix("@") else {
                    throw fail("A request has no member '\(member.name)'", member.name)
                }
                guard names.insert(member.name).inserted else { throw fail("'\(member.name)' is given twice", member.name) }
            }
            guard let id = try string("id"), !id.isEmpty else {
                throw PayloadError(.missingValue, "A request needs an 'id'", offset: 0, path: path)
            }
            guard let method = try string("method") else {
                throw PayloadError(.missingValue, "A request needs a 'method'", offset: 0, path: path)
            }
            guard let url = try string("url") else {
                throw PayloadError(.missingValue, "A request needs a 'url'", offset: 0, path: path)
            }
            guard Self.isRequestID(id) else {
                throw fail("Request id '\(id)' is not a request-id (letters, digits, '-', '.', '_', '~')", "id")
            }
            guard seen.insert(id).inserted else { throw fail("Request id \(id) is used twice") }
            let verb = method.uppercased()
            guard Self.methods.contains(verb) else {
                throw fail("\(method) is not a method of a batch request (GET, POST, PUT, PATCH or DELETE)", "method")
            }
            if let body = item["body"], body != .null, verb == "GET" || verb == "DELETE" {
                throw fail("A \(verb) request has no body", "body")
            }
            let target = url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? url
            if target == "$batch" || target.hasSuffix("/$batch") {
                throw fail("A batch cannot contain another $batch", "url")
            }
            var request = Request(id: id, method: verb, url: url)
            if let headers = item["headers"] {
                guard let headerMembers = headers.objectMembers else {
                    throw PayloadError(.wrongType, "'headers' must be an object", offset: 0, path: path + ".headers")
                }
                for member in headerMembers {
                    guard let value = member.value.stringValue else {
                        throw PayloadError(.wrongType, "Header \(member.name) must be a string", offset: 0, path: path + ".headers")
                    }
                    let name = member.name.lowercased()
                    guard request.headers[name] == nil else {
                        throw PayloadError(
                            .unexpectedValue, "Header \(member.name) is given twice", offset: 0,
                            path: path + ".headers")
                    }
                    request.headers[name] = value
                }
            }
            request.body = item["body"]
            request.atomicityGroup = try string("atomicityGroup")
            request.condition = item["if"]
            if let group = request.atomicityGroup {
                guard Self.isRequestID(group) else {
                    throw fail(
                        "Atomicity group '\(group)' is not a request-id (letters, digits, '-', '.', '_', '~')",
                        "atomicityGroup")
                }
                if groups.contains(group) && requests.last?.atomicityGroup != group {
                    throw fail("The requests of atomicity group \(group) must be adjacent", "atomicityGroup")
                }
                groups.insert(group)
                groupOf[id] = group
            }
            if let dependsOn = item["dependsOn"] {
                guard let dependencies = dependsOn.arrayValue else {
                    throw PayloadError(.wrongType, "'dependsOn' must be an array", offset: 0, path: path + ".dependsOn")
                }
                for dependency in dependencies {
                    guard let name = dependency.stringValue else {
                        throw PayloadError(.wrongType, "'dependsOn' holds strings", offset: 0, path: path + ".dependsOn")
                    }
                    guard name != id, seen.contains(name) || groups.contains(name) else {
                        throw fail("dependsOn must name an earlier request or atomicity group; \(name) is none", "dependsOn")
                    }
                    if let own = request.atomicityGroup, name == own {
                        throw fail("A request cannot depend on its own atomicity group \(own)", "dependsOn")
                    }
                    if let other = groupOf[name], other != request.atomicityGroup {
                        throw fail("\(name) is a member of atomicity group \(other): depend on the group", "dependsOn")
                    }
                    request.dependsOn.append(name)
                }
            }
            if let referenced = Self.referencedRequest(url) {
                // `$1/Items` uses request 1's entity: only one that ran before, named in dependsOn
                // (or its atomicity group, when that is another group).
                guard seen.contains(referenced), referenced != id else {
                    throw fail("The URL \(url) refers to request \(referenced), which is no earlier request", "url")
                }
                let group = groupOf[referenced]
                let named =
                    request.dependsOn.contains(referenced)
                    || (group != nil && group != request.atomicityGroup && request.dependsOn.contains(group ?? ""))
                guard named else {
                    throw fail(
                        "The URL \(url) refers to request \(referenced), which dependsOn must name"
                            + (group.map { $0 == request.atomicityGroup ? "" : " (as its atomicity group \($0))" } ?? ""),
                        "dependsOn")
                }
            }
            requests.append(request)
        }
        if let clash = groups.first(where: { seen.contains($0) }) {
            throw PayloadError(.unexpectedValue, "\(clash) is both a request id and an atomicity group", offset: 0, path: "requests")
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
            if let condition = request.condition { object.append(.init("if", condition)) }
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
