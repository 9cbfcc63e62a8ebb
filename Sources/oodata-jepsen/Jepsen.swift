import ArgumentParser
import Foundation
import ODataCore
import ODataServer
import ODataStore
import OfflineOData

#if canImport(Glibc)
    import Glibc
#endif

/// `oodata-jepsen`: many devices, several gateway instances on one PostgreSQL and a backend,
/// under faults; then checkers over the devices' histories (docs/reliability.md).
@main
struct Jepsen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "oodata-jepsen",
        abstract: "A Jepsen-style test of devices, gateways, PostgreSQL and a backend under faults.",
        subcommands: [Run.self, Device.self],
        defaultSubcommand: Run.self)
}

/// The faults the nemesis knows.
enum Fault: String, CaseIterable {
    case killGateway = "kill-gateway"
    case killDevice = "kill-device"
    case pauseGateway = "pause-gateway"
    case postgresFast = "postgres-fast"
    case postgresImmediate = "postgres-immediate"
    case lostAnswers = "lost-answers"
    case partitionDevices = "partition-devices"
    case partitionBackend = "partition-backend"

    var needsNamespaces: Bool { self == .partitionDevices || self == .partitionBackend }
}

/// Bugs the run can plant, each for the checker that must catch it.
enum Plant: String, CaseIterable, ExpressibleByArgument {
    /// An acknowledged create removed from the backend behind everyone's back.
    case lost
    /// A contact created twice on the backend.
    case duplicate
    /// An own entity's older value written back on the backend during the run.
    case stale
    /// A row removed from a device's store after the final download.
    case diverge
    /// The partition of the devices never heals.
    case hang
    /// The gateways refresh at every request (the checker expects the refresh interval).
    case refresh
}

extension Jepsen {
    struct Device: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One device (started by run).", shouldDisplay: false)
        @Option var index: Int
        @Option var root: String
        @Option var folder: String
        @Option var seed: UInt64
        @Option var until: Double
        @Option var quietBound: Double
        @Option var plant: String?
        @Flag var noChecksums = false

        func run() async throws {
            let device = DeviceRun(
                index: index, root: root, folder: folder, seed: seed, until: until, quietBound: quietBound,
                plant: plant,
                checksums: !noChecksums)
            try await device.main()
        }
    }

    struct Run: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run devices, gateways and faults; check the histories.")
        @Option(help: "Devices (processes, each with its own store).") var devices = 16
        @Option(help: "Gateway instances on one PostgreSQL.") var gateways = 3
        @Option(help: "Minutes of operations and faults (then a quiet phase).") var minutes = 5.0
        @Option(help: "Seed of the operations and the faults.") var seed: UInt64 = 1
        @Option(help: "plain: a backend without deltas, ETags and repeatability; full: with them.") var backend =
            "plain"
        @Option(help: "v4 or v2.") var odata = "v4"
        @Option(help: "The gateways' refresh interval, seconds.") var refreshInterval = 4.0
        @Option(help: "Seconds within which queues must drain after the faults heal.") var liveness = 120.0
        @Option(help: "Faults, comma-separated (default all): \(Fault.allCases.map(\.rawValue).joined(separator: ","))")
        var faults: String?
        @Option(help: "A planted bug: \(Plant.allCases.map(\.rawValue).joined(separator: ", ")).") var plant: Plant?
        @Flag(help: "Devices do not compare scope checksums.") var noChecksums = false
        @Option(help: "Folder of the run's histories and logs (default: a new one under /tmp).") var out: String?
        @Flag(help: "Keep the folder when every checker passes.") var keep = false
        @Option(help: "Append the run's verdicts as a JSON line to this file.") var results: String?
        @Flag(help: "Fail the run unless every fault selected was applied at least once.") var everyFault = false
        @Flag(help: "Stop when no network namespaces can be made (no partitions), instead of going on.")
        var requirePartitions = false
        @Option(
            help: ArgumentHelp(
                "Checkers whose failure is known (printed as KNOWN, not failing the run; a pass is said).",
                valueName: "CHECKERS")) var known: String?

        func run() async throws {
            signal(SIGPIPE, SIG_IGN)
            let folder = out ?? NSTemporaryDirectory() + "oodata-jepsen-\(seed)-\(getpid())"
            try? FileManager.default.removeItem(atPath: folder)
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            guard backend == "plain" || backend == "full", odata == "v4" || odata == "v2" else {
                throw ValidationError("--backend plain|full, --odata v4|v2")
            }
            var selected = Fault.allCases
            if let faults {
                selected = try faults.split(separator: ",").map {
                    guard let fault = Fault(rawValue: String($0)) else { throw ValidationError("unknown fault \($0)") }
                    return fault
                }
            }
            var controller: Controller
            do {
                controller = try await Controller(run: self, folder: folder, faults: selected)
            } catch {
                print("jepsen: the run could not start: \(error) (logs in \(folder))")
                throw ExitCode(2)
            }
            let passed: Bool
            do {
                passed = try await controller.go()
            } catch {
                await controller.tearDown()
                print("jepsen: the run failed before its checkers: \(error) (logs in \(folder))")
                throw ExitCode(2)
            }
            await controller.tearDown()
            if passed && !keep && out == nil { try? FileManager.default.removeItem(atPath: folder) }
            if !passed {
                print("jepsen: histories and logs in \(folder)")
                throw ExitCode(1)
            }
        }
    }
}

/// Starts everything, runs the nemesis, heals, waits for the quiet phase, and checks.
struct Controller {
    let run: Jepsen.Run
    let folder: String
    let faults: [Fault]
    let network: Network
    let networkNote: String?
    let postgres: Postgres
    let backend: EmbeddedServer
    let backendRoot: String
    let relay: Relay
    var gateways: [Child] = []
    var devices: [Child] = []
    var nemesis: [NemesisEvent] = []
    /// Exits of devices and gateways that no fault caused.
    var crashes: [String] = []
    var random: SeededRandom
    let transport = DefaultTransport.make()
    let started = now()
    var until: Double = 0
    /// The business partners before any device ran.
    var original: [String: String] = [:]

    init(run: Jepsen.Run, folder: String, faults: [Fault]) async throws {
        self.run = run
        self.folder = folder
        random = SeededRandom(seed: run.seed)
        let (network, networkNote) = Network.make(folder: folder)
        self.network = network
        self.networkNote = networkNote
        if run.requirePartitions && !network.isolated {
            throw JepsenFailure("partitions are required, but no network namespaces: \(networkNote ?? "")")
        }
        self.faults = network.isolated ? faults : faults.filter { !$0.needsNamespaces }
        // What started is stopped again when a later part cannot start.
        var postgres: Postgres?
        var backend: EmbeddedServer?
        do {
            postgres = try Postgres.start(in: folder, host: network.postgresHost)
            let store = try await Store.create(path: folder + "/backend.sqlite", model: try SalesSample.model())
            var options = ODataService.Options()
            options.pageSize = 40
            options.serverGeneratedKeys = SalesSample.serverGeneratedKeys
            options.journalCapacity = 2_000_000
            if run.backend == "plain" {
                options.tracksChanges = false
                options.honorsRepeatableRequests = false
                options.sendsETags = false
                options.requireIfMatch = false
            }
            let service = try await ODataService.open(store: store, options: options)
            try await service.load(SalesSample.data(scale: 4))
            backend = try await EmbeddedServer.start(service, host: network.backendHost)
        } catch {
            if let backend { await backend.stop() }
            postgres?.stop()
            if network.isolated { Network.clean(folder: folder) }
            throw error
        }
        guard let postgres, let backend else { throw JepsenFailure("the backend did not start") }
        self.postgres = postgres
        self.backend = backend
        backendRoot = "http://\(network.backendHost):\(backend.port)/odata/\(run.odata)/"
        let ports = (0..<run.gateways).map { _ in freePort() }
        let gatewayHost = network.gatewayHost
        do {
            relay = try Relay(host: network.relayHost, targets: ports.map { (gatewayHost, $0) }, seed: run.seed)
        } catch {
            await backend.stop()
            postgres.stop()
            if network.isolated { Network.clean(folder: folder) }
            throw error
        }
        let tool = Self.sibling("oodata")
        for (index, port) in ports.enumerated() {
            var argv = [
                tool, "gateway", "--backend", backendRoot, "--postgres", postgres.url, "--host", network.gatewayHost,
                "--port", "\(port)", "--refresh-interval", run.plant == .refresh ? "0" : "\(run.refreshInterval)",
                "--in-doubt-after", "5", "--page-size", "50", "--log-level", "warning",
            ]
            if network.isolated { argv = ["ip", "netns", "exec", "oodj-g"] + argv }
            gateways.append(Child(name: "gateway \(index)", argv: argv, log: folder + "/gateway-\(index).log"))
        }
    }

    /// A program built beside this one.
    static func sibling(_ name: String) -> String {
        let me = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        return me.deletingLastPathComponent().appendingPathComponent(name).path
    }

    func say(_ text: String) {
        let line = String(format: "jepsen %6.1fs: ", now() - started) + text + "\n"
        FileHandle.standardOutput.write(Data(line.utf8))
    }

    func healthy(_ index: Int) async -> Bool {
        let url = "http://\(network.gatewayHost):\(relay.targetPort(index))/health"
        let answer = try? await transport.send(TransportRequest(method: "GET", url: url), timeout: 2)
        return answer?.status == 200
    }

    func startGateway(_ index: Int) async throws {
        try gateways[index].start()
        for _ in 0..<300 {
            if await healthy(index) { return }
            guard gateways[index].isRunning else { break }
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        throw JepsenFailure("gateway \(index) did not answer /health (log: \(gateways[index].log))")
    }

    mutating func go() async throws -> Bool {
        say(
            "\(run.devices) devices, \(run.gateways) gateways, \(run.minutes) min, seed \(run.seed), backend "
                + "\(run.backend) \(run.odata), faults \(faults.map(\.rawValue).joined(separator: ","))"
                + (run.plant.map { ", planted bug: \($0.rawValue)" } ?? "")
                + (networkNote.map { " (no partitions: \($0))" } ?? ""))
        for index in gateways.indices { try await startGateway(index) }
        original = try await backendPartners()
        until = now() + run.minutes * 60
        let me = Self.sibling("oodata-jepsen")
        let root = "http://\(network.relayHost):\(relay.port)/"
        for index in 0..<run.devices {
            var argv = [
                me, "device", "--index", "\(index)", "--root", root, "--folder", folder, "--seed", "\(run.seed)",
                "--until", "\(until)", "--quiet-bound", "\(run.liveness)",
            ]
            if let plant = run.plant { argv += ["--plant", plant.rawValue] }
            if run.noChecksums { argv.append("--no-checksums") }
            if network.isolated { argv = ["ip", "netns", "exec", "oodj-d"] + argv }
            let device = Child(name: "device \(index)", argv: argv, log: folder + "/device-\(index).log")
            try device.start()
            devices.append(device)
        }
        try await nemesisLoop()
        say("faults healed; quiet phase")
        try await quietPhase()
        return try await check()
    }

    /// Faults one after another until `until`, each kind once before any twice, with pauses
    /// between; devices that ended early are started again.
    mutating func nemesisLoop() async throws {
        var cycle: [Fault] = []
        try await Task.sleep(nanoseconds: 5_000_000_000)
        while now() < until - 10 {
            if cycle.isEmpty { cycle = faults.shuffled(using: &random) }
            guard let fault = cycle.popLast() else { break }
            try await apply(fault)
            restartEndedDevices()
            try await restartEndedGateways()
            if run.plant == .stale { _ = try await plantStale() }
            try await Task.sleep(nanoseconds: UInt64.random(in: 1_500_000_000...4_000_000_000, using: &random))
        }
        while now() < until {
            restartEndedDevices()
            try await Task.sleep(nanoseconds: 500_000_000)
        }
    }

    /// Starts again the devices and gateways that ended; an end no fault caused is a crash
    /// (the liveness checker fails on it).
    mutating func restartEndedDevices() {
        for (index, device) in devices.enumerated() where !device.isRunning && device.starts < 20 {
            guard !FileManager.default.fileExists(atPath: folder + "/final-\(index).json") else { continue }
            if device.endedByItself() {
                crashes.append("\(device.name) (status \(device.crashes.last ?? 0), log \(device.log))")
            }
            try? device.start()
        }
    }

    mutating func restartEndedGateways() async throws {
        for (index, gateway) in gateways.enumerated() where !gateway.isRunning && gateway.starts > 0 {
            if gateway.endedByItself() {
                crashes.append("\(gateway.name) (status \(gateway.crashes.last ?? 0), log \(gateway.log))")
            }
            try await startGateway(index)
        }
    }

    mutating func apply(_ fault: Fault) async throws {
        let start = now()
        var target = ""
        switch fault {
        case .killGateway:
            let index = Int.random(in: 0..<gateways.count, using: &random)
            target = gateways[index].name
            gateways[index].killHard()
            try await Task.sleep(nanoseconds: UInt64.random(in: 1_000_000_000...4_000_000_000, using: &random))
            try await startGateway(index)
        case .killDevice:
            let index = Int.random(in: 0..<devices.count, using: &random)
            target = devices[index].name
            devices[index].killHard()
            try await Task.sleep(nanoseconds: 1_000_000_000)
            restartEndedDevices()
        case .pauseGateway:
            let index = Int.random(in: 0..<gateways.count, using: &random)
            target = gateways[index].name
            gateways[index].signal(SIGSTOP)
            try await Task.sleep(nanoseconds: 12_000_000_000)
            gateways[index].signal(SIGCONT)
        case .postgresFast:
            target = "postgres"
            try postgres.restart(mode: "fast")
        case .postgresImmediate:
            target = "postgres"
            try postgres.restart(mode: "immediate")
        case .lostAnswers:
            target = "backend"
            await backend.service.faults.set([
                FaultRule(method: "POST", urlContains: "$batch", dropAfterCommit: true, times: 3)
            ])
            try await Task.sleep(nanoseconds: 8_000_000_000)
            await backend.service.faults.set([])
        case .partitionDevices:
            target = "devices|gateways"
            try Network.partition("oodj-dv", folder: folder)
            try await Task.sleep(nanoseconds: UInt64.random(in: 5_000_000_000...10_000_000_000, using: &random))
            if run.plant != .hang { Network.heal("oodj-dv", folder: folder) }
        case .partitionBackend:
            target = "gateways|backend"
            try Network.partition("oodj-be", folder: folder)
            try await Task.sleep(nanoseconds: UInt64.random(in: 5_000_000_000...10_000_000_000, using: &random))
            Network.heal("oodj-be", folder: folder)
        }
        let event = NemesisEvent(fault: fault.rawValue, target: target, start: start, end: now())
        nemesis.append(event)
        say("\(fault.rawValue) \(target) (\(String(format: "%.1f", event.end - event.start)) s)")
    }

    /// Sends `body` to the backend directly (V4, `If-Match: *`): how the planted bugs change it
    /// behind the gateways' back. Returns the status.
    func sendToBackend(_ method: String, _ path: String, _ body: String = "") async throws -> Int {
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers["If-Match"] = "*"
        let url = backendRoot.replacingOccurrences(of: "/v2/", with: "/v4/") + path
        return try await transport.send(
            TransportRequest(method: method, url: url, headers: headers, body: Array(body.utf8)), timeout: 10
        ).status
    }

    /// Puts an older phone of an own partner back on the backend, and a shared partner's first
    /// phone (the planted `stale` bug), after every fault.
    func plantStale() async throws -> Bool {
        if let first = original["BP0"] {
            let status = try await sendToBackend("PATCH", "BusinessPartners('BP0')", #"{"Phone":"\#(first)"}"#)
            say("planted: BP0 set back to its first phone on the backend (\(status))")
        }
        let events = try (0..<run.devices).flatMap {
            try readLines(HistoryEvent.self, path: folder + "/history-\($0).jsonl")
        }
        let writes = events.filter {
            $0.type == "complete" && $0.ok == true && ($0.op == "update" || $0.op == "create")
        }
        let byKey = Dictionary(grouping: writes, by: { $0.key ?? "" })
        guard let (key, list) = byKey.first(where: { $0.value.count >= 3 && !$0.key.isEmpty }),
            let old = list.first?.value
        else { return false }
        let status = try await sendToBackend("PATCH", "BusinessPartners('\(key)')", #"{"Phone":"\#(old)"}"#)
        say("planted: \(key) set back to \(old) on the backend (\(status))")
        return status < 300
    }

    /// Heals every fault, waits until every device drained its queue, then lets them download
    /// once more and write what they hold.
    mutating func quietPhase() async throws {
        for gateway in gateways where gateway.paused { gateway.signal(SIGCONT) }
        if run.plant != .hang { Network.heal("oodj-dv", folder: folder) }
        Network.heal("oodj-be", folder: folder)
        await backend.service.faults.set([])
        try await restartEndedGateways()
        let deadline = now() + run.liveness + 60
        while now() < deadline {
            restartEndedDevices()
            let drained = (0..<devices.count).filter {
                FileManager.default.fileExists(atPath: folder + "/drained-\($0)")
            }
            if drained.count == devices.count { break }
            try await Task.sleep(nanoseconds: 500_000_000)
        }
        say("queues drained; final downloads after a refresh interval")
        if run.plant == .lost || run.plant == .duplicate { try await plantOnBackend() }
        try await Task.sleep(nanoseconds: UInt64((run.refreshInterval + 1) * 1_000_000_000))
        _ = FileManager.default.createFile(atPath: folder + "/final.go", contents: nil)
        let finalDeadline = now() + run.liveness + 60
        while now() < finalDeadline {
            restartEndedDevices()
            if devices.allSatisfy({ !$0.isRunning }) { break }
            try await Task.sleep(nanoseconds: 500_000_000)
        }
        if run.plant == .hang { Network.heal("oodj-dv", folder: folder) }
    }

    /// The planted `lost` and `duplicate` bugs, on the backend directly.
    func plantOnBackend() async throws {
        let events = try (0..<run.devices).flatMap {
            try readLines(HistoryEvent.self, path: folder + "/history-\($0).jsonl")
        }
        let deleted = Set(events.filter { $0.op == "delete" }.compactMap(\.key))
        if run.plant == .lost,
            let create = events.first(where: { $0.op == "create" && $0.ok == true && !deleted.contains($0.key ?? "") }),
            let key = create.key
        {
            let status = try await sendToBackend("DELETE", "BusinessPartners('\(key)')")
            say("planted: \(key) deleted on the backend (\(status))")
        }
        if run.plant == .duplicate, let contact = events.first(where: { $0.op == "contact" && $0.ok == true }),
            let value = contact.value
        {
            let status = try await sendToBackend(
                "POST", "Contacts", #"{"PartnerID":"BP0","FirstName":"jepsen","LastName":"\#(value)"}"#)
            say("planted: contact \(value) created a second time on the backend (\(status))")
        }
    }

    func tearDown() async {
        for device in devices { device.killHard() }
        for gateway in gateways { gateway.killHard() }
        relay.stop()
        await backend.stop()
        postgres.stop()
        if network.isolated { Network.clean(folder: folder) }
    }
}
