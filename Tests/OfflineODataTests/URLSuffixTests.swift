import Testing

@testable import OfflineOData

/// `urlSuffix` goes on every request URL, but an option the URL names already (a next or delta
/// link written with it) keeps the URL's value and is not added twice.
@Suite struct URLSuffixTests {
    static func defaults(_ suffix: String?) -> RequestDefaults {
        RequestDefaults(
            serviceRoot: "http://host/svc/", urlSuffix: suffix, customHeaders: [:], customCookies: [:], version: nil)
    }

    @Test func anOptionTheURLNamesIsNotAddedAgain() {
        let sap = Self.defaults("sap-client=100&sap-language=EN")
        #expect(sap.absoluteURL("Products") == "http://host/svc/Products?sap-client=100&sap-language=EN")
        #expect(sap.absoluteURL("Products?$top=1") == "http://host/svc/Products?$top=1&sap-client=100&sap-language=EN")
        // A gateway's delta link carries the client already: only the language is added.
        #expect(
            sap.absoluteURL("http://gw/Products?sap-client=100&$deltatoken=gd.5.45")
                == "http://gw/Products?sap-client=100&$deltatoken=gd.5.45&sap-language=EN")
        // The URL's own value wins; names match percent-decoded.
        #expect(sap.absoluteURL("Products?sap-client=200") == "http://host/svc/Products?sap-client=200&sap-language=EN")
        #expect(Self.defaults("$format=json").absoluteURL("P?%24format=json") == "http://host/svc/P?%24format=json")
        #expect(Self.defaults("?a=1&").absoluteURL("P") == "http://host/svc/P?a=1")
        #expect(Self.defaults(nil).absoluteURL("P") == "http://host/svc/P")
    }
}
