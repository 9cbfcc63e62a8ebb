import Foundation
import Testing
import ODataCore
import ODataServer
@testable import OfflineOData

/// `timeout` (SPEC §2) is a time without network activity: a stalled backend fails the request,
/// a slow one that keeps sending does not. Against the reference server's delay and trickle faults.
@Suite struct TimeoutTests {
    @Test func aStallFailsButASlowAnswerThatKeepsComingDoesNot() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let url = fixture.server.v4Root.absoluteString + "BusinessPartners"
        let transport = AsyncHTTPClientTransport()
        // The answer comes in 8 parts, 400 ms apart: 3.2 s in all, never 1.5 s without a byte
        // (the margin is wide: the whole suite runs at once on two cores).
        await fixture.server.service.faults.set([FaultRule(method: "GET", urlContains: "BusinessPartners", trickleMilliseconds: 400)])
        let slow = try await transport.send(TransportRequest(method: "GET", url: url), timeout: 1.5)
        #expect(slow.status == 200)
        #expect(try JSONValue.parse(slow.body)["value"]?.arrayValue?.isEmpty == false)
        // An answer that does not start for 4 s.
        await fixture.server.service.faults.set([FaultRule(method: "GET", urlContains: "BusinessPartners", delayMilliseconds: 4000)])
        do {
            _ = try await transport.send(TransportRequest(method: "GET", url: url), timeout: 1.5)
            Issue.record("a stalled request did not time out")
        } catch let error as TransportError {
            #expect(error.message.contains("No data was sent or received") && error.message.contains("timeout 1.5 s"), "\(error.message)")
        }
        // Through the provider: the open fails with a transport error and leaves no store.
        var parameters = fixture.parameters()
        parameters.timeoutInterval = 1.5
        let provider = try await fixture.provider(parameters: parameters)
        do {
            try await provider.open()
            Issue.record("the open did not time out")
        } catch let error as OfflineODataError {
            #expect(error.code == .transport && error.message.contains("timeout 1.5 s"), "\(error.message)")
        }
        #expect(!FileManager.default.fileExists(atPath: parameters.storeFile))
        await fixture.server.service.faults.set([])
        try await provider.open()
        #expect(count(try await provider.read("BusinessPartners")) > 0)
    }

    @Test func shortTimeoutsAreProbedMoreOften() {
        #expect(AsyncHTTPClientTransport.probeInterval(for: 60) == 10)
        #expect(AsyncHTTPClientTransport.probeInterval(for: 30) == 10)
        #expect(AsyncHTTPClientTransport.probeInterval(for: 20) == 5)
        #expect(AsyncHTTPClientTransport.probeInterval(for: 2) == 0.5)
    }
}
