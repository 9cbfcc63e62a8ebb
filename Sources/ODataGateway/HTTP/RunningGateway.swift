public import Foundation
import Hummingbird
public import Logging
public import OfflineOData
public import PostgresNIO
import Prometheus
import ServiceLifecycle

/// A gateway running in this process: its PostgreSQL connections and its HTTP server, for
/// `oodata gateway`, tests and app servers that embed it.
public final class RunningGateway: Sendable {
    /// The port the gateway listens on.
    public let port: Int
    /// The port of the admin API, when it was asked for.
    public let adminPort: Int?
    /// The gateway behind the server.
    public let gateway: Gateway
    private let task: Task<Void, any Error>
    private let group: ServiceGroup

    private init(port: Int, adminPort: Int?, gateway: Gateway, task: Task<Void, any Error>, group: ServiceGroup) {
        self.port = port
        self.adminPort = adminPort
        self.gateway = gateway
        self.task = task
        self.group = group
    }

    /// The gateway's URL of the backend served at the root.
    public var root: URL { URL(string: "http://127.0.0.1:\(port)/") ?? URL(fileURLWithPath: "/") }

    /// Connects to PostgreSQL, creates the gateway's tables when missing, and serves
    /// `configuration` on `host`:`port` (0: a free port), and its admin API on `adminPort`
    /// (nil: none; 0: a free one) of `adminHost`, which needs ``GatewayConfiguration/admin``.
    /// A PostgreSQL that cannot be used is named within ``GatewayConfiguration/postgresTimeout``
    /// (at most 10 s), with the server's message.
    public static func start(
        configuration: GatewayConfiguration, postgres: PostgresClient.Configuration, host: String = "127.0.0.1",
        port: Int = 0, adminPort: Int? = nil, adminHost: String = "127.0.0.1",
        transport: any Transport = DefaultTransport.make(),
        logger: Logger = Logger(label: "oodata.gateway"),
        reloadSource: (@Sendable () throws -> GatewayConfiguration)? = nil,
        onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) async throws -> RunningGateway {
        for (name, value) in [("port", port), ("admin port", adminPort ?? 0)] where !(0...65535).contains(value) {
            throw GatewayError(status: 400, code: "Configuration", "\(name) \(value) is not a TCP port (0-65535)")
        }
        if adminPort != nil {
            guard let access = configuration.admin else {
                throw GatewayError(
                    status: 400, code: "Configuration",
                    "the admin port needs credentials: an [admin] section with token= (or user= and password=), "
                        + "or --admin-token")
            }
            if let problem = access.problem {
                throw GatewayError(status: 400, code: "Configuration", "admin access: \(problem)")
            }
        }
        do {
            try configuration.validate()
        } catch {
            throw GatewayError(status: 500, code: "Configuration", error.message)
        }
        let quiet = {
            var logger = Logger(label: "oodata.gateway.lifecycle")
            logger.logLevel = .critical
            return logger
        }()
        // One connection by hand first: the server's own words within seconds, not a pool's
        // circuit breaker a minute later.
        try await PostgresProbe.check(postgres, seconds: min(configuration.postgresTimeout, 10))
        let client = PostgresClient(configuration: postgres, backgroundLogger: quiet)
        let store = GatewayStore(
            client: client, logger: quiet, deadline: configuration.postgresTimeout,
            server: DeadlineClient.describe(postgres))
        // Its own registry (no process-wide bootstrap), served at /metrics.
        let registry = PrometheusCollectorRegistry()
        let gateway = Gateway(
            configuration: configuration, store: store, transport: transport, logger: logger,
            metrics: GatewayMetrics(factory: PrometheusMetricsFactory(registry: registry)), reloadSource: reloadSource)
        let waiter = PortWaiter()
        let adminWaiter = PortWaiter()
        let migrated = MigrationGate()
        var group = ServiceGroupConfiguration(services: [client], logger: quiet)
        group.maximumGracefulShutdownDuration = .seconds(2)
        let clients = ServiceGroup(configuration: group)
        // PostgreSQL first: the tables must exist before the first request.
        let task = Task {
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await clients.run() }
                tasks.addTask {
                    do {
                        try await store.migrate()
                        await gateway.operations.setMigrated()
                        GatewayIdentities.warnUnverified(configuration, logger: gateway.logger)
                        await migrated.open(nil)
                    } catch {
                        await migrated.open(error)
                        throw error
                    }
                    let app = GatewayHTTPServer.application(
                        gateway: gateway, host: host, port: port, logger: quiet,
                        metrics: registry
                    ) {
                        port in await waiter.set(port)
                    }
                    var services: [any Service] = [app]
                    if let adminPort, configuration.admin != nil {
                        services.append(
                            GatewayAdminServer.application(
                                gateway: gateway, host: adminHost, port: adminPort, logger: quiet,
                                metrics: registry
                            ) { port in await adminWaiter.set(port) })
                    }
                    var configuration = ServiceGroupConfiguration(services: services, logger: quiet)
                    configuration.maximumGracefulShutdownDuration = .seconds(2)
                    // Refreshes off the request path, for as long as the server runs.
                    let refresher = Task { await gateway.runRefresher() }
                    defer { refresher.cancel() }
                    do {
                        try await ServiceGroup(configuration: configuration).run()
                    } catch {
                        // A port that cannot be bound: start() says so instead of waiting.
                        await waiter.fail(error)
                        await adminWaiter.fail(error)
                        throw error
                    }
                }
                // The server ends first (a shutdown); then the connections go.
                try await tasks.next()
                await clients.triggerGracefulShutdown()
                try await tasks.waitForAll()
            }
        }
        if let error = await migrated.wait() {
            task.cancel()
            let reason = (error as? PostgresDeadlineExceeded)?.description ?? String(reflecting: error)
            throw GatewayError(
                status: 503, code: "PostgreSQL",
                "PostgreSQL (\(DeadlineClient.describe(postgres))) cannot be used: \(reason)")
        }
        let bound: Int
        do {
            bound = try await waiter.wait()
        } catch {
            task.cancel()
            throw GatewayError(status: 503, code: "Listen", "cannot listen on \(host):\(port): \(error)")
        }
        var boundAdmin: Int?
        if adminPort != nil {
            do {
                boundAdmin = try await adminWaiter.wait()
            } catch {
                task.cancel()
                throw GatewayError(
                    status: 503, code: "Listen", "cannot listen on \(adminHost):\(adminPort ?? 0) (admin): \(error)")
            }
        }
        await onListening(bound)
        return RunningGateway(port: bound, adminPort: boundAdmin, gateway: gateway, task: task, group: clients)
    }

    /// ``start(configuration:postgres:host:port:adminPort:adminHost:transport:logger:reloadSource:onListening:)`` with PostgreSQL
    /// named by a URL (see ``PostgresURL``).
    public static func start(
        configuration: GatewayConfiguration, postgresURL: String, host: String = "127.0.0.1", port: Int = 0,
        adminPort: Int? = nil, adminHost: String = "127.0.0.1",
        logger: Logger = Logger(label: "oodata.gateway"),
        reloadSource: (@Sendable () throws -> GatewayConfiguration)? = nil,
        onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) async throws -> RunningGateway {
        try await start(
            configuration: configuration, postgres: try PostgresURL.configuration(postgresURL), host: host,
            port: port, adminPort: adminPort, adminHost: adminHost, logger: logger, reloadSource: reloadSource,
            onListening: onListening)
    }

    /// Stops serving and closes the connections. Waits for that at most `patience` seconds: a
    /// request still running then (a long refresh whose device went away, waiting on a
    /// PostgreSQL connection that is closing) ends in the background, and `stop()` returns.
    public func stop(patience: Double = 10) async {
        await gateway.streams.cancelAll()
        task.cancel()
        let (ended, continuation) = AsyncStream<Void>.makeStream()
        let task = self.task
        Task {
            _ = await task.result
            continuation.finish()
        }
        Task {
            try? await Task.sleep(for: .milliseconds(Int64(patience * 1000)))
            continuation.finish()
        }
        for await _ in ended {}
    }

    /// Waits until the gateway stops (a signal, or a failure it throws).
    public func wait() async throws {
        try await task.value
    }
}

/// Waits for the port the server bound.
actor PortWaiter {
    private var result: Result<Int, any Error>?
    private var waiting: [CheckedContinuation<Int, any Error>] = []

    func set(_ value: Int) { finish(.success(value)) }

    func fail(_ error: any Error) { finish(.failure(error)) }

    private func finish(_ outcome: Result<Int, any Error>) {
        guard result == nil else { return }
        result = outcome
        for continuation in waiting { continuation.resume(with: outcome) }
        waiting = []
    }

    func wait() async throws -> Int {
        if let result { return try result.get() }
        return try await withCheckedThrowingContinuation { waiting.append($0) }
    }
}

/// Opens once the tables exist (or creating them failed).
actor MigrationGate {
    private var result: (any Error)??
    private var waiting: [CheckedContinuation<(any Error)?, Never>] = []

    func open(_ error: (any Error)?) {
        result = .some(error)
        for continuation in waiting { continuation.resume(returning: error) }
        waiting = []
    }

    func wait() async -> (any Error)? {
        if let result { return result }
        return await withCheckedContinuation { waiting.append($0) }
    }
}

/// PostgreSQL connection settings from a URL.
public enum PostgresURL {
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`, or with `?host=/socket/folder` for a
    /// Unix socket. TLS is not offered yet: `sslmode` other than `disable` is refused.
    public static func configuration(_ text: String) throws -> PostgresClient.Configuration {
        // Never the password in an error: these go to terminals and logs.
        let shown = GatewayRecentLog.masked(text)
        func refuse(_ message: String) -> GatewayError {
            GatewayError(status: 400, code: "BadPostgresURL", "'\(shown)': \(message)")
        }
        guard let components = URLComponents(string: text),
            components.scheme == "postgres" || components.scheme == "postgresql"
        else {
            throw refuse("not a postgres://USER@HOST:PORT/DATABASE URL")
        }
        let user = components.user ?? "postgres"
        let password = components.password
        let database = components.path.isEmpty || components.path == "/" ? user : String(components.path.dropFirst())
        let items = components.queryItems ?? []
        if let unknown = items.first(where: { !["host", "port", "sslmode"].contains($0.name) }) {
            throw refuse("'\(unknown.name)' is not a setting the gateway takes (host, port, sslmode)")
        }
        if let mode = items.first(where: { $0.name == "sslmode" })?.value, mode != "disable" {
            throw refuse("sslmode=\(mode): TLS to PostgreSQL is not supported yet; use sslmode=disable")
        }
        var port = components.port ?? 5432
        if let given = items.first(where: { $0.name == "port" })?.value {
            guard let value = Int(given), components.port == nil || components.port == value else {
                throw refuse("port=\(given) is no port, or another one than the URL's")
            }
            port = value
        }
        guard (1...65535).contains(port) else { throw refuse("port \(port) is outside 1-65535") }
        var configuration: PostgresClient.Configuration
        if let socketFolder = items.first(where: { $0.name == "host" })?.value {
            guard socketFolder.hasPrefix("/") else {
                throw refuse("host=\(socketFolder) is no socket folder (an absolute path, such as /var/run/postgresql)")
            }
            configuration = .init(
                unixSocketPath: socketFolder + "/.s.PGSQL.\(port)", username: user, password: password,
                database: database)
        } else {
            guard let host = components.host, !host.isEmpty else {
                throw refuse("no host: give postgres://USER@HOST:PORT/DATABASE or ?host=/socket/folder")
            }
            configuration = .init(
                host: host, port: port, username: user, password: password, database: database, tls: .disable)
        }
        configuration.options.maximumConnections = 40
        return configuration
    }
}
