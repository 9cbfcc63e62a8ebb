import ODataCore
import Testing

@testable import ODataGateway

/// The one path check of everything that leaves the gateway (issue 52, door 5), case by case:
/// what is refused and what goes on, relative to which root.
@Suite struct LeavingPathTests {
    static let gateway = "http://gw.test:8090/sales/"
    static let backend = "http://backend.test/odata/v4/"

    static func relative(_ url: String) -> String? {
        try? LeavingPath.relative(url, gatewayRoot: gateway, backendRoot: backend)
    }

    @Test(arguments: [
        "../x", "%2e%2e/x", "%2E%2e/x", ".%2E/x", "%252e%252e/x", "%25252e%25252e/x", "..;/x", "..;jsessionid=1/x",
        "Set/../../x", "./Set", "Set/.", "Set/..", "Set%2F..%2Fx", "Set%2fx", "Set%5C..%5Cx", "Set\\..\\x", "//x",
        "Set//x", "/x", "/odata/v2/Set", "/sales/../other/Set", "http://other.test/sales/Set",
        "https://gw.test:8090/sales/Set", "http://gw.test:8090/other/Set", "file:///etc/passwd", "Set(1)#frag",
        "Set%00", "Set%0d%0aHost:%20x", "Set%zz", "Set('a%2F..%2F..%2Fx')", "Set('%2e%2e')/..",
        "x%ff/%2e%2e/%2e%2e/y", "x%25ff/%252e%252e/y", "%c0%ae%c0%ae/x", "Set('%ff')/..%2f..",
    ])
    func refused(_ url: String) {
        #expect(Self.relative(url) == nil, "\(url) -> \(Self.relative(url) ?? "?")")
    }

    @Test func keptInsideTheRoot() {
        #expect(Self.relative("Products('P1')") == "Products('P1')")
        #expect(Self.relative("Products('a%2Fb')") == "Products('a%2Fb')")
        #expect(Self.relative("Products('x.y')/Category") == "Products('x.y')/Category")
        #expect(Self.relative("$1/Items") == "$1/Items")
        #expect(Self.relative("SalesOrders?$filter=Note%20eq%20'../x'") == "SalesOrders?$filter=Note%20eq%20'../x'")
        #expect(Self.relative("http://gw.test:8090/sales/Products(1)") == "Products(1)")
        #expect(Self.relative("http://backend.test/odata/v4/Products(1)") == "Products(1)")
        #expect(Self.relative("/sales/Products(1)") == "Products(1)")
        #expect(Self.relative("/odata/v4/Products(1)") == "Products(1)")
        #expect(Self.relative("") == "")
        #expect(Self.relative("Products/") == "Products/")
        #expect(Self.relative("Products('100%25')") == "Products('100%25')")
        #expect(Self.relative("Products('%C3%A9t%C3%A9')") == "Products('%C3%A9t%C3%A9')")
    }

    /// `$batch` only as itself and with POST: another spelling could reach a backend that
    /// decodes it with parts the gateway never read.
    @Test(arguments: ["%24batch", "%24BATCH", "$BATCH", "$Batch"])
    func batchSpeltOtherwiseIsRefused(_ target: String) {
        let request = GatewayRequest(
            method: "POST", target: target, headers: HTTPHeaders([("Content-Type", "multipart/mixed; boundary=b")]),
            body: Array("--b--\r\n".utf8), gatewayRoot: Self.gateway)
        #expect(throws: GatewayError.self) { try LeavingPath.checkRequest(request, backendRoot: Self.backend) }
    }

    /// Two `Content-Type`s: the gateway would read one boundary, a backend perhaps the other.
    @Test func aBatchWithTwoContentTypesIsRefused() {
        let request = GatewayRequest(
            method: "POST", target: "$batch",
            headers: HTTPHeaders([
                ("Content-Type", "multipart/mixed; boundary=a"), ("Content-Type", "multipart/mixed; boundary=b"),
            ]),
            body: Array("--a--\r\n".utf8), gatewayRoot: Self.gateway)
        #expect(throws: GatewayError.self) { try LeavingPath.checkRequest(request, backendRoot: Self.backend) }
    }

    /// A `$batch` goes on as written again from what was checked: every part's URL relative to
    /// the backend's root, in multipart and JSON alike.
    @Test func aBatchGoesOnWithItsCheckedPaths() throws {
        let multipart = [
            "--b", "Content-Type: application/http", "Content-Transfer-Encoding: binary", "",
            "GET /sales/Products(1) HTTP/1.1", "", "", "--b", "Content-Type: application/http",
            "Content-Transfer-Encoding: binary", "", "GET http://gw.test:8090/sales/Products(2) HTTP/1.1", "", "",
            "--b--", "",
        ].joined(separator: "\r\n")
        let request = GatewayRequest(
            method: "POST", target: "$batch", headers: HTTPHeaders([("Content-Type", "multipart/mixed; boundary=b")]),
            body: Array(multipart.utf8), gatewayRoot: Self.gateway)
        let (body, contentType) = try LeavingPath.checkBatch(request, backendRoot: Self.backend)
        let again = try MultipartBatch.read(body, boundary: HTTPHeaders.parameter("boundary", in: contentType))
        let urls = again.parts.compactMap { part -> String? in
            if case .operation(let operation) = part { operation.message.url } else { nil }
        }
        #expect(urls == ["Products(1)", "Products(2)"])
        let json = GatewayRequest(
            method: "POST", target: "$batch", headers: HTTPHeaders([("Content-Type", "application/json")]),
            body: Array(#"{"requests":[{"id":"1","method":"GET","url":"/sales/Products(1)"}]}"#.utf8),
            gatewayRoot: Self.gateway)
        let (jsonBody, _) = try LeavingPath.checkBatch(json, backendRoot: Self.backend)
        #expect(try JSONBatchRequest.read(jsonBody).requests.map(\.url) == ["Products(1)"])
    }
}
