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
