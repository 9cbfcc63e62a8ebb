public import Foundation
import Hummingbird
import Logging
import ServiceLifecycle
import ODataCore
import ODataStore

/// The reference server running inside the current process on a free loopback port: for
/// tests, the demo, and apps that want a backend to try things against.
public final class EmbeddedServer: Sendable {
    /// The port the server listens on.
    public let port: Int
    /// The service behind the server (its fault injector can be changed while it runs).
    public let service: ODataService
    private let task: Task<Void, any Error>
    private let group: ServiceGroup
    /// Whether the server made its service's store (``sales(at:scale:pageSize:faults:supportDirectory:configure:)``)
    /// and closes it when it stops; a service passed to ``start(_:)`` stays open for its owner.
    private let ownsStore: Bool
    /// Whether ``stop()`` was called (a second call returns at once).
    private let stopped = Locked(false)

    private init(port: Int, service: ODataService, task: Task<Void, any Error>, group: ServiceGroup, ownsStore: Bool) {
        self.port = port
        self.service = service
        self.task = task
        self.group = group
        self.ownsStore = ownsStore
    }

    /// The V4 service root, `http://127.0.0.1:PORT/odata/v4/`.
    public var v4Root: URL { URL(string: "http://127.0.0.1:\(port)/odata/v4/") ?? URL(fileURLWithPath: "/") }
    /// The V2 service root, `http://127.0.0.1:PORT/odata/v2/`.
    public var v2Root: URL { URL(string: "http://127.0.0.1:\(port)/odata/v2/") ?? URL(fileURLWithPath: "/") }

    /// Starts `service` on 127.0.0.1 with a port chosen by the system, or on `port` (a
    /// restarted backend keeps its service root).
    public static func start(_ service: ODataService, port: Int = 0) async throws -> EmbeddedServer {
        try await start(service, ownsStore: false, port: port)
    }

    /// Starts `service` on `host` (an address of this machine: a test network's, say) with a
    /// port chosen by the system, or on `port`. ``v4Root`` and ``v2Root`` still name 127.0.0.1:
    /// callers on `host` write their own roots. `/_faults` is served on loopback only.
    public static func start(_ service: ODataService, host: String, port: Int = 0) async throws -> EmbeddedServer {
        try await start(service, ownsStore: false, host: host, port: port)
    }

    private static func start(_ service: ODataService, ownsStore: Bool, host: String = "127.0.0.1", port: Int = 0)
        async throws -> EmbeddedServer
    {
        let box = PortWaiter()
        var logger = Logger(label: "oodata.embedded")
        logger.logLevel = .critical
        let app = ODataHTTPServer.application(service: service, host: host, port: port, logger: logger) {
            port in await box.set(port)
        }
        // Stopped by a graceful shutdown, not by cancelling the task: a connection accepted while
        // the serving task is cancelled is never closed and traps in SwiftNIO
        // (apple/swift-nio#3481). Requests still running after 2 s are cancelled.
        var configuration = ServiceGroupConfiguration(services: [app], logger: logger)
        configuration.maximumGracefulShutdownDuration = .seconds(2)
        let group = ServiceGroup(configuration: configuration)
        let task = Task { try await group.run() }
        // A server that cannot start (its port is taken) ends without calling back.
        Task {
            let result = await task.result
            await box.fail(result.failure ?? StartFailure(message: "The server stopped before it listened"))
        }
        let port = try await box.wait()
        return EmbeddedServer(port: port, service: service, task: task, group: group, ownsStore: ownsStore)
    }

    /// Starts the sales sample in a new store file at `path` (replacing an old one);
    /// `configure` may change the service's options (credentials, CSRF protection, …).
    public static func sales(at path: String, scale: Int = 3, pageSize: Int = 100, faults: [FaultRule] = [],
                             supportDirectory: String? = nil,
                             configure: (inout ODataService.Options) -> Void = { _ in }) async throws -> EmbeddedServer {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        let store = try await Store.create(path: path, model: try SalesSample.model())
        var options = ODataService.Options()
        options.pageSize = pageSize
        options.serverGeneratedKeys = SalesSample.serverGeneratedKeys
        options.supportDirectory = supportDirectory
        configure(&options)
        let service = try await ODataService.open(store: store, options: options, faults: faults)
        try await service.load(SalesSample.data(scale: scale))
        return try await start(service, ownsStore: true)
    }

    /// Stops the server and waits until it has. A server that made its store closes it (the
    /// files stay): its open files do not outlive it.
    public func stop() async {
        let first = stopped.withLock { stopped in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        await group.triggerGracefulShutdown()
        _ = await task.result
        if ownsStore { service.store.close() }
    }
}

/// Why an embedded server did not start.
struct StartFailure: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

/// Hands the port from the start-up callback to `start`, or the error that kept the server
/// from starting.
private actor PortWaiter {
    private var port: Int?
    private var error: (any Error)?
    private var waiters: [CheckedContinuation<Int, any Error>] = []

    func set(_ value: Int) {
        guard port == nil, error == nil else { return }
        port = value
        for waiter in waiters { waiter.resume(returning: value) }
        waiters = []
    }

    /// The server ended (or failed to start); a start still waiting throws `error`.
    func fail(_ error: any Error) {
        guard port == nil, self.error == nil else { return }
        self.error = error
        for waiter in waiters { waiter.resume(throwing: error) }
        waiters = []
    }

    func wait() async throws -> Int {
        if let port { return port }
        if let error { throw error }
        return try await withCheckedThrowingContinuation { waiters.append($0) }
    }
}
