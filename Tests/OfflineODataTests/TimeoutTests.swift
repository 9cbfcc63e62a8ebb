import Foundation
import Testing
@testable import OfflineOData

/// `timeout` (SPEC §2) is a time without network activity. The stall and trickle cases run
/// against every transport in `TransportSuiteTests`; this is AsyncHTTPClient's own probe.
@Suite struct TimeoutTests {
    #if os(Linux)
    @Test func shortTimeoutsAreProbedMoreOften() {
        #expect(AsyncHTTPClientTransport.probeInterval(for: 60) == 10)
        #expect(AsyncHTTPClientTransport.probeInterval(for: 30) == 10)
        #expect(AsyncHTTPClientTransport.probeInterval(for: 20) == 5)
        #expect(AsyncHTTPClientTransport.probeInterval(for: 2) == 0.5)
    }
    #endif
}
