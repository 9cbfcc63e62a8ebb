import Foundation
import Testing
@testable import ODataCore

@Suite struct BatchTests {
    static var files: [String] {
        let root = Conformance.url("payloads/batch")
        let enumerator = FileManager.default.enumerator(atPath: root.path)
        var names: [String] = []
        while let next = enumerator?.nextObject() as? String {
            if next.hasSuffix(".batch") { names.append(next) }
        }
        return names.sorted()
    }

    /// Batch files that are not valid multipart batches, with the reason.
    static let invalidByDesign: [String: String] = [
        "olingo4-batchWithContent.batch": "not a multipart body: one line of base64 (a JPEG) that Olingo's test puts inside a batch part; it has no boundary",
    ]

    /// Compares two batches ignoring Content-Length, which the writer always recomputes.
    static func normalized(_ batch: MultipartBatch) -> MultipartBatch {
        func strip(_ operation: BatchOperation) -> BatchOperation {
            var copy = operation
            copy.message.headers["Content-Length"] = nil
            copy.partHeaders["Content-Length"] = nil
            return copy
        }
        var copy = batch
        copy.preamble = []
        copy.epilogue = []
        copy.parts = batch.parts.map { part in
            switch part {
            case .operation(let operation): return .operation(strip(operation))
            case .changeSet(var set):
                set.partHeaders["Content-Length"] = nil
                set.partHeaders["Content-Type"] = nil
                set.operations = set.operations.map(strip)
                return .changeSet(set)
            }
        }
        return copy
    }

    @Test func everyBatchFileRoundTrips() throws {
        let files = Self.files
        #expect(files.count >= 20)
        var failures: [String] = []
        for name in files {
            let bytes = Array(try Conformance.data("payloads/batch/" + name))
            do {
                let first = try MultipartBatch.read(bytes)
                #expect(!first.parts.isEmpty, "\(name)")
                let second = try MultipartBatch.read(first.write(), boundary: first.boundary)
                if Self.normalized(first) != Self.normalized(second) { failures.append("\(name): round trip differs") }
                if Self.invalidByDesign[name] != nil { failures.append("\(name): accepted but invalid by design") }
            } catch {
                if Self.invalidByDesign[name] == nil { failures.append("\(name): \(error)") }
            }
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
    }

    @Test func changeSetsContentIDsAndLineEnds() throws {
        let lf = """
        preamble text
        --b1
        content-type: application/http
        Content-Transfer-Encoding: binary

        GET Customers('A') HTTP/1.1
        Accept: application/json


        --b1
        Content-Type: multipart/mixed; boundary=cs1

        --cs1
        Content-Type: application/http
        CONTENT-ID: 1

        POST Customers HTTP/1.1
        Content-Type: application/json

        {"ID":"B"}
        --cs1
        Content-Type: application/http
        Content-ID: 2

        POST $1/Orders HTTP/1.1
        Content-Type: application/json

        {"Amount":5}
        --cs1--
        --b1--
        epilogue
        """
        for text in [lf, lf.replacingOccurrences(of: "\n", with: "\r\n")] {
            let batch = try MultipartBatch.read(Array(text.utf8))
            #expect(batch.boundary == "b1")
            #expect(batch.parts.count == 2)
            guard case .operation(let get) = batch.parts[0], case .changeSet(let set) = batch.parts[1] else {
                Issue.record("expected an operation and a change set")
                return
            }
            #expect(get.message.method == "GET")
            #expect(get.message.url == "Customers('A')")
            #expect(get.message.headers["accept"] == "application/json")
            #expect(get.partHeaders["Content-Type"] == "application/http")
            #expect(set.operations.map(\.contentID) == ["1", "2"])
            #expect(String(decoding: set.operations[0].message.body, as: UTF8.self) == #"{"ID":"B"}"#)
            #expect(ContentIDReferences.resolve(url: set.operations[1].message.url ?? "", ["1": "Customers('B')"]) == "Customers('B')/Orders")
            #expect(String(decoding: batch.epilogue, as: UTF8.self).contains("epilogue"))
        }
    }

    @Test func brokenBatchesNameThePlace() {
        let cases: [(String, String)] = [
            ("--b\r\nContent-Type: application/http\r\n\r\nGET x HTTP/1.1\r\n\r\n", "closing delimiter"),
            ("--b\r\nContent-Type: multipart/mixed\r\n\r\n--b--", "boundary"),
            ("--b\r\nContent-Type: application/http\r\n\r\nnot a request\r\n--b--", "request line"),
            ("--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--", "application/http"),
            ("no boundary here", "No boundary"),
        ]
        for (text, message) in cases {
            do {
                _ = try MultipartBatch.read(Array(text.utf8))
                Issue.record("should fail: \(text)")
            } catch {
                #expect(error.message.contains(message), "\(error)")
                #expect(error.code == .malformedBatch)
            }
        }
    }

    @Test func headerParametersAndNamesAreReadAsWritten() {
        let type = "multipart/mixed;  Boundary = \"batch_1; x\" ;charset=utf-8"
        #expect(HTTPHeaders.parameter("boundary", in: type) == "batch_1; x")
        #expect(HTTPHeaders.parameter("boundary", in: #"a; boundary="x\"y"; z=1"#) == #"x"y"#)
        #expect(HTTPHeaders.parameter("z", in: #"a; boundary="x\"y;"; z=1"#) == "1")
        #expect(HTTPHeaders.parameter("charset", in: type) == "utf-8")
        #expect(HTTPHeaders.parameter("boundary", in: "multipart/mixed; boundary=\"b\"") == "b")
        #expect(HTTPHeaders.parameter("boundary", in: "multipart/mixed; boundary=\"") == "\"")
        #expect(HTTPHeaders.parameter("boundary", in: "boundary=first-part-is-the-type") == nil)
        #expect(HTTPHeaders.parameter("boundary", in: "multipart/mixed; boundary") == nil)
        #expect(HTTPHeaders.parameter("boundary", in: "multipart/mixed; boundaryx=1") == nil)
        #expect(HTTPHeaders.parameter("boundary", in: "multipart/mixed; boundary=") == nil)
        #expect(HTTPHeaders.parameter("boundary", in: "multipart/mixed; boundary= ; boundary=x") == "x")
        let url = "http://h/é/odata/v4/Products(1)"
        #expect(url.firstByteRange(of: "/odata/v4/").map { String(url[$0.upperBound...]) } == "Products(1)")
        #expect(url.firstByteRange(of: "/odata/v2/") == nil && "ab".firstByteRange(of: "abc") == nil)
        #expect("aab".firstByteRange(of: "ab").map { "aab".utf8.distance(from: "aab".startIndex, to: $0.lowerBound) } == 1)
        #expect(url.firstByteRange(of: "é").map { String(url[$0]) } == "é")
        var headers = HTTPHeaders([("Content-Type", "a"), ("X-Größe", "b")])
        #expect(headers["content-TYPE"] == "a")
        #expect(headers["X-GRÖSSE"] == nil && headers["x-größe"] == "b" && headers["Content-Typ"] == nil)
        headers["CONTENT-type"] = "c"
        #expect(headers.fields.map(\.name) == ["Content-Type", "X-Größe"] && headers["Content-Type"] == "c")
        headers["content-type"] = nil
        #expect(headers.fields.count == 1)
    }

    @Test func randomBytesNeverCrash() throws {
        var generator = SystemRandomNumberGenerator()
        let sample = Array(try Conformance.data("payloads/batch/olingo2/batchRequest.batch"))
        for _ in 0..<300 {
            var bytes = sample
            for _ in 0..<8 { bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator) }
            _ = try? MultipartBatch.read(bytes)
            _ = try? MultipartBatch.read(Array(bytes.prefix(Int.random(in: 0..<bytes.count, using: &generator))))
        }
    }
}

@Suite struct JSONBatchTests {
    /// OData JSON Format 4.01 §19.1: each rule a JSON batch request can break is refused with a
    /// message that names it (issue 34, item 9).
    @Test func jsonBatchRulesAreEnforced() throws {
        func refusal(_ requests: String, root: String? = nil) -> String {
            let text = root ?? #"{"requests":[\#(requests)]}"#
            do {
                _ = try JSONBatchRequest.read(Array(text.utf8))
                return ""
            } catch {
                return String(describing: error)
            }
        }
        let get = #"{"id":"r","method":"GET","url":"Products"}"#
        let cases: [(String, String)] = [
            (#"{"id":"1","method":"POST","url":"A","atomicityGroup":"g"},\#(get),{"id":"2","method":"POST","url":"A","atomicityGroup":"g"}"#,
             "The requests of atomicity group g must be adjacent"),
            (#"{"id":"g","method":"POST","url":"A"},{"id":"1","method":"POST","url":"A","atomicityGroup":"g"}"#,
             "g is both a request id and an atomicity group"),
            (#"{"id":"1","method":"POST","url":"A","atomicityGroup":"g"},{"id":"2","method":"GET","url":"A","dependsOn":["1"]}"#,
             "1 is a member of atomicity group g: depend on the group"),
            (#"{"id":"1","method":"POST","url":"A","atomicityGroup":"g"},{"id":"2","method":"POST","url":"A","atomicityGroup":"g","dependsOn":["g"]}"#,
             "cannot depend on its own atomicity group g"),
            (#"{"id":"1","method":"MERGE","url":"A"}"#, "MERGE is not a method of a batch request"),
            (#"{"id":"1","method":"GET","url":"A","body":{"x":1}}"#, "A GET request has no body"),
            (#"{"id":"1","method":"DELETE","url":"A(1)","body":"x"}"#, "A DELETE request has no body"),
            (#"{"id":"1","method":"POST","url":"$batch"}"#, "A batch cannot contain another $batch"),
            (#"{"id":"1","method":"POST","url":"/odata/$batch?x=1"}"#, "A batch cannot contain another $batch"),
            (#"{"id":"1","method":"GET","url":"A","id":"2"}"#, "'id' is given twice"),
            (#"{"id":"1","method":"GET","url":"A","verb":"x"}"#, "A request has no member 'verb'"),
            // Issue 55, item 4.
            (#"{"id":"1","method":"POST","url":"A"},{"id":"2","method":"PATCH","url":"$1"}"#,
             "The URL $1 refers to request 1, which dependsOn must name"),
            (#"{"id":"1","method":"POST","url":"A","atomicityGroup":"g"},{"id":"2","method":"GET","url":"$1/B","dependsOn":["1"]}"#,
             "1 is a member of atomicity group g: depend on the group"),
            (#"{"id":"1","method":"POST","url":"A","atomicityGroup":"g"},{"id":"2","method":"GET","url":"$1/B","dependsOn":["g"],"atomicityGroup":"h"},{"id":"3","method":"GET","url":"$9"}"#,
             "The URL $9 refers to request 9, which is no earlier request"),
            (#"{"id":"1","method":"GET","url":"A","headers":{"accept":"a","Accept":"b"}}"#, "Header Accept is given twice"),
            (#"{"id":"1","method":"POST","url":"A","atomicityGroup":"g 1"}"#, "Atomicity group 'g 1' is not a request-id"),
            (#"{"id":"1","method":"POST","url":"A","atomicityGroup":"g/1"}"#, "Atomicity group 'g/1' is not a request-id"),
            (#"{"id":"a b","method":"GET","url":"A"}"#, "Request id 'a b' is not a request-id"),
            (#"{"id":1,"method":"GET","url":"A"}"#, "'id' must be a string"),
            (#"{"id":"1","method":"GET","url":"A","dependsOn":"x"}"#, "'dependsOn' must be an array"),
            (#"{"id":"1","method":"GET","url":"A","atomicityGroup":7}"#, "'atomicityGroup' must be a string"),
            (#"{"id":"1","method":"GET","url":"A","headers":[]}"#, "'headers' must be an object"),
            (#"{"id":"1","method":"GET","url":"A","dependsOn":["1"]}"#, "dependsOn must name an earlier request or atomicity group"),
        ]
        for (requests, message) in cases {
            let error = refusal(requests)
            #expect(error.contains(message), "\(requests): \(error)")
        }
        #expect(refusal("", root: #"{"requests":[],"extra":1}"#).contains("A JSON batch has no member 'extra'"))
        #expect(refusal("", root: #"{"requests":[],"requests":[]}"#).contains("'requests' is given twice"))
        // `if` is read (a service without conditions answers 424 for that request), and a
        // system resource is no request reference.
        #expect(refusal(#"{"id":"1","method":"GET","url":"A","if":"$0/$succeeded"}"#) == "")
        #expect(refusal(#"{"id":"1","method":"GET","url":"$metadata"}"#) == "")
        #expect(refusal(#"{"id":"1","method":"POST","url":"A","atomicityGroup":"g"},"#
                        + #"{"id":"2","method":"GET","url":"$1/B","dependsOn":["g"]}"#) == "")
        // Within one group a member may depend on another; afterwards, on the group.
        #expect(refusal(#"{"id":"1","method":"POST","url":"A","atomicityGroup":"g"},"#
                        + #"{"id":"2","method":"PATCH","url":"$1","atomicityGroup":"g","dependsOn":["1"]},"#
                        + #"{"id":"3","method":"get","url":"A","dependsOn":["g"]}"#) == "")
    }

    /// A multipart change set holds changes only.
    @Test func aGetInAChangeSetIsRefused() {
        let body = "--b\r\nContent-Type: multipart/mixed;boundary=c\r\n\r\n--c\r\nContent-Type: application/http\r\n\r\n"
            + "GET Products HTTP/1.1\r\n\r\n\r\n--c--\r\n--b--\r\n"
        #expect(throws: PayloadError.self) { try MultipartBatch.read(Array(body.utf8), boundary: "b") }
        do {
            _ = try MultipartBatch.read(Array(body.utf8), boundary: "b")
        } catch {
            #expect(String(describing: error).contains("A change set may not hold a GET request"), "\(error)")
        }
    }

    @Test func requestsRoundTripAndValidate() throws {
        let text = #"""
        {"requests":[
          {"id":"1","method":"post","url":"Customers","atomicityGroup":"g1","headers":{"Content-Type":"application/json"},"body":{"ID":"A"}},
          {"id":"2","method":"PATCH","url":"$1","atomicityGroup":"g1","dependsOn":["1"],"body":{"Name":"x"}},
          {"id":"3","method":"GET","url":"Customers?$top=1","dependsOn":["g1"]}
        ]}
        """#
        let batch = try JSONBatchRequest.read(Array(text.utf8))
        #expect(batch.requests.map(\.id) == ["1", "2", "3"])
        #expect(batch.requests[0].method == "POST")
        #expect(batch.requests[0].headers["content-type"] == "application/json")
        #expect(batch.requests[1].dependsOn == ["1"])
        #expect(batch.requests[2].dependsOn == ["g1"])
        #expect(try JSONBatchRequest.read(batch.write()) == batch)
        for bad in [#"{"requests":[{"id":"1","method":"GET","url":"A"},{"id":"1","method":"GET","url":"B"}]}"#,
                    #"{"requests":[{"id":"1","method":"GET","url":"A","dependsOn":["9"]}]}"#,
                    #"{"requests":[{"method":"GET","url":"A"}]}"#, #"{"nope":1}"#, #"{"requests":[1]"#] {
            #expect(throws: PayloadError.self, "\(bad)") { try JSONBatchRequest.read(Array(bad.utf8)) }
        }
    }

    @Test func responsesRoundTrip() throws {
        let response = JSONBatchResponse(responses: [
            .init(id: "1", status: 201, headers: ["location": "Customers('A')"], body: .object([.init("ID", .string("A"))]), atomicityGroup: "g1"),
            .init(id: "3", status: 404, body: .object([.init("error", .object([.init("code", .string("404")), .init("message", .string("no"))]))])),
        ])
        let read = try JSONBatchResponse.read(response.write())
        #expect(read == response)
        #expect(throws: PayloadError.self) { try JSONBatchResponse.read(Array(#"{"responses":[{"id":"1","status":"x"}]}"#.utf8)) }
    }
}

@Suite struct ODataErrorTests {
    @Test func v4ErrorsFromTheCorpus() throws {
        let error = try ODataError.parse(Array(try Conformance.data("payloads/v4-json/olingo4-client-core/error.json")), httpStatus: 501)
        #expect(error.code == "501")
        #expect(error.message == "Unsupported functionality")
        #expect(error.target == "query")
        #expect(error.details == [ODataError.Detail(code: "301", message: "$search query option not supported", target: "$search")])
        #expect(error.innerError?["trace"] != nil)
        #expect(error.httpStatus == 501)
        #expect(try ODataError.parse(error.v4JSON(), httpStatus: 501) == error)
    }

    @Test func v2JSONAndXMLWithSAPDetails() throws {
        let json = #"""
        {"error":{"code":"SY/530","message":{"lang":"en","value":"Order 42 is locked"},
         "innererror":{"transactionid":"ABC","errordetails":[{"code":"ZORD/001","message":"Locked by JDOE","target":"OrderID","severity":"error"}]}}}
        """#
        let error = try ODataError.parse(Array(json.utf8), httpStatus: 400)
        #expect(error.code == "SY/530")
        #expect(error.message == "Order 42 is locked")
        #expect(error.language == "en")
        #expect(error.details == [ODataError.Detail(code: "ZORD/001", message: "Locked by JDOE", target: "OrderID", severity: "error")])
        #expect(try ODataError.parse(error.v2JSON(), httpStatus: 400) == error)
        let xml = #"""
        <?xml version="1.0" encoding="utf-8"?>
        <error xmlns="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata">
          <code>SY/530</code><message xml:lang="en">Order 42 is locked</message>
          <innererror><errordetails><errordetail><code>ZORD/001</code><message>Locked by JDOE</message><target>OrderID</target><severity>error</severity></errordetail></errordetails></innererror>
        </error>
        """#
        let fromXML = try ODataError.parse(Array(xml.utf8))
        #expect(fromXML.code == "SY/530")
        #expect(fromXML.message == "Order 42 is locked")
        #expect(fromXML.details == error.details)
        let rewritten = try ODataError.parse(fromXML.v2XML())
        #expect(rewritten.code == fromXML.code && rewritten.details == fromXML.details && rewritten.message == fromXML.message)
    }

    @Test func badErrorBodies() {
        for body in ["", "{}", "{\"error\":1}", "<error>", "<nope/>", "{\"error\":{"] {
            #expect(throws: PayloadError.self, "\(body)") { try ODataError.parse(Array(body.utf8)) }
        }
    }
}
