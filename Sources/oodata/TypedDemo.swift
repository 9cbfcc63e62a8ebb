import Foundation
import ODataCore
import ODataServer
import OfflineOData

/// `oodata demo --typed`: the sales service offline through the types `oodata generate`
/// wrote (Generated/SalesTypes.swift): a live query, a local change that fires it, an upload,
/// and the sync status along the way.
enum TypedDemo {
    static func run(server: EmbeddedServer, folder: URL, started: Date) async throws {
        var parameters = OfflineODataParameters()
        parameters.storePath = folder
        parameters.storeName = "demo-typed"
        parameters.storeEncryptionKey = "demo-key-\(UUID().uuidString.prefix(8))"
        let provider = OfflineODataProvider(serviceRoot: server.v4Root, parameters: parameters)
        try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners"))
        try await provider.add(
            definingQuery: OfflineODataDefiningQuery(name: "Orders", query: "SalesOrders?$expand=Items"))

        print("\n2. Open the offline store; a DataService over it with the generated types")
        try await provider.open()
        let service = try await DataService(provider)
        let partners = try await service.fetch(
            Sales.SalesService.businessPartners.query.filter { $0.address.country == "DE" }.orderBy(\.partnerID))
        print(
            "  partners in DE: " + partners.map { "\($0.partnerID) (\($0.companyName ?? "?"))" }.joined(separator: ", ")
        )
        let log = Log()

        // The sync status as it changes.
        let statusTask = Task {
            for await status in await provider.syncStatusUpdates() {
                var text = "pending \(status.pendingRequests), failed \(status.failedRequests)"
                if let running = status.runningOperation {
                    text += ", \(running.rawValue) running" + (status.progressStep.map { " (\($0.rawValue))" } ?? "")
                }
                text +=
                    ", last upload " + (status.lastUpload.map { ISO8601DateFormatter().string(from: $0) } ?? "never")
                log.status(text)
            }
        }

        print("\n3. Observe the open orders of BP0 (a live query)")
        let query = Sales.SalesService.salesOrders.query
            .filter { $0.partnerID == "BP0" && $0.status != .shipped && $0.status != .cancelled }
            .orderBy(\.orderID)
        print("  " + (try service.url(of: query)))
        let observation = Task {
            for try await orders in service.observe(query) {
                log.observed(
                    orders.map { "\($0.orderID)\($0.note.map { ": \"\($0)\"" } ?? "")" }.joined(separator: ", "))
            }
        }
        try await log.waitForObservations(1)
        try await log.waitForStatus { $0.contains("pending 0") }

        print("\n4. Change an order locally (a typed update: only the changed property, as PATCH)")
        let first = try await service.fetch(query.top(1))
        guard let order = first.first else { throw CLIFailure("BP0 has no open order in the sample") }
        var changed = order
        changed.note = "Call before delivery"
        try await service.update(changed, from: order)
        print("  \(order.orderID).note = \"Call before delivery\"")
        try await log.waitForObservations(2)
        try await log.waitForStatus { $0.contains("pending 1") }

        print("\n5. Upload")
        try await provider.upload()
        try await log.waitForStatus { $0.contains("pending 0") && !$0.contains("running") && !$0.contains("never") }
        // The upload stored the backend's new ETag of the order: a new result for the observation.
        try await log.waitForObservations(3)
        let online = try await DataService(OnlineODataProvider(serviceRoot: server.v4Root))
        let backend = try await online.get(Sales.SalesService.salesOrders, key: order.key)
        print("  the backend's \(order.orderID).note: \"\(backend?.note ?? "")\"")
        observation.cancel()
        statusTask.cancel()
        _ = await observation.result
        print("\nSummary")
        print(
            "  observation results: \(log.observationCount); sync status updates: \(log.statusCount); "
                + "took \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
        await provider.close()
    }

    /// Prints what the observation and the status stream deliver, and lets the demo wait for it.
    final class Log: @unchecked Sendable {
        // The lock guards the counters and the last status.
        private let lock = NSLock()
        private var observations = 0
        private var statuses: [String] = []
        private var lastObserved: String?

        func observed(_ text: String) {
            let (count, same) = lock.withLock {
                observations += 1
                defer { lastObserved = text }
                return (observations, lastObserved == text)
            }
            // The same values with new ETags (after an upload) are a new result too.
            print("  observation \(count == 1 ? "→" : "fired →") [\(text)]" + (same ? " (new ETags)" : ""))
        }

        func status(_ text: String) {
            let changed = lock.withLock { () -> Bool in
                guard statuses.last != text else { return false }
                statuses.append(text)
                return true
            }
            if changed { print("  sync status: \(text)") }
        }

        var observationCount: Int { lock.withLock { observations } }
        var statusCount: Int { lock.withLock { statuses.count } }

        func waitForObservations(_ count: Int) async throws {
            try await wait { self.lock.withLock { self.observations >= count } }
        }

        func waitForStatus(_ matches: @escaping @Sendable (String) -> Bool) async throws {
            try await wait { self.lock.withLock { self.statuses.last.map(matches) ?? false } }
        }

        private func wait(_ condition: @Sendable () -> Bool) async throws {
            for _ in 0..<1000 where !condition() { try await Task.sleep(for: .milliseconds(10)) }
            guard condition() else { throw CLIFailure("the typed demo waited 10 s for an update that did not come") }
        }
    }
}
