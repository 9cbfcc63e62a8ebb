import ArgumentParser
import Foundation
import Logging
import ODataGateway

/// `oodata gateway`: the sync gateway in front of an OData backend (SPEC §13), and the tools
/// its operator uses (`status`).
struct GatewayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gateway",
        abstract: "The sync gateway: run it (the default), or look at a running one (docs/gateway.md).",
        subcommands: [GatewayRunCommand.self, GatewayStatusCommand.self, GatewayDiagnoseCommand.self],
        defaultSubcommand: GatewayRunCommand.self)
}

/// `oodata gateway [run]`: serves devices.
struct GatewayRunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run the sync gateway: deltas for any OData backend, from PostgreSQL (docs/gateway.md).",
        discussion: """
            Devices use the gateway's URL as their service root. Defining queries (collection reads with \
            Prefer: odata.track-changes) are refreshed from the backend once per scope and answered from \
            PostgreSQL with delta links; every other request goes to the backend with the device's credentials. \
            Any number of gateways may share one PostgreSQL database.
            """)

    @Option(help: "The backend's service root, served at the gateway's root (or give --config).") var backend: String?
    @Option(
        help: ArgumentHelp(
            "An INI file shaped like SAP's application configuration: [endpoint] and "
                + "[defining_query] sections (docs/gateway.md). Flags override it.", valueName: "FILE"))
    var config: String?
    @Option(
        help: ArgumentHelp(
            "PostgreSQL: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (or ?host=/socket/dir).",
            valueName: "URL")) var postgres: String
    @Option(help: "Port to listen on.") var port = 8090
    @Option(help: "Address to listen on (loopback unless you say otherwise).") var host = "127.0.0.1"
    @Option(
        help: ArgumentHelp(
            "Serve the admin API and page on this port; needs --admin-token, $OODATA_ADMIN_TOKEN or an [admin] "
                + "section in --config.", valueName: "PORT")) var adminPort: Int?
    @Option(help: "Address the admin port listens on.") var adminHost = "127.0.0.1"
    @Option(
        help: ArgumentHelp(
            "The admin API's bearer token, at least 16 characters (prefer $OODATA_ADMIN_TOKEN: a command line is "
                + "visible to other users). A file's [admin] token= must be the same.", valueName: "TOKEN"))
    var adminToken: String?
    @Option(
        help: ArgumentHelp(
            "Each scope's refresh target, seconds (default 60): devices are answered from PostgreSQL "
                + "while the last refresh began within it, and the refresher refreshes scopes before it "
                + "runs out; uploads are written through. 0 refreshes at each request.",
            valueName: "SECONDS")) var refreshInterval: Double?
    @Option(
        help: ArgumentHelp(
            "Seconds PostgreSQL has to answer a statement (default 10); then the request gets 503 with "
                + "Retry-After, and at start the gateway stops naming the server.",
            valueName: "SECONDS")) var postgresTimeout: Double?
    @Option(
        help: ArgumentHelp(
            "Seconds a device's $metadata check is answered from the document the gateway read last "
                + "(default 60); 0 forwards every check to the backend.",
            valueName: "SECONDS")) var metadataCheckInterval: Double?
    @Option(
        help: ArgumentHelp(
            "A defining query whose data is the same for every user (an entity set); repeatable.",
            valueName: "QUERY")) var shared: [String] = []
    @Option(help: ArgumentHelp("The Authorization header value the gateway sends for shared data.", valueName: "VALUE"))
    var sharedAuthorization: String?
    @Option(
        help: ArgumentHelp(
            "Verify JWT bearer tokens of this issuer (iss): a device's identity is then (iss, sub). Needs "
                + "--jwt-audience and --jwt-jwks or --jwt-hs-secret.", valueName: "ISSUER")) var jwtIssuer: String?
    @Option(help: ArgumentHelp("The aud verified JWTs must name.", valueName: "AUDIENCE")) var jwtAudience: String?
    @Option(help: ArgumentHelp("The issuer's keys: a JWKS file or http(s) URL.", valueName: "FILE-OR-URL"))
    var jwtJwks: String?
    @Option(help: ArgumentHelp("The issuer's HS256 secret.", valueName: "SECRET")) var jwtHsSecret: String?
    @Option(
        help: ArgumentHelp(
            "Delta tracking: AUTO (the default: the backend's own delta links where it gives "
                + "them, the gateway's tracking otherwise), ALWAYS (the gateway's tracking) or NEVER (pass "
                + "reads and the backend's delta links through).", valueName: "MODE")) var trackDeltas: String?
    @Option(help: "Rows per page answered to devices.") var pageSize = 1000
    @Option(
        help: ArgumentHelp(
            "Seconds deletions are kept; older delta tokens get 410 (default 7 days).",
            valueName: "SECONDS")) var retention: Double?
    @Option(
        help: ArgumentHelp(
            "Seconds a scope no device reads is kept before it goes with its rows (default 30 "
                + "days).", valueName: "SECONDS")) var scopeRetention: Double?
    @Option(
        help: ArgumentHelp(
            "Seconds the answers of uploaded requests are kept for repeats (default 7 days); an "
                + "older repeat is refused, never applied again.", valueName: "SECONDS"))
    var requestRetention: Double?
    @Option(
        help: ArgumentHelp(
            "Seconds after forwarding a request before reading the backend may conclude that it "
                + "was not applied, when its answer was lost (default 120: as long as the backend may "
                + "take on a request).", valueName: "SECONDS")) var inDoubtAfter: Double?
    @Flag(
        help: "The backend has no $batch: the requests of a device's $batch go to it one by one, each recorded.")
    var backendWithoutBatch = false
    @Option(
        help: ArgumentHelp(
            "Store files for first opens (prepopulate_offline_db): Y (shared and user data), SHARED-ONLY, "
                + "or N (none; the default). Overrides the configuration file.", valueName: "MODE"))
    var prepopulate: String?
    @Option(
        help: ArgumentHelp(
            "Seconds a store file of shared data is reused before it is built again (default a day).",
            valueName: "SECONDS")) var prepopulateInterval: Double?
    @Option(
        help: ArgumentHelp(
            "Requests one device (by its Client-Instance-ID) may make: N/s, N/min or N/h, optionally ,burst=M; "
                + "429 with Retry-After beyond. Overrides the configuration file's throttle_device.",
            valueName: "RATE")) var throttleDevice: String?
    @Option(
        help: ArgumentHelp(
            "Requests one user's devices may make together (the same form). Overrides throttle_user.",
            valueName: "RATE")) var throttleUser: String?
    @Option(help: ArgumentHelp("Log to standard error from this level (info logs each refresh).", valueName: "LEVEL"))
    var logLevel = "info"

    /// The configuration the file and the flags give (read again at each reload).
    func makeConfiguration() throws -> GatewayConfiguration {
        var configuration: GatewayConfiguration
        if let config {
            let text: String
            let data: Data
            do {
                data = try Data(contentsOf: URL(fileURLWithPath: config))
            } catch {
                throw CLIFailure("--config \(config): cannot read it (\(error.localizedDescription))")
            }
            guard let decoded = String(data: data, encoding: .utf8) else {
                throw CLIFailure("--config \(config): the file is not UTF-8 text")
            }
            text = decoded
            do {
                let (parsed, warnings) = try GatewayConfiguration.parse(ini: text)
                for warning in warnings { FileHandle.standardError.write(Data("oodata: \(config): \(warning)\n".utf8)) }
                configuration = parsed
            } catch {
                throw CLIFailure("--config \(config): \(error)")
            }
        } else {
            configuration = GatewayConfiguration(backends: [])
        }
        if let backend {
            guard let url = URL(string: backend), url.scheme == "http" || url.scheme == "https", url.host != nil else {
                throw CLIFailure("--backend \(backend): give the backend's service root as an http(s) URL")
            }
            configuration.backends.removeAll { $0.name.isEmpty }
            configuration.backends.append(GatewayBackend(url: backend))
        }
        guard !configuration.backends.isEmpty else { throw CLIFailure("give --backend URL or --config FILE") }
        if let prepopulate {
            guard let mode = Prepopulate(rawValue: prepopulate.uppercased()) else {
                throw CLIFailure("--prepopulate \(prepopulate): use Y, SHARED-ONLY or N")
            }
            for index in configuration.backends.indices { configuration.backends[index].prepopulate = mode }
        }
        guard (prepopulateInterval ?? 0) >= 0 else { throw CLIFailure("--prepopulate-interval must be 0 or more") }
        if let trackDeltas {
            guard let tracking = DeltaTracking(rawValue: trackDeltas.uppercased()) else {
                throw CLIFailure("--track-deltas \(trackDeltas): use AUTO, ALWAYS or NEVER")
            }
            for index in configuration.backends.indices { configuration.backends[index].trackDeltas = tracking }
        }
        if let jwtIssuer {
            guard let jwtAudience, jwtJwks != nil || jwtHsSecret != nil else {
                throw CLIFailure("--jwt-issuer needs --jwt-audience and --jwt-jwks or --jwt-hs-secret")
            }
            for index in configuration.backends.indices {
                configuration.backends[index].jwtVerification = [
                    JWTVerification(issuer: jwtIssuer, audience: jwtAudience, jwks: jwtJwks, hmacSecret: jwtHsSecret)
                ]
            }
        } else if jwtAudience != nil || jwtJwks != nil || jwtHsSecret != nil {
            throw CLIFailure("--jwt-audience, --jwt-jwks and --jwt-hs-secret need --jwt-issuer")
        }
        for index in configuration.backends.indices {
            configuration.backends[index].sharedQueries.formUnion(shared)
            if let sharedAuthorization { configuration.backends[index].sharedAuthorization = sharedAuthorization }
            if backendWithoutBatch { configuration.backends[index].supportsBatch = false }
            if let prepopulateInterval { configuration.backends[index].prepopulateInterval = prepopulateInterval }
        }
        for (flag, text, path) in [
            ("--throttle-device", throttleDevice, \GatewayBackend.deviceThrottle),
            ("--throttle-user", throttleUser, \GatewayBackend.userThrottle),
        ] {
            guard let text else { continue }
            do {
                let rate = try ThrottleRate(parsing: text)
                for index in configuration.backends.indices { configuration.backends[index][keyPath: path] = rate }
            } catch {
                throw CLIFailure("\(flag) \(text): \(error.message)")
            }
        }
        guard (refreshInterval ?? 0) >= 0, (inDoubtAfter ?? 0) >= 0, (retention ?? 1) > 0, (scopeRetention ?? 1) > 0,
            (requestRetention ?? 1) > 0, pageSize > 0
        else {
            throw CLIFailure(
                "--refresh-interval and --in-doubt-after must be 0 or more; --retention, --scope-retention, "
                    + "--request-retention and --page-size more than 0")
        }
        if let refreshInterval { configuration.refreshInterval = refreshInterval }
        if let postgresTimeout {
            guard postgresTimeout > 0 else { throw CLIFailure("--postgres-timeout must be more than 0") }
            configuration.postgresTimeout = postgresTimeout
        }
        if let metadataCheckInterval {
            guard metadataCheckInterval >= 0 else { throw CLIFailure("--metadata-check-interval must be 0 or more") }
            configuration.metadataCheckInterval = metadataCheckInterval
        }
        if let retention { configuration.tombstoneRetention = retention }
        if let scopeRetention { configuration.scopeRetention = scopeRetention }
        if let inDoubtAfter { configuration.inDoubtAfter = inDoubtAfter }
        if let requestRetention { configuration.requestRetention = requestRetention }
        configuration.pageSize = pageSize
        if let token = adminToken ?? ProcessInfo.processInfo.environment["OODATA_ADMIN_TOKEN"] {
            var access = configuration.admin ?? GatewayAdminAccess()
            // Two tokens would leave one silently unused (and a token rotated in the file would
            // not take on a reload, the flag still winning): one place only.
            if let filed = access.token, filed != token {
                throw CLIFailure(
                    "--admin-token or $OODATA_ADMIN_TOKEN and [admin] token= in --config give different admin "
                        + "tokens: keep one")
            }
            access.token = token
            if let problem = access.problem {
                throw CLIFailure("\(adminToken != nil ? "--admin-token" : "$OODATA_ADMIN_TOKEN"): \(problem)")
            }
            configuration.admin = access
        }
        if adminPort != nil, configuration.admin == nil {
            throw CLIFailure(
                "--admin-port needs credentials: --admin-token, $OODATA_ADMIN_TOKEN, or an [admin] section in --config")
        }
        return configuration
    }

    func run() async throws {
        let configuration = try makeConfiguration()
        do {
            _ = try PostgresURL.configuration(postgres)
        } catch {
            throw CLIFailure("--postgres: \(error)")
        }
        let logger = try standardErrorLogger(level: logLevel)
        let host = self.host
        let served = configuration.backends.map { ($0.name.isEmpty ? "/" : "/\($0.name)/") + " → " + $0.url }
        let running: RunningGateway
        do {
            running = try await RunningGateway.start(
                configuration: configuration, postgresURL: postgres, host: host, port: port, adminPort: adminPort,
                adminHost: adminHost, logger: logger, reloadSource: { [self] in try self.makeConfiguration() }
            ) { port in
                let lines = served.map { "gateway: http://\(host):\(port)\($0)\n" }.joined()
                FileHandle.standardOutput.write(Data(lines.utf8))
            }
        } catch let error as GatewayError {
            throw CLIFailure("the gateway cannot start: \(error.message)")
        } catch {
            throw CLIFailure("the gateway cannot start: \(error)")
        }
        if let admin = running.adminPort {
            FileHandle.standardOutput.write(Data("gateway admin: http://\(adminHost):\(admin)/\n".utf8))
        }
        // SIGHUP: the file and flags read again, checked whole; refused with the line and reason
        // (on standard error and in the log), the running configuration staying.
        signal(SIGHUP, SIG_IGN)
        let hangUp = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        let gateway = running.gateway
        hangUp.setEventHandler {
            let outcome = gateway.reloadFromSource()
            let line =
                outcome.applied
                ? "gateway: configuration reloaded (changed: \(outcome.changed.joined(separator: ", ")))\n"
                : "gateway: configuration reload refused: \(outcome.error ?? "?")\n"
            FileHandle.standardError.write(Data(line.utf8))
        }
        hangUp.resume()
        defer { hangUp.cancel() }
        try await running.wait()
    }
}
