import Testing
@testable import ODataGateway

/// The row hash the gateway computes is PostgreSQL's `md5(text)`: rows stored by an earlier
/// version (hashed by PostgreSQL) compare equal when unchanged, and are not rewritten.
@Suite struct GatewayHashTests {
    @Test func theRowHashIsPostgreSQLsMD5() {
        // `SELECT md5('')`, `md5('abc')` and `md5('{"ID":"é"}')` in PostgreSQL 15.
        #expect(GatewayStore.md5("") == "d41d8cd98f00b204e9800998ecf8427e")
        #expect(GatewayStore.md5("abc") == "900150983cd24fb0d6963f7d28e17f72")
        #expect(GatewayStore.md5(#"{"ID":"é"}"#) == Self.postgresMD5OfAccentedRow)
    }

    static let postgresMD5OfAccentedRow = "e580ef073d76126997c8e2a5eb93d15e"
}

/// The gateway's ETag goes into a row at its top level, V4 and V2, and never replaces the
/// backend's own (SPEC §13, "ETags for backends without them").
@Suite struct GatewayETagInjectionTests {
    static let hash = "900150983cd24fb0d6963f7d28e17f72"
    static let etag = #"W/\"gw.7.900150983cd24fb0d6963f7d28e17f72\""#

    @Test func v4RowsGetAnETagUnlessTheyHaveOne() {
        #expect(
            Gateway.withETag(#"{"ID":1}"#, scope: 7, hash: Self.hash, legacy: false)
                == #"{"@odata.etag":""# + Self.etag + #"","ID":1}"#)
        #expect(
            Gateway.withETag("{}", scope: 7, hash: Self.hash, legacy: false) == #"{"@odata.etag":""# + Self.etag
                + #""}"#)
        let own = #"{"@odata.etag":"W/\"1\"","ID":1}"#
        #expect(Gateway.withETag(own, scope: 7, hash: Self.hash, legacy: false) == own)
        let v3 = #"{"odata.etag":"W/\"1\"","ID":1}"#
        #expect(Gateway.withETag(v3, scope: 7, hash: Self.hash, legacy: false) == v3)
        // An expanded child's ETag is the child's: the row still gets one at its top level.
        let nested = #"{"ID":1,"Items":[{"@odata.etag":"W/\"2\"","N":1}]}"#
        let injected = Gateway.withETag(nested, scope: 7, hash: Self.hash, legacy: false)
        #expect(injected.hasPrefix(#"{"@odata.etag":""# + Self.etag), "\(injected)")
    }

    @Test func v2RowsGetAnETagInTheirOwnMetadata() {
        #expect(
            Gateway.withETag(#"{"__metadata":{"uri":"u"},"ID":1}"#, scope: 7, hash: Self.hash, legacy: true)
                == #"{"__metadata":{"etag":""# + Self.etag + #"","uri":"u"},"ID":1}"#)
        #expect(
            Gateway.withETag("{}", scope: 7, hash: Self.hash, legacy: true)
                == #"{"__metadata":{"etag":""# + Self.etag + #""}}"#)
        let own = #"{"__metadata":{"uri":"u","etag":"W/\"1\""},"ID":1}"#
        #expect(Gateway.withETag(own, scope: 7, hash: Self.hash, legacy: true) == own)
        let nested = #"{"ID":1,"__metadata":{"uri":"u"},"Items":{"results":[{"__metadata":{"etag":"W/\"2\""}}]}}"#
        let injected = Gateway.withETag(nested, scope: 7, hash: Self.hash, legacy: true)
        #expect(injected.contains(#""__metadata":{"etag":""# + Self.etag + #"","uri":"u"}"#), "\(injected)")
    }
}

/// Pages are built as bytes (`PageText`): the same text as the string way, the backend's URL
/// replaced wherever a payload names it, and the gateway's ETag where the string way puts it.
@Suite struct GatewayPageTextTests {
    static let backend = "http://backend:8080/odata/v4/"
    static let root = "http://gateway/sales/"

    static let payloads = [
        #"{"ID":1}"#, "{}", #"{"@odata.etag":"W/\"1\"","ID":1}"#,
        #"{"ID":1,"@odata.id":"http://backend:8080/odata/v4/Things(1)","Note":"x"}"#,
        #"{"Link":"http://backend:8080/odata/v4/","Other":"http://backend:8080/odata/v4/A(1)"}"#,
        #"{"__metadata":{"uri":"http://backend:8080/odata/v4/Things(1)","type":"T"},"ID":1}"#,
        #"{"__metadata":{},"ID":1}"#, #"{"ID":1,"__metadata":{"uri":"u"}}"#, #"{"Name":"Zoë 🚚"}"#,
        #"{"Half":"http://backend:8080/odata/v"}"#, "",
        #"{"__metadata":{"uri":"u","etag":"W/\"3\""},"ID":1}"#,
        #"{"__metadata":{"uri":"u","deferred":{"etag":"x"}},"ID":1}"#,
        #"{"__metadata":{"uri":"u"},"Note":"\"etag\":"}"#, #"{"odata.etag":"W/\"1\"","ID":1}"#,
    ]

    @Test(arguments: [false, true])
    func bytesAreTheStringWaysText(legacy: Bool) {
        for payload in Self.payloads {
            let named = payload.replacingOccurrences(of: Self.backend, with: Self.root)
            var bytes: [UInt8] = []
            PageText.append(payload, replacing: Array(Self.backend.utf8), with: Array(Self.root.utf8), to: &bytes)
            #expect(String(decoding: bytes, as: UTF8.self) == named, "\(payload)")
            for hash in [GatewayETagInjectionTests.hash, nil] as [String?] {
                var tagged: [UInt8] = []
                PageText.appendWithETag(bytes, scope: 7, hash: hash, legacy: legacy, to: &tagged)
                #expect(
                    String(decoding: tagged, as: UTF8.self)
                        == Gateway.withETag(named, scope: 7, hash: hash, legacy: legacy), "\(payload)")
            }
        }
    }
}
