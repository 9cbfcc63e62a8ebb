import Foundation
import Logging
import ODataCore
import ODataGateway
import ODataServer
import OfflineOData

/// `oodata demo --gateway`: the server half. A throwaway PostgreSQL, a backend without delta
/// links, two gateway instances on it and a device on each; a change on the backend reaches
/// both devices by delta while the backend is read once for both.
enum GatewayDemo {
    static func run(folder: URL, scale: Int, started: Date) async throws {
        heading("1. PostgreSQL, a backend without delta links, two gateways")
        let postgres = try await ThrowawayPostgres.start(in: folder)
        print("  throwaway PostgreSQL on 127.0.0.1:\(postgres.port) (in \(postgres.folder))")
        let backend: EmbeddedServer
        do {
            backend = try await EmbeddedServer.sales(
                at: folder.appendingPathComponent("backend.sqlite").path, scale: scale
            ) { options in
                // As most SAP Gateway services: no delta links. The gateway tracks the changes.
                options.tracksChanges = false
            }
        } catch {
            await postgres.stop()
            throw error
        }
        do {
            try await show(backend: backend, postgres: postgres, folder: folder, started: started)
        } catch {
            await backend.stop()
            await postgres.stop()
            throw error
        }
        await backend.stop()
        await postgres.stop()
    }

    private static func show(
        backend: EmbeddedServer, postgres: ThrowawayPostgres, folder: URL, started: Date
    ) async throws {
        print("  backend \(backend.v4Root.absoluteString) (gives no delta links)")
        var configuration = GatewayConfiguration(backends: [GatewayBackend(url: backend.v4Root.absoluteString)])
        // Partners are the same for everyone: refreshed once for all devices, with a target of a minute.
        configuration.backends[0].sharedQueries = ["BusinessPartners"]
        configuration.admin = GatewayAdminAccess(token: "demo-" + UUID().uuidString)
        var quiet = Logger(label: "oodata.demo.gateway")
        quiet.logLevel = .error
        let one = try await RunningGateway.start(
            configuration: configuration, postgresURL: postgres.url, adminPort: 0, logger: quiet)
        let two = try await RunningGateway.start(configuration: configuration, postgresURL: postgres.url, logger: quiet)
        print("  gateway A \(one.root.absoluteString) (admin API on port \(one.adminPort ?? 0))")
        print("  gateway B \(two.root.absoluteString), the same PostgreSQL")

        heading("2. Two devices, one on each gateway")
        func device(_ name: String, on gateway: RunningGateway) async throws -> OfflineODataProvider {
            var parameters = OfflineODataParameters()
            parameters.storePath = folder
            parameters.storeName = name
            parameters.storeEncryptionKey = "demo-\(name)"
            parameters.applicationVersion = "demo 1.0"
            parameters.acceptsServerBuiltStore = false
            let provider = OfflineODataProvider(serviceRoot: gateway.root, parameters: parameters)
            try await provider.add(
                definingQuery: OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners"))
            try await provider.open()
            return provider
        }
        let first = try await device("device-a", on: one)
        let second = try await device("device-b", on: two)
        for (name, provider) in [("A", first), ("B", second)] {
            if case .count(let n) = try await provider.read("BusinessPartners/$count") {
                print("  device \(name): \(n) business partners in its encrypted store")
            }
        }
        let journal = backend.service.journal
        let reads = await journal.requests().filter { $0.hasPrefix("GET BusinessPartners") }
        for read in reads { print("    backend saw: \(read)") }
        let full = reads.filter { !$0.contains("$top=0") }.count
        print("  the partners were read from the backend \(full) time(s) for both devices (the $top=0 reads check")
        print("  each device's credentials): the backend's load follows scopes, not devices")

        heading("3. A change on the backend reaches both devices by delta")
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers["If-Match"] = "*"
        let patched = try await DefaultTransport.make().send(
            TransportRequest(
                method: "PATCH", url: backend.v4Root.absoluteString + "BusinessPartners('BP1')", headers: headers,
                body: Array(#"{"Phone":"+49 555 0100"}"#.utf8)), timeout: 30)
        guard patched.status < 300 else {
            throw CLIFailure("the backend refused the demo's change (\(patched.status))")
        }
        print("  backend: BusinessPartners('BP1') Phone = '+49 555 0100' (made directly, not through a gateway)")
        // The refresh target has not run out: the operator's "refresh now" reads the backend.
        let scope = try await one.gateway.store.scopeSummaries().first { $0.query == "BusinessPartners" }
        await journal.clear()
        if let scope, let outcome = try await one.gateway.refreshNow(scope: scope.id) {
            print(
                "  admin API: refresh scope \(scope.id) now → \(outcome.outcome), \(outcome.changed ?? 0) row changed")
        }
        for (name, provider) in [("A", first), ("B", second)] {
            try await provider.download()
            let phone = try await provider.readEntities("BusinessPartners('BP1')").first?.string("Phone") ?? "?"
            print("  device \(name) downloads (a delta from PostgreSQL): BP1 Phone = '\(phone)'")
        }
        let later = await journal.requests().filter { $0.hasPrefix("GET BusinessPartners") }
        for read in later { print("    backend saw: \(read)") }
        print("  one backend read for the change; both downloads were answered from PostgreSQL")

        heading("4. What the operator sees")
        let devices = try await one.gateway.store.devices()
        print(
            "  devices seen: \(devices.count) (by Client-Instance-ID, app version '\(devices.first?.appVersion ?? "-")')"
        )
        for summary in try await one.gateway.store.scopeSummaries() {
            print(
                "  scope \(summary.id) \(summary.query): \(summary.rows ?? 0) rows, user \(summary.user), lag "
                    + String(format: "%.1f s", summary.lagSeconds ?? 0))
        }
        let ready = await two.gateway.readiness()
        print("  gateway B /readyz: \(ready.ready ? "ready" : "not ready: \(ready.reason ?? "")")")
        print(
            "  try it: oodata gateway status --admin http://127.0.0.1:PORT (docs/gateway.md, \"Operating the gateway\")"
        )
        await first.close()
        await second.close()
        await one.stop()
        await two.stop()
        print("\ndone in " + String(format: "%.1f s", Date().timeIntervalSince(started)))
    }

    static func heading(_ text: String) { print("\n" + text) }
}
