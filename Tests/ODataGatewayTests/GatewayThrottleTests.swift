import Foundation
import ODataCore
import OfflineOData
import Testing

@testable import ODataGateway

/// Issue 56: throttling per device (its `Client-Instance-ID`) and per user (its identity), as
/// token buckets configured per endpoint: 429 with `Retry-After` beyond them, and the client
/// waits that out and goes on.
@Suite(.serialized) struct GatewayThrottleTests {
    /// The bucket: a burst at once, then the rate; an empty bucket says how long to wait.
    @Test func aTokenBucketGivesItsBurstThenItsRate() async {
        let buckets = ThrottleBuckets()
        let rate = ThrottleRate(perSecond: 2, burst: 3)
        let start = ContinuousClock.now
        for _ in 0..<3 { #expect(await buckets.take("a", rate: rate, now: start) == nil) }
        let wait = await buckets.take("a", rate: rate, now: start)
        #expect(wait == 0.5)
        #expect(await buckets.take("b", rate: rate, now: start) == nil, "buckets are per key")
        #expect(await buckets.take("a", rate: rate, now: start + .milliseconds(500)) == nil)
        #expect(await buckets.take("a", rate: rate, now: start + .milliseconds(500)) != nil)
        // A long quiet time fills it to its burst, no more.
        for _ in 0..<3 { #expect(await buckets.take("a", rate: rate, now: start + .seconds(60)) == nil) }
        #expect(await buckets.take("a", rate: rate, now: start + .seconds(60)) != nil)
    }

    /// A sweep keeps each bucket until its own rate would have filled it: a slow limit's empty
    /// bucket outlives a sweep that a fast limit's request starts.
    @Test func aSweepKeepsEachBucketForItsOwnRate() async {
        let buckets = ThrottleBuckets()
        let slow = ThrottleRate(perSecond: 1.0 / 3600, burst: 1)
        let fast = ThrottleRate(perSecond: 10, burst: 10)
        let start = ContinuousClock.now
        #expect(await buckets.take("slow", rate: slow, now: start) == nil)
        #expect(await buckets.take("fast", rate: fast, now: start) == nil)
        // A minute on: the fast request sweeps; the fast bucket is full again and goes.
        #expect(await buckets.take("other", rate: fast, now: start + .seconds(61)) == nil)
        #expect(await buckets.count == 2, "the slow bucket and the new one")
        #expect(await buckets.take("slow", rate: slow, now: start + .seconds(62)) != nil, "still throttled")
    }

    static func get(_ url: String, device: String?, user: String?) async throws -> TransportResponse {
        var headers = HTTPHeaders()
        headers["Accept"] = "application/json"
        if let device { headers["Client-Instance-ID"] = device }
        if let user {
            headers["Authorization"] = "Basic " + Data("\(user):\(user)-password".utf8).base64EncodedString()
        }
        return try await DefaultTransport.make().send(
            TransportRequest(method: "GET", url: url, headers: headers), timeout: 30)
    }

    /// Over a device's limit: 429 with `Retry-After` and an OData error; another device of the
    /// same user is not held back (the refill is the unit test's). Over a user's limit, every
    /// device of that user is held back, another user is not.
    @Test(arguments: [false, true])
    func aDeviceAndAUserOverTheirLimitsGet429(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, instances: 0)
        do {
            var gateway = try await GatewayOperationsTests.adminGateway(setup) { configuration in
                // Slow enough that a loaded machine's slow requests do not refill it (the refill has its unit test).
                configuration.backends[0].deviceThrottle = ThrottleRate(perSecond: 0.02, burst: 3)
            }
            let url = gateway.root.absoluteString + "BusinessPartners"
            for _ in 0..<3 { #expect(try await Self.get(url, device: "d1", user: "alice").status == 200) }
            let refused = try await Self.get(url, device: "d1", user: "alice")
            #expect(refused.status == 429)
            let after = Int(refused.headers["Retry-After"] ?? "") ?? 0
            #expect((1...50).contains(after), "\(refused.headers)")
            let error = try ODataError.parse(refused.body)
            #expect(error.code == "TooManyRequests")
            #expect(error.message.contains("this device"), "\(error.message)")
            #expect(try await Self.get(url, device: "d2", user: "alice").status == 200, "another device")
            #expect(
                try await Self.get(url, device: "d1", user: "bob").status == 200, "d1 as another user is another device"
            )
            // Probes are never throttled.
            for _ in 0..<5 {
                #expect(
                    try await Self.get(gateway.root.absoluteString + "livez", device: "d1", user: nil).status == 200)
            }
            await gateway.stop()
            gateway = try await GatewayOperationsTests.adminGateway(setup) { configuration in
                configuration.backends[0].userThrottle = ThrottleRate(perSecond: 0.02, burst: 2)
            }
            let root = gateway.root.absoluteString + "BusinessPartners"
            #expect(try await Self.get(root, device: "a1", user: "alice").status == 200)
            #expect(try await Self.get(root, device: "a2", user: "alice").status == 200)
            let user = try await Self.get(root, device: "a3", user: "alice")
            #expect(user.status == 429)
            #expect(try ODataError.parse(user.body).message.contains("this user's devices together"))
            #expect(try await Self.get(root, device: "b1", user: "bob").status == 200, "another user")
            let metrics = String(
                decoding: try await Self.get(gateway.root.absoluteString + "metrics", device: nil, user: nil).body,
                as: UTF8.self)
            #expect(metrics.contains("oodata_gateway_throttled_total 1"), "\(metrics)")
            await gateway.stop()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A device over its limit waits out each `Retry-After` and its open, upload and download
    /// succeed; the gateway answered it 429 along the way.
    @Test(arguments: [false, true])
    func theClientWaitsOutRetryAfter(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, instances: 0)
        do {
            let gateway = try await GatewayOperationsTests.adminGateway(setup) { configuration in
                // One request per 2 s: a device's back-to-back requests are throttled even on a loaded machine.
                configuration.backends[0].deviceThrottle = ThrottleRate(perSecond: 0.5, burst: 1)
            }
            var parameters = OfflineODataParameters()
            parameters.storePath = setup.folder
            parameters.storeName = "throttled"
            let device = OfflineODataProvider(serviceRoot: gateway.root, parameters: parameters)
            for query in ["BusinessPartners", "Contacts"] {
                try await device.add(definingQuery: OfflineODataDefiningQuery(name: query, query: query))
            }
            try await device.open()
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"slow"}"#.utf8))
            try await device.upload()
            try await device.download()
            #expect(try await device.readEntities("ErrorArchive").isEmpty)
            #expect(try await device.readEntities("BusinessPartners('BP1')").first?.string("Phone") == "slow")
            let metrics = String(
                decoding: try await Self.get(gateway.root.absoluteString + "metrics", device: nil, user: nil).body,
                as: UTF8.self)
            let line = metrics.split(separator: "\n").first { $0.hasPrefix("oodata_gateway_throttled_total ") }
            let count = line.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
            #expect(count > 0, "the device was throttled on the way: \(line ?? "no line")")
            await device.close()
            await gateway.stop()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}
