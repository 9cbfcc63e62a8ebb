import Foundation
import ODataCore
import ODataServer
import ODataStore
import Testing
@testable import OfflineOData

/// Collects what an `AsyncSequence` yields, in a task of its own.
final class Collector<Element: Sendable>: @unchecked Sendable {
    // The lock guards `values` and `failure`; the task only appends.
    private let lock = NSLock()
    private var values: [Element] = []
    private var failure: (any Error)?
    private var finished = false
    private var task: Task<Void, Never>?

    init<S: AsyncSequence & Sendable>(_ sequence: S) where S.Element == Element {
        task = Task {
            do {
                for try await value in sequence { self.append(value) }
            } catch {
                self.fail(error)
            }
            self.finish()
        }
    }

    private func append(_ value: Element) { lock.withLock { values.append(value) } }
    private func fail(_ error: any Error) { lock.withLock { failure = error } }
    private func finish() { lock.withLock { finished = true } }

    var all: [Element] { lock.withLock { values } }
    var isFinished: Bool { lock.withLock { finished } }
    var error: (any Error)? { lock.withLock { failure } }

    /// Waits until `count` values arrived (at most `seconds`); returns them.
    @discardableResult
    func wait(for count: Int, seconds: Double = 30) async throws -> [Element] {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while all.count < count {
            if let error { throw error }
            guard ContinuousClock.now < deadline else {
                Issue.record("waited for \(count) values, got \(all.count)")
                return all
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        return all
    }

    func cancel() { task?.cancel() }
}

/// Waits until `condition` holds (at most `seconds`).
func eventually(_ seconds: Double = 30, _ condition: @Sendable () async throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(10))
    }
    return try await condition()
}

/// Serialized: each test runs a backend and stores, and the suite's open files add up beside the
/// others' (swift-corelibs-foundation's `Process.run` over-reads `/proc/self/fd` when a test
/// process has more than about 1,300 open files, swiftlang/swift-corelibs-foundation#5472).
@Suite(.serialized) struct LiveQueryTests {
    @Test(arguments: [false, true])
    func observationFiresOnWritesAndDownloadsOfItsSetsOnly(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        let service = try await DataService(provider)
        // A typed observation of BP0's orders (V4 types: the V2 store is read through its URL).
        let orderURL = "SalesOrders?$filter=PartnerID eq 'BP0'&$orderby=OrderID"
        let orders = Collector(service.observe(url: orderURL))
        let contacts = Collector(provider.observe("Contacts"))
        #expect(count(try await orders.wait(for: 1)[0]) == 10)
        #expect(count(try await contacts.wait(for: 1)[0]) == 6)
        #expect(await provider.activeChangeSubscriptions == 2)
        let reads = await provider.localReadCount

        // A local write to the observed set: one re-read, one new result.
        let body = Array(#"{"Note":"live"}"#.utf8)
        _ = try await provider.execute(method: v2 ? "MERGE" : "PATCH", url: "SalesOrders('SO1')", body: body)
        let changed = try await orders.wait(for: 2)
        #expect(changed[1] != changed[0])
        try await Task.sleep(for: .milliseconds(200))
        #expect(await provider.localReadCount == reads + 1, "one query for the one affected observation")
        #expect(contacts.all.count == 1, "the Contacts observation did not fire")

        // A write to the observed set that does not change the result: re-read, nothing yielded.
        _ = try await provider.execute(method: v2 ? "MERGE" : "PATCH", url: "SalesOrders('SO15')", body: body)
        try await Task.sleep(for: .milliseconds(200))
        #expect(await provider.localReadCount == reads + 2)
        #expect(orders.all.count == 2)

        // A write to the other set fires the other observation only.
        _ = try await provider.execute(
            method: v2 ? "MERGE" : "PATCH", url: v2 ? "Contacts(1L)" : "Contacts(1)",
            body: Array(#"{"FirstName":"Live"}"#.utf8))
        #expect(try await contacts.wait(for: 2).count == 2)
        #expect(orders.all.count == 2)

        // An upload changes ETags (a new result); a download that brings a backend change
        // fires the observation again.
        try await provider.upload()
        try await orders.wait(for: 3)
        try await fixture.backendSend("PATCH", "SalesOrders('SO2')", #"{"Note":"from the backend"}"#)
        #expect(orders.all.count == 3)
        try await provider.download()
        let afterDownload = try await orders.wait(for: 4)
        let notes =
            afterDownload.last.map { result -> [String] in
                guard case .collection(let collection) = result else { return [] }
                return collection.entities.compactMap { string($0, "Note") }
            } ?? []
        #expect(notes.contains("from the backend"))

        // Cancelling the consumers ends the observations and their subscriptions.
        orders.cancel()
        contacts.cancel()
        #expect(try await eventually { await provider.activeChangeSubscriptions == 0 })
        #expect(try await eventually { orders.isFinished && contacts.isFinished })
    }

    @Test func typedObservationYieldsTypedValues() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        let service = try await DataService(provider)
        let query = SalesV4.SalesService.salesOrders.query.filter { $0.partnerID == "BP1" && $0.note == "watched" }
        let watched = Collector(service.observe(query))
        #expect(try await watched.wait(for: 1)[0].isEmpty)
        let order = try #require(try await service.get(SalesV4.SalesService.salesOrders, key: .init(orderID: "SO12")))
        var changed = order
        changed.note = "watched"
        try await service.update(changed, from: order)
        let values = try await watched.wait(for: 2)
        #expect(values[1].map(\.orderID) == ["SO12"])
        // Undo brings the old result back.
        try await provider.undoPendingChanges(forURL: "SalesOrders('SO12')")
        #expect(try await watched.wait(for: 3)[2].isEmpty)
        watched.cancel()
        #expect(try await eventually { await provider.activeChangeSubscriptions == 0 })
    }

    /// Many observers, cancelled: every subscription and task goes away.
    @Test func manyObserversLeaveNothingBehind() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        let service = try await DataService(provider)
        let collectors = (0..<200).map { index in
            Collector(
                service.observe(SalesV4.SalesService.salesOrders.query.filter { $0.orderID == "SO\(index % 30)" }))
        }
        for collector in collectors { try await collector.wait(for: 1) }
        #expect(await provider.activeChangeSubscriptions == 200)
        // A write reaches all of them: each re-reads once, one of seven sees its order change.
        let reads = await provider.localReadCount
        _ = try await provider.execute(method: "PATCH", url: "SalesOrders('SO7')", body: Array(#"{"Note":"x"}"#.utf8))
        #expect(try await eventually { await provider.localReadCount == reads + 200 })
        for (index, collector) in collectors.enumerated() where index % 30 == 7 {
            #expect(try await collector.wait(for: 2).count == 2)
        }
        try await Task.sleep(for: .milliseconds(100))
        #expect(await provider.localReadCount == reads + 200)
        for collector in collectors { collector.cancel() }
        #expect(try await eventually { await provider.activeChangeSubscriptions == 0 })
        #expect(try await eventually { collectors.allSatisfy(\.isFinished) })
        // A write after that reads nothing.
        let after = await provider.localReadCount
        _ = try await provider.execute(method: "PATCH", url: "SalesOrders('SO8')", body: Array(#"{"Note":"y"}"#.utf8))
        try await Task.sleep(for: .milliseconds(100))
        #expect(await provider.localReadCount == after)
    }

    @Test(arguments: [false, true])
    func syncStatusFollowsWritesUploadsAndFailures(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        let before = try await provider.syncStatus()
        #expect(before.pendingRequests == 0 && before.failedRequests == 0 && before.runningOperation == nil)
        // The first open downloaded: that is the last download.
        #expect(before.lastUpload == nil && before.lastDownload != nil)
        let statuses = Collector(await provider.syncStatusUpdates())
        try await statuses.wait(for: 1)
        let merge = v2 ? "MERGE" : "PATCH"
        _ = try await provider.execute(method: merge, url: "SalesOrders('SO1')", body: Array(#"{"Note":"a"}"#.utf8))
        _ = try await provider.execute(method: merge, url: "SalesOrders('SO4')", body: Array(#"{"Note":"b"}"#.utf8))
        #expect(try await eventually { statuses.all.last?.pendingRequests == 2 })
        // The backend loses SO4: its change fails at upload and lands in the ErrorArchive.
        try await fixture.backendSend("DELETE", "SalesOrders('SO4')", "")
        try await provider.upload()
        #expect(
            try await eventually {
                statuses.all.last?.runningOperation == nil && statuses.all.last?.pendingRequests == 0
            })
        let seen = statuses.all
        #expect(seen.contains { $0.isUploading }, "the upload showed while it ran")
        #expect(seen.contains { $0.isUploading && $0.progressStep != nil }, "with its progress")
        let after = try #require(seen.last)
        #expect(after.failedRequests == 1)
        #expect(after.lastUpload != nil && after.lastError == nil)
        // A failed download shows as the last error; the times stay.
        await fixture.server.stop()
        await #expect(throws: (any Error).self) { try await provider.download() }
        #expect(
            try await eventually { statuses.all.last?.lastError != nil && statuses.all.last?.runningOperation == nil })
        #expect(statuses.all.contains { $0.isDownloading })
        let failed = try await provider.syncStatus()
        #expect(failed.lastUpload == after.lastUpload && failed.lastDownload == before.lastDownload)
        statuses.cancel()
        // The times are kept in the store.
        await provider.close()
        try await provider.open()
        #expect(try await provider.syncStatus().lastUpload != nil)
    }

    /// Closing the store ends live queries with the error of their re-read.
    @Test func closingTheStoreEndsLiveQueriesWithAnError() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        let live = Collector(provider.observe("Contacts"))
        try await live.wait(for: 1)
        await provider.close()
        #expect(try await eventually { live.isFinished })
        #expect((live.error as? OfflineODataError)?.code == .notOpen)
        #expect(try await eventually { await provider.activeChangeSubscriptions == 0 })
    }

    @Test func foundationDatesAndDecimalsConvert() throws {
        let date = Date(timeIntervalSince1970: 1_700_000_000.123)
        let value = DateTimeOffsetValue(date)
        #expect(value.description == "2023-11-14T22:13:20.123Z")
        #expect(abs(value.foundationDate.timeIntervalSince1970 - 1_700_000_000.123) < 0.0005)
        #expect(DateTimeOffsetValue(Date(timeIntervalSince1970: -1)).description == "1969-12-31T23:59:59Z")
        let decimal = try #require(Decimal(string: "19.99", locale: Locale(identifier: "en_US_POSIX")))
        #expect(DecimalValue(decimal) == 19.99)
        #expect(DecimalValue("123456789.000000001")?.foundationDecimal.description == "123456789.000000001")
    }
}
