import Testing

@testable import ODataGateway

/// The `Range` headers a store file is asked for with (issue 37), as HTTP reads them.
@Suite struct GatewayRangeTests {
    @Test func rangesAreReadAsHTTPSays() {
        let size: Int64 = 1000
        #expect(Gateway.byteRange("bytes=0-99", size: size) == .range(0..<100))
        #expect(Gateway.byteRange("bytes=900-", size: size) == .range(900..<1000))
        #expect(Gateway.byteRange("bytes=900-5000", size: size) == .range(900..<1000))
        #expect(Gateway.byteRange("bytes=-100", size: size) == .range(900..<1000))
        #expect(Gateway.byteRange("bytes=-5000", size: size) == .range(0..<1000))
        #expect(Gateway.byteRange("bytes=990-99999999999999999999999", size: size) == .range(990..<1000))
        // Past the end, or no bytes: 416.
        #expect(Gateway.byteRange("bytes=1000-", size: size) == .unsatisfiable)
        #expect(Gateway.byteRange("bytes=-0", size: size) == .unsatisfiable)
        #expect(Gateway.byteRange("bytes=0-", size: 0) == .unsatisfiable)
        // Not one byte range: ignored (the whole file).
        for header in ["bytes=abc", "bytes=--5", "bytes=5-1", "items=0-1", "bytes=0-1,5-6", "bytes=-", "bytes=+1-2"] {
            #expect(Gateway.byteRange(header, size: size) == .ignored, "\(header)")
        }
    }
}
