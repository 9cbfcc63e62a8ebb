import Foundation
import ODataCore
import Testing
@testable import ODataServer

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Issue 19: a table of malformed requests sent to the running reference server as raw bytes
/// over a loopback socket (no client library to tidy them up). Each must get a 4xx with an
/// OData error body, and the server must answer a normal request after each — never a 5xx, a
/// crash, a hang or a dropped connection.
@Suite(.serialized) struct MalformedRequestTests {
    /// One raw HTTP/1.1 exchange: the request as written, the status and body as answered.
    struct Exchange {
        var status: Int
        var headers: [String: String]
        var body: [UInt8]
    }

    /// Sends `request` (complete bytes) and reads the answer until the server closes.
    static func exchange(port: Int, _ request: [UInt8], timeout: Int = 20) throws -> Exchange {
        let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socketFD >= 0 else { throw ExchangeError("socket() failed") }
        defer { close(socketFD) }
        var time = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(socketFD, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socketFD, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw ExchangeError("connect() failed") }
        var sent = 0
        while sent < request.count {
            let n = request[sent...].withUnsafeBytes { send(socketFD, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            // The server may answer (and close) before reading a long body: that is fine.
            guard n > 0 else { break }
            sent += n
        }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(socketFD, &buffer, buffer.count, 0)
            if n <= 0 { break }
            answer += buffer[0..<n]
        }
        guard let headerEnd = answer.firstRange(of: Array("\r\n\r\n".utf8)) else {
            throw ExchangeError("no HTTP answer (\(answer.count) bytes)")
        }
        let head = String(decoding: answer[..<headerEnd.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = head.first?.split(separator: " ") ?? []
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw ExchangeError("bad status line \(head.first ?? "")") }
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Array(answer[headerEnd.upperBound...])
        if headers["transfer-encoding"]?.lowercased() == "chunked" { body = Self.dechunk(body) }
        return Exchange(status: status, headers: headers, body: body)
    }

    /// `exchange` on a thread of its own: the socket calls block, and the server's handlers need
    /// the concurrency pool's threads (two on a 2-core machine) to answer.
    static func exchangeOffPool(port: Int, _ request: [UInt8]) async throws -> Exchange {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                do {
                    continuation.resume(returning: try exchange(port: port, request))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    static func dechunk(_ bytes: [UInt8]) -> [UInt8] {
        var result: [UInt8] = []
        var index = 0
        while let lineEnd = bytes[index...].firstRange(of: Array("\r\n".utf8)) {
            let size = Int(String(decoding: bytes[index..<lineEnd.lowerBound], as: UTF8.self), radix: 16) ?? 0
            if size == 0 { break }
            let start = lineEnd.upperBound
            guard start + size <= bytes.count else { break }
            result += bytes[start..<(start + size)]
            index = start + size + 2
            guard index <= bytes.count else { break }
        }
        return result
    }

    struct ExchangeError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// One case of the table.
    struct Case: Sendable, CustomStringConvertible {
        var name: String
        var method: String
        var target: String
        var headers: [(String, String)]
        var body: [UInt8]
        var description: String { name }

        init(_ name: String, _ method: String = "GET", _ target: String, headers: [(String, String)] = [],
             body: String? = nil, bytes: [UInt8]? = nil) {
            self.name = name
            self.method = method
            self.target = target
            var headers = headers
            if body != nil || bytes != nil, !headers.contains(where: { $0.0.lowercased() == "content-type" }) {
                headers.append(("Content-Type", "application/json"))
            }
            self.headers = headers
            self.body = bytes ?? Array((body ?? "").utf8)
        }

        func raw() -> [UInt8] {
            var text = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            for (name, value) in headers { text += "\(name): \(value)\r\n" }
            if !body.isEmpty || ["POST", "PUT", "PATCH", "MERGE"].contains(method) { text += "Content-Length: \(body.count)\r\n" }
            text += "\r\n"
            return Array(text.utf8) + body
        }
    }

    static let v4 = "/odata/v4/"
    static let v2 = "/odata/v2/"

    /// The table: at least 150 requests a careless or hostile client sends.
    static let cases: [Case] = {
        var cases: [Case] = []
        func get(_ name: String, _ path: String, root: String = v4, headers: [(String, String)] = []) {
            cases.append(Case(name, "GET", root + path, headers: headers))
        }
        // Bad URLs: paths.
        for (name, path) in [
            ("unknown entity set", "Nope"), ("unknown property", "Products('P1')/Nope"), ("key on a single entity", "Products('P1')('P2')"),
            ("segment after $count", "Products/$count/x"), ("$value of a collection", "Products/$value"),
            ("$ref of a property", "Products('P1')/Name/$ref"), ("unclosed key", "Products('P1'"), ("empty key", "Products()"),
            ("key with two values", "Products('P1','P2')"), ("unbalanced quote", "Products('P1)"), ("double slash", "Products//$count"),
            ("type cast to an unknown type", "Products/Sales.Nope"), ("cast to a complex type", "Products/Sales.Address"),
            ("function without import", "GetProductsByCategoryX()"), ("$metadata with a key", "$metadata('x')"),
            ("$batch GET", "$batch"), ("navigation on a collection", "Products/Category"), ("$count of an entity", "Products('P1')/$count"),
            ("only a key", "('P1')"), ("dollar segment", "$nope"), ("$each on an entity", "Products('P1')/$each"),
            ("$entity without id", "$entity"), ("$crossjoin of unknown sets", "$crossjoin(Nope,Products)"),
            ("control characters in a key", "Products('%00%01')/Nope"), ("a segment of dots", "Products/../$metadata/x"),
        ] { get("path: " + name, path) }
        // Keys and literals of the wrong shape or type.
        for (name, path) in [
            ("string key given a number", "Products(5)"), ("int key given a string", "Contacts('abc')"), ("int64 key overflow", "Contacts(99999999999999999999)"),
            ("half a compound key", "SalesOrderItems(OrderID='SO1')"), ("extra key part", "SalesOrderItems(OrderID='SO1',ItemPosition=10,X=1)"),
            ("repeated key part", "SalesOrderItems(OrderID='SO1',OrderID='SO2')"), ("unnamed compound key", "SalesOrderItems('SO1',10)"),
            ("key of the wrong type in a compound", "SalesOrderItems(OrderID='SO1',ItemPosition='ten')"),
            ("function missing its parameter", "GetProductsByCategory()"), ("function unknown parameter", "GetProductsByCategory(CategoryID='C1',X=1)"),
            ("function parameter of the wrong type", "GetProductsByCategory(CategoryID=5)"),
            ("function parameter given twice", "GetProductsByCategory(CategoryID='C1',CategoryID='C2')"),
        ] { get("key: " + name, path) }
        // Query options: expressions and literals.
        let filters = [
            "Price gt", "Price gt 'a", "Price gt 1 and", "(Price gt 1", "Price gt 1)", "Nope eq 1", "Price eq 'text'",
            "ReleaseDate eq 2023-02-29", "ReleaseDate eq 2021-04-31", "ReleaseDate eq 2021-13-01", "ReleaseDate eq 2021-00-10",
            "Price eq 1e99999", "Price eq 1.2.3", "contains(Name)", "contains(Name,'a','b')", "nope(Name)", "Name eq eq null",
            "Category/Nope eq 1", "Pictures/any(p:p/Nope eq 1)", "Pictures/any(p:", "Pictures/all()", "startswith(Price,'1')",
            "Price add", "not", "not not", "Name in ('a',)", "Name in ('a'", "Name has Sales.OrderStatus'Nope'",
            "Price eq @", "$it/Nope eq 1", "Price eq 12345678901234567890123456789012345678901234567890123456789m",
            "Price eq duration'P1X'", "Price eq binary'@@'", "Price eq geography'POINT(1'", "Price eq 0x1G", "isof(Name,Nope.Type)",
            "cast(Name,Edm.Nope)", "Name eq 'a' or", "length(Name) eq", String(repeating: "(", count: 300) + "true" + String(repeating: ")", count: 300),
            String(repeating: "not ", count: 5000) + "true", (0..<2000).map { "Price eq \($0)" }.joined(separator: " and ") + " and Price eq",
            String(repeating: "-", count: 5000) + "Price gt 1",
        ]
        for (index, filter) in filters.enumerated() {
            let encoded = filter.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? filter
            get("filter \(index): \(filter.prefix(40))", "Products?$filter=" + encoded)
        }
        for (name, query) in [
            ("$top negative", "$top=-1"), ("$top text", "$top=ten"), ("$top huge", "$top=99999999999999999999"), ("$skip text", "$skip=x"),
            ("$orderby unknown", "$orderby=Nope"), ("$orderby bad direction", "$orderby=Name%20sideways"), ("$orderby empty", "$orderby="),
            ("$select unknown", "$select=Nope"), ("$select trailing comma", "$select=Name,"), ("$expand unknown", "$expand=Nope"),
            ("$expand property", "$expand=Name"), ("$expand unclosed", "$expand=Category($select=Name"),
            ("$expand nested 300", "$expand=" + String(repeating: "Category($expand=Products(", count: 150) + String(repeating: "))", count: 150)),
            ("$count text", "$count=maybe"), ("duplicate $top", "$top=1&$top=2"), ("unknown system option", "$nope=1"),
            ("$format unknown", "$format=xml"), ("$skiptoken garbage", "$skiptoken=%FF%FE"), ("$search unclosed", "$search=%22abc"),
            ("$levels on a non-recursive path", "$expand=Category($levels=-1)"), ("$orderby 10000 terms", "$orderby=" + Array(repeating: "Name", count: 10000).joined(separator: ",")),
            ("alias cycle", "$filter=Name%20eq%20@a&@a=@b&@b=@a"), ("$top with an alias of text", "$top=@t&@t='x'"),
            ("$id on a collection GET", "$id=Products('P1')"), ("$deltatoken garbage", "$deltatoken=garbage"),
        ] { get("option: " + name, "Products?" + query) }
        // Percent-encoding abuse and long URLs.
        for (name, path) in [
            ("truncated escape", "Products?$filter=Name%20eq%20%2"), ("non-hex escape", "Products?$filter=Name%ZZ"),
            ("invalid UTF-8", "Products?$filter=Name%20eq%20%27%FF%FE%27"),
            ("overlong UTF-8", "Products?$filter=Name%20eq%20%27%C0%AF%27"), ("encoded slash in a key", "Products('a%2Fb')/Nope"),
            ("double-encoded", "Products?$filter=Name%2520eq%2520%2527a%2527"), ("encoded ampersand option", "Products?$top=1%26$skip=x"),
            ("64 KB URL", "Products?$filter=Name%20eq%20%27" + String(repeating: "a", count: 65_000) + "%27%20and%20Nope"),
            ("64 KB key", "Products('" + String(repeating: "k", count: 65_000) + "')/Nope"),
            ("20,000 commas in $select", "Products?$select=" + String(repeating: ",", count: 20_000)),
        ] { get("encoding: " + name, path) }
        // V2 grammar.
        for (name, path) in [
            ("V4 literal in V2", "Products?$filter=ReleaseDate%20eq%202023-01-01"), ("V2 bad datetime", "SalesOrders?$filter=OrderDate%20eq%20datetime'2023-02-29T00:00:00'"),
            ("V2 bad guid", "Products?$filter=Name%20eq%20guid'x'"), ("V2 $inlinecount bad", "Products?$inlinecount=maybe"),
            ("V2 $links of a property", "Products('P1')/$links/Name"), ("V2 bad key", "Contacts('x')"), ("V2 substringof arity", "Products?$filter=substringof('a')"),
            ("V2 unknown", "Nope"), ("V2 $expand unknown", "Products?$expand=Nope/Products"),
        ] { get("v2: " + name, path, root: v2) }
        // Headers.
        for (name, headers) in [
            ("OData-Version 5", [("OData-Version", "5.0")]), ("OData-MaxVersion 1", [("OData-MaxVersion", "1.0")]),
            ("Accept xml only", [("Accept", "application/xml")]), ("Accept garbage", [("Accept", ";;;,,,")]),
            ("Prefer garbage", [("Prefer", "odata.maxpagesize=-5")]), ("Prefer huge page", [("Prefer", "odata.maxpagesize=99999999999999999999")]),
        ] { get("header: " + name, "Products('nope')", headers: headers) }
        // JSON bodies.
        let bodies: [(String, String)] = [
            ("empty object for a key-required set", "{}"), ("not JSON", "Products"), ("truncated", #"{"ProductID":"X1","Name":"#),
            ("array", "[1,2]"), ("number", "42"), ("null", "null"), ("string", #""x""#), ("trailing garbage", #"{"ProductID":"X2"} x"#),
            ("duplicate name", #"{"ProductID":"X3","ProductID":"X4"}"#), ("unknown property", #"{"ProductID":"X5","Nmae":"x"}"#),
            ("wrong type", #"{"ProductID":"X6","Price":"cheap"}"#), ("bad date", #"{"ProductID":"X7","ReleaseDate":"2020-02-30"}"#),
            ("decimal too precise", #"{"ProductID":"X8","Price":1.234}"#), ("decimal too long", #"{"ProductID":"X9","Price":"# + String(repeating: "9", count: 100_000) + "}"),
            ("bad @odata.type", ##"{"@odata.type":"#Sales.Contact","ProductID":"X10"}"##),
            ("unknown @odata.type", ##"{"@odata.type":"#Nope.T","ProductID":"X11"}"##),
            ("bind to a missing entity", #"{"ProductID":"X12","Category@odata.bind":"ProductCategories('NOPE')"}"#),
            ("bind to garbage", #"{"ProductID":"X13","Category@odata.bind":"::::"}"#), ("bind of unknown navigation", #"{"ProductID":"X14","Nope@odata.bind":"Products('P1')"}"#),
            ("nested 10,000 arrays", #"{"ProductID":"X15","Name":"# + String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000) + "}"),
            ("nested 10,000 objects", #"{"ProductID":"X16","Name":"# + String(repeating: #"{"a":"#, count: 10_000) + "1" + String(repeating: "}", count: 10_001)),
            ("invalid UTF-8", ""), ("lone surrogate escape", #"{"ProductID":"X17","Name":"\uD800"}"#), ("control character", "{\"ProductID\":\"X18\",\"Name\":\"a\u{01}b\"}"),
            ("huge number", #"{"ProductID":"X19","WeightKg":1e999999}"#), ("nested navigation with bad data", #"{"ProductID":"X20","Pictures":[{"PictureID":"PX","Nope":1}]}"#),
        ]
        for (name, body) in bodies {
            if name == "invalid UTF-8" {
                cases.append(Case("body: " + name, "POST", v4 + "Products", bytes: Array(#"{"ProductID":"X21","Name":""#.utf8) + [0xFF, 0xFE] + Array(#""}"#.utf8)))
            } else {
                cases.append(Case("body: " + name, "POST", v4 + "Products", body: body))
            }
        }
        cases.append(Case("body: V2 unknown property", "POST", v2 + "Products", body: #"{"ProductID":"X22","Nmae":"x"}"#))
        cases.append(Case("body: V2 bad date", "POST", v2 + "SalesOrders", body: #"{"OrderID":"X23","OrderDate":"/Date(abc)/"}"#))
        // Methods, content types and preconditions.
        cases += [
            Case("method: PATCH a collection", "PATCH", v4 + "Products", body: "{}"), Case("method: DELETE a collection", "DELETE", v4 + "Products"),
            Case("method: POST to an entity", "POST", v4 + "Products('P1')", body: "{}"), Case("method: DELETE $metadata", "DELETE", v4 + "$metadata"),
            Case("method: PUT without If-Match", "PUT", v4 + "Products('P1')", body: #"{"ProductID":"P1"}"#),
            Case("method: PATCH without If-Match", "PATCH", v4 + "Products('P1')", body: #"{"Name":"x"}"#),
            Case("method: DELETE without If-Match", "DELETE", v4 + "Products('P1')"),
            Case("method: V2 MERGE without If-Match", "MERGE", v2 + "Products('P1')", body: #"{"Name":"x"}"#),
            Case("method: PATCH with a stale ETag", "PATCH", v4 + "Products('P1')", headers: [("If-Match", "W/\"stale\"")], body: #"{"Name":"x"}"#),
            Case("method: PATCH of a missing entity", "PATCH", v4 + "Products('NOPE')", headers: [("If-Match", "*")], body: #"{"Name":"x"}"#),
            Case("method: PATCH changing the key", "PATCH", v4 + "Products('P1')", headers: [("If-Match", "*")], body: #"{"ProductID":"P9"}"#),
            Case("content type: xml", "POST", v4 + "Products", headers: [("Content-Type", "application/xml")], body: "<a/>"),
            Case("content type: garbage", "POST", v4 + "Products", headers: [("Content-Type", ";;;")], body: "{}"),
            Case("content type: text", "POST", v4 + "Products", headers: [("Content-Type", "text/plain")], body: "hello"),
            Case("$ref: garbage id", "POST", v4 + "Products('P1')/Pictures/$ref", body: #"{"@odata.id":"::"}"#),
            Case("$ref: wrong set", "PUT", v4 + "Products('P1')/Category/$ref", body: #"{"@odata.id":"Products('P2')"}"#),
            Case("$ref: delete a missing link", "DELETE", v4 + "BusinessPartners('BP1')/SalesOrders/$ref?$id=SalesOrders('SO0')"),
            Case("action: unknown", "POST", v4 + "NopeAction", body: "{}"), Case("action: bad parameter", "POST", v4 + "ConfirmOrder", body: #"{"OrderID":5}"#),
            Case("action: missing order", "POST", v4 + "ConfirmOrder", body: #"{"OrderID":"NOPE"}"#),
            Case("media: PUT to a non-media entity", "PUT", v4 + "Products('P1')/$value", headers: [("Content-Type", "image/png"), ("If-Match", "*")], body: "x"),
        ]
        // Batches.
        func batch(_ name: String, _ body: String, boundary: String? = "b") {
            let type = boundary.map { "multipart/mixed;boundary=\($0)" } ?? "multipart/mixed"
            cases.append(Case("batch: " + name, "POST", v4 + "$batch", headers: [("Content-Type", type)], body: body.replacingOccurrences(of: "\n", with: "\r\n")))
        }
        batch("no boundary parameter", "--b\nContent-Type: application/http\n\nGET Products HTTP/1.1\n\n--b--\n", boundary: nil)
        batch("no closing delimiter", "--b\nContent-Type: application/http\n\nGET Products HTTP/1.1\n\n")
        batch("empty", "")
        batch("garbage", "hello world")
        batch("part without content type", "--b\n\nGET Products HTTP/1.1\n\n--b--\n")
        batch("bad request line", "--b\nContent-Type: application/http\n\nFETCH\n\n--b--\n")
        batch("nested changeset without boundary", "--b\nContent-Type: multipart/mixed\n\n--c\n--c--\n--b--\n")
        batch("changeset with a GET", "--b\nContent-Type: multipart/mixed;boundary=c\n\n--c\nContent-Type: application/http\n\nGET Products HTTP/1.1\n\n--c--\n--b--\n")
        batch("unknown Content-ID reference", "--b\nContent-Type: multipart/mixed;boundary=c\n\n--c\nContent-Type: application/http\nContent-ID: 1\n\nPATCH $9 HTTP/1.1\nContent-Type: application/json\nIf-Match: *\n\n{}\n--c--\n--b--\n")
        batch("duplicate Content-ID", "--b\nContent-Type: multipart/mixed;boundary=c\n\n--c\nContent-Type: application/http\nContent-ID: 1\n\nPOST ProductCategories HTTP/1.1\nContent-Type: application/json\n\n{\"CategoryID\":\"B1\"}\n--c\nContent-Type: application/http\nContent-ID: 1\n\nPOST ProductCategories HTTP/1.1\nContent-Type: application/json\n\n{\"CategoryID\":\"B2\"}\n--c--\n--b--\n")
        batch("boundary too long", "--" + String(repeating: "b", count: 100) + "\n--b--\n", boundary: String(repeating: "b", count: 100))
        batch("nested batch", "--b\nContent-Type: application/http\n\nPOST $batch HTTP/1.1\nContent-Type: multipart/mixed;boundary=x\n\n--x--\n\n--b--\n")
        cases.append(Case("batch: JSON not an object", "POST", v4 + "$batch", body: "[]"))
        cases.append(Case("batch: JSON without requests", "POST", v4 + "$batch", body: #"{"responses":[]}"#))
        cases.append(Case("batch: JSON request without url", "POST", v4 + "$batch", body: #"{"requests":[{"id":"1","method":"GET"}]}"#))
        cases.append(Case("batch: JSON unknown dependsOn", "POST", v4 + "$batch", body: #"{"requests":[{"id":"1","method":"GET","url":"Products","dependsOn":["9"]}]}"#))
        cases.append(Case("batch: JSON duplicate ids", "POST", v4 + "$batch", body: #"{"requests":[{"id":"1","method":"GET","url":"Products"},{"id":"1","method":"GET","url":"Products"}]}"#))
        cases.append(Case("batch: JSON deep", "POST", v4 + "$batch", body: String(repeating: "[", count: 100_000)))
        // Issue 34, item 19: what the HTTP parser refuses still gets an OData error body.
        let long = String(repeating: "x", count: 300 * 1024)
        cases.append(Case("URL: over the service's limit (414)", "GET", v4 + "Products?$filter=Name%20eq%20%27\(long)%27"))
        cases.append(Case("URL: over the parser's limit (431)", "GET", v4 + "Products?$filter=Name%20eq%20%27\(long + long)%27"))
        cases.append(Case("URL: an unencoded space", "GET", v4 + "Products?$filter=Name eq 'x'"))
        cases.append(Case("header: over the parser's limit (431)", "GET", v4 + "Products",
                          headers: [("X-Long", long + long)]))
        cases.append(Case("header: name with a space", "GET", v4 + "Products", headers: [("Bad Name", "1")]))
        cases.append(Case("request line: no version", "GET", v4 + "Products HTTP/9.x"))
        return cases
    }()

    /// Whether `body` is an OData error: `{"error":{"code":…,"message":…}}` (V4) or with V2's
    /// `{"message":{"lang":…,"value":…}}`.
    static func isODataError(_ body: [UInt8]) -> Bool {
        guard let error = try? ODataError.parse(body) else { return false }
        return !error.code.isEmpty && !error.message.isEmpty
    }

    /// A 4xx with an OData error body; for a `$batch` also a 200 whose failed part is that.
    static func refusal(_ answer: Exchange) -> Bool {
        if (400..<500).contains(answer.status) { return isODataError(answer.body) }
        guard answer.status == 200, let type = answer.headers["content-type"], type.lowercased().hasPrefix("multipart/mixed"),
              let batch = try? MultipartBatch.read(answer.body, boundary: HTTPHeaders.parameter("boundary", in: type)) else {
            return false
        }
        let messages = batch.parts.flatMap { part -> [BatchMessage] in
            switch part {
            case .operation(let operation): [operation.message]
            case .changeSet(let set): set.operations.map(\.message)
            }
        }
        return messages.contains { (400..<500).contains($0.status ?? 0) && isODataError($0.body) }
    }

    @Test func everyMalformedRequestGetsA4xxWithAnODataError() async throws {
        #expect(Self.cases.count >= 150, "\(Self.cases.count) cases")
        print("malformed-request table: \(Self.cases.count) requests")
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        let running = try await EmbeddedServer.start(service)
        var failures: [String] = []
        for item in Self.cases {
            do {
                let answer = try await Self.exchangeOffPool(port: running.port, item.raw())
                if !Self.refusal(answer) {
                    failures.append("\(item.name): status \(answer.status) \(String(decoding: answer.body.prefix(300), as: UTF8.self))")
                }
            } catch {
                failures.append("\(item.name): \(error)")
            }
            // The server answers a normal request after each.
            let normal = try? await Self.exchangeOffPool(port: running.port, Case("normal", "GET", Self.v4 + "Products('P1')?$select=Name").raw())
            if normal?.status != 200 { failures.append("after \(item.name): a normal request got \(normal?.status ?? 0)") }
        }
        await running.stop()
        #expect(failures.isEmpty, "\(failures.count) of \(Self.cases.count):\n\(failures.joined(separator: "\n"))")
    }
}

/// Issue 34, item 19: a long URL the service can answer is answered; one over the limit gets a
/// 414 that says what to do, and one the HTTP parser refuses a 431, each with an OData error.
@Suite struct LongURLTests {
    @Test func aSeventyThousandCharacterURLIsAnsweredAndLongerOnesAreRefusedWithAnODataError() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        let running = try await EmbeddedServer.start(service)
        defer { Task { await running.stop() } }
        for root in [MalformedRequestTests.v4, MalformedRequestTests.v2] {
            let keys = (0..<7000).map { "%27P\($0)%27" }.joined(separator: ",")
            let filter = root == MalformedRequestTests.v4 ? "ProductID%20in%20(\(keys))"
                : "Name%20ne%20%27" + String(repeating: "z", count: 70_000) + "%27"
            let target = root + "Products?$select=ProductID&$top=3&$orderby=ProductID&$filter=" + filter
            #expect(target.utf8.count > 70_000)
            let answer = try await MalformedRequestTests.exchangeOffPool(
                port: running.port, MalformedRequestTests.Case("long", "GET", target, headers: [("Accept", "application/json")]).raw())
            #expect(answer.status == 200, "\(String(decoding: answer.body.prefix(300), as: UTF8.self))")
            let json = try JSONValue.parse(answer.body)
            let rows = json["value"]?.arrayValue ?? json["d"]?["results"]?.arrayValue ?? []
            #expect(rows.compactMap { $0["ProductID"]?.stringValue } == ["P0", "P1", "P10"])
        }
        let tooLong = MalformedRequestTests.v2 + "Products?$filter=Name%20eq%20%27" + String(repeating: "y", count: 270_000) + "%27"
        let refused = try await MalformedRequestTests.exchangeOffPool(
            port: running.port, MalformedRequestTests.Case("too long", "GET", tooLong).raw())
        #expect(refused.status == 414, "\(String(decoding: refused.body.prefix(300), as: UTF8.self))")
        let error = try ODataError.parse(refused.body)
        #expect(error.code == "URLTooLong" && error.message.contains("$batch") && error.message.contains("262144"))
        let overParser = MalformedRequestTests.v4 + "Products?$filter=Name%20eq%20%27" + String(repeating: "y", count: 400_000) + "%27"
        let parserAnswer = try await MalformedRequestTests.exchangeOffPool(
            port: running.port, MalformedRequestTests.Case("over the parser", "GET", overParser).raw())
        #expect(parserAnswer.status == 431, "\(String(decoding: parserAnswer.body.prefix(300), as: UTF8.self))")
        #expect(try ODataError.parse(parserAnswer.body).code == "RequestHeaderFieldsTooLarge")
        #expect(parserAnswer.headers["connection"] == "close")
        // Too many header fields, each short: the answer names the field limit, not only bytes
        // (issue 55, item 8).
        let fields = (0...ParserErrorAnswer.headerFieldLimit).map { ("X-F\($0)", "1") }
        let many = MalformedRequestTests.Case(
            "many headers", "GET", MalformedRequestTests.v4 + "Products", headers: fields
        ).raw()
        let countAnswer = try await MalformedRequestTests.exchangeOffPool(port: running.port, many)
        #expect(countAnswer.status == 431)
        let countError = try ODataError.parse(countAnswer.body)
        let named = countError.message.contains("\(ParserErrorAnswer.headerFieldLimit) header fields")
        #expect(named, "\(countError.message)")
    }
}

/// Issue 19, defect 9: an option the service does not implement is refused with 501 naming it,
/// never answered as if applied; `$expand` with `/$ref`, `/$count` and `*` is implemented.
@Suite struct UnimplementedOptionTests {
    @Test func unimplementedOptionsAre501AndExpandFormsWork() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            for (query, named) in [
                ("Products?$apply=groupby((CategoryID))", "$apply"), ("Products?$compute=Price%20mul%202%20as%20Double", "$compute"),
                ("Products?$expand=Pictures($compute=Caption%20as%20C)", "$compute"), ("Products?$expand=*/$ref", "$expand=*/$ref"),
            ] {
                let answer = try await client.send("GET", "/odata/v4/" + query)
                #expect(answer.status == 501, "\(query): \(answer.status)")
                #expect(answer.json?["error"]?["message"]?.stringValue?.contains(named) == true, "\(query): \(answer.text)")
            }
            // Nav/$count: the number only (after the nested $filter), no entities.
            let counted = try await client.send("GET", "/odata/v4/SalesOrders('SO1')?$expand=Items/$count($filter=Quantity%20ge%200)")
            #expect(counted.status == 200, "\(counted.text)")
            let items = try await client.send("GET", "/odata/v4/SalesOrderItems/$count?$filter=OrderID%20eq%20'SO1'")
            #expect(counted.json?["Items@odata.count"] == .number(items.text.trimmingCharacters(in: .whitespacesAndNewlines)),
                    "\(counted.text) \(items.text)")
            #expect(counted.json?["Items"] == nil)
            // Nav/$ref: entity references, to-many and to-one.
            let refs = try await client.send("GET", "/odata/v4/SalesOrders('SO1')?$expand=Items/$ref,Partner/$ref")
            let itemRefs = refs.json?["Items"]?.arrayValue ?? []
            #expect(!itemRefs.isEmpty && itemRefs.allSatisfy { $0["@odata.id"]?.stringValue?.hasPrefix("SalesOrderItems(OrderID='SO1',") == true
                && $0["Quantity"] == nil }, "\(refs.text)")
            #expect(refs.json?["Partner"]?["@odata.id"]?.stringValue == "BusinessPartners('BP0')", "\(refs.text)")
            // *: every navigation property.
            let star = try await client.send("GET", "/odata/v4/SalesOrders('SO1')?$expand=*")
            #expect(star.status == 200, "\(star.text)")
            #expect(star.json?["Items"]?.arrayValue?.isEmpty == false && star.json?["Partner"]?["PartnerID"] != nil, "\(star.text)")
        }
    }
}
