import ArgumentParser
import Foundation
import Logging
import ODataGateway

/// `oodata gateway`: the sync gateway in front of an OData backend (SPEC §13).
struct GatewayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gateway",
        abstract: "Run the sync gateway: deltas for any OData backend, from PostgreSQL (docs/gateway.md).",
        discussion: """
            Devices use the gateway's URL as their service root. Defining queries (collection reads with \
            Prefer: odata.track-changes) are refreshed from the backend once per scope and answered from \
            PostgreSQL with delta links; every other request goes to the backend with the device's credentials. \
            Any number of gateways may share one PostgreSQL database.
            """)

    @Option(help: "The backend's service root, served at the gateway's root.") var backend: String
    @Option(help: ArgumentHelp("PostgreSQL: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (or ?host=/socket/dir).",
                               valueName: "URL")) var postgres: String
    @Option(help: "Port to listen on.") var port = 8090
    @Option(help: "Address to listen on (loopback unless you say otherwise).") var host = "127.0.0.1"
    @Option(help: ArgumentHelp("Seconds within which devices are answered from the last refresh; 0 refreshes at "
                               + "each request (requests arriving together share one backend read).",
                               valueName: "SECONDS")) var refreshInterval: Double = 0
    @Option(help: ArgumentHelp("A defining query whose data is the same for every user (an entity set); repeatable.",
                               valueName: "QUERY")) var shared: [String] = []
    @Option(help: ArgumentHelp("The Authorization header value the gateway sends for shared data.", valueName: "VALUE"))
    var sharedAuthorization: String?
    @Option(help: ArgumentHelp("Delta tracking: AUTO, ALWAYS or NEVER (pass the backend's delta links through).",
                               valueName: "MODE")) var trackDeltas = "AUTO"
    @Option(help: "Rows per page answered to devices.") var pageSize = 1000
    @Option(help: ArgumentHelp("Seconds deletions are kept; older delta tokens get 410.", valueName: "SECONDS"))
    var retention: Double = 7 * 24 * 3600
    @Option(help: ArgumentHelp("Log to standard error from this level (info logs each refresh).", valueName: "LEVEL"))
    var logLevel = "info"

    func run() async throws {
        guard let url = URL(string: backend), url.scheme == "http" || url.scheme == "https", url.host != nil else {
            throw CLIFailure("--backend \(backend): give the backend's service root as an http(s) URL")
        }
        guard let tracking = DeltaTracking(rawValue: trackDeltas.uppercased()) else {
            throw CLIFailure("--track-deltas \(trackDeltas): use AUTO, ALWAYS or NEVER")
        }
        guard refreshInterval >= 0, retention > 0, pageSize > 0 else {
            throw CLIFailure("--refresh-interval must be 0 or more; --retention and --page-size more than 0")
        }
        do {
            _ = try PostgresURL.configuration(postgres)
        } catch {
            throw CLIFailure("--postgres: \(error)")
        }
        var served = GatewayBackend(url: backend)
        served.trackDeltas = tracking
        served.sharedQueries = Set(shared)
        served.sharedAuthorization = sharedAuthorization
        var configuration = GatewayConfiguration(backends: [served])
        configuration.refreshInterval = refreshInterval
        configuration.tombstoneRetention = retention
        configuration.pageSize = pageSize
        let logger = try standardErrorLogger(level: logLevel)
        let host = self.host
        let backendURL = served.url
        let running: RunningGateway
        do {
            running = try await RunningGateway.start(
                configuration: configuration, postgresURL: postgres, host: host, port: port, logger: logger
            ) { port in
                FileHandle.standardOutput.write(Data("gateway: http://\(host):\(port)/ → \(backendURL)\n".utf8))
            }
        } catch {
            throw CLIFailure("the gateway cannot start: \(error)")
        }
        try await running.wait()
    }
}
