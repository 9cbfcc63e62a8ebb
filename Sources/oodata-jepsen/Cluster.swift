import Foundation
import InteropSupport
import ODataCore
import ODataServer
import OfflineOData

#if canImport(Glibc)
    import Glibc
#endif

/// Runs a program to its end (``Spawn/wait(_:outputFile:)``), its output appended to `log`.
@discardableResult
func spawnAndWait(_ argv: [String], log: String) throws -> Int32 { try Spawn.wait(argv, outputFile: log) }

/// Where `name` is on PATH (or in /usr/sbin and /sbin, which a user's PATH may lack).
func locate(_ name: String) -> String {
    if name.hasPrefix("/") { return name }
    let path = (ProcessInfo.processInfo.environment["PATH"] ?? "") + ":/usr/sbin:/sbin:/usr/bin:/bin"
    for folder in path.split(separator: ":") where FileManager.default.isExecutableFile(atPath: "\(folder)/\(name)") {
        return "\(folder)/\(name)"
    }
    return name
}

/// The command's output when it exits 0.
func output(_ argv: [String], folder: String) throws -> String {
    let log = folder + "/cmd-\(UUID().uuidString).out"
    defer { try? FileManager.default.removeItem(atPath: log) }
    let status = try spawnAndWait(argv, log: log)
    let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
    guard status == 0 else { throw JepsenFailure("\(argv.joined(separator: " ")) failed (\(status)): \(text)") }
    return text
}

/// The network of a run. As root with `ip netns`: the gateways in namespace `oodj-g`, the
/// devices in `oodj-d`, joined to this process's namespace by veth pairs (PostgreSQL and the
/// relay on `oodj-pg`, the backend on `oodj-be`, the devices on `oodj-dv`), so a partition is a
/// qdisc that drops every packet on a pair. Otherwise everything is on loopback and there are
/// no partitions.
struct Network {
    var isolated: Bool
    /// Where PostgreSQL listens for the gateways, the backend listens, the gateways listen,
    /// and the relay listens for the devices.
    var postgresHost: String { isolated ? "10.201.0.1" : "127.0.0.1" }
    var backendHost: String { isolated ? "10.202.0.1" : "127.0.0.1" }
    var gatewayHost: String { isolated ? "10.201.0.2" : "127.0.0.1" }
    var relayHost: String { isolated ? "10.203.0.1" : "127.0.0.1" }

    static let pairs: [(name: String, namespace: String, root: String, inside: String)] = [
        ("oodj-pg", "oodj-g", "10.201.0.1", "10.201.0.2"),
        ("oodj-be", "oodj-g", "10.202.0.1", "10.202.0.2"),
        ("oodj-dv", "oodj-d", "10.203.0.1", "10.203.0.2"),
    ]

    /// Removes what an earlier run left (its processes in the namespaces too).
    static func clean(folder: String) {
        for namespace in ["oodj-g", "oodj-d"] {
            if let pids = try? output(["ip", "netns", "pids", namespace], folder: folder) {
                for pid in pids.split(separator: "\n").compactMap({ Int32($0) }) { kill(pid, SIGKILL) }
            }
            _ = try? spawnAndWait(["ip", "netns", "del", namespace], log: "/dev/null")
        }
        for pair in pairs { _ = try? spawnAndWait(["ip", "link", "del", pair.name], log: "/dev/null") }
    }

    /// Makes the namespaces, or says why not (then the run stays on loopback).
    static func make(folder: String) -> (Network, String?) {
        guard getuid() == 0 else { return (Network(isolated: false), "not root") }
        clean(folder: folder)
        do {
            for namespace in ["oodj-g", "oodj-d"] {
                _ = try output(["ip", "netns", "add", namespace], folder: folder)
                _ = try output(["ip", "-n", namespace, "link", "set", "lo", "up"], folder: folder)
            }
            for pair in pairs {
                let inside = pair.name + "-n"
                _ = try output(
                    ["ip", "link", "add", pair.name, "type", "veth", "peer", "name", inside], folder: folder)
                _ = try output(["ip", "link", "set", inside, "netns", pair.namespace], folder: folder)
                _ = try output(["ip", "addr", "add", pair.root + "/24", "dev", pair.name], folder: folder)
                _ = try output(["ip", "link", "set", pair.name, "up"], folder: folder)
                _ = try output(
                    ["ip", "-n", pair.namespace, "addr", "add", pair.inside + "/24", "dev", inside], folder: folder)
                _ = try output(["ip", "-n", pair.namespace, "link", "set", inside, "up"], folder: folder)
            }
            return (Network(isolated: true), nil)
        } catch {
            clean(folder: folder)
            return (Network(isolated: false), "\(error)")
        }
    }

    /// Drops every packet both ways on the pair `name`; throws when a side refused.
    static func partition(_ name: String, folder: String) throws {
        guard let pair = pairs.first(where: { $0.name == name }) else { return }
        for (device, prefix) in [
            (pair.name, ["tc"]), (pair.name + "-n", ["ip", "netns", "exec", pair.namespace, "tc"]),
        ] {
            _ = try output(prefix + ["qdisc", "add", "dev", device, "root", "pfifo", "limit", "0"], folder: folder)
        }
    }

    /// Lets packets through the pair `name` again (where they were dropped).
    static func heal(_ name: String, folder: String) {
        guard let pair = pairs.first(where: { $0.name == name }) else { return }
        for (device, prefix) in [
            (pair.name, ["tc"]), (pair.name + "-n", ["ip", "netns", "exec", pair.namespace, "tc"]),
        ] {
            _ = try? spawnAndWait(prefix + ["qdisc", "del", "dev", device, "root"], log: folder + "/nemesis.out")
        }
    }
}

/// PostgreSQL in a folder of the run: `initdb`, `pg_ctl` on a free port, as `postgres` when
/// this process is root (PostgreSQL refuses to run as root).
struct Postgres {
    let folder: String
    let port: Int
    let binaries: String
    let host: String

    var url: String { "postgres://postgres@\(host):\(port)/postgres" }

    static func binaries() throws -> String { try Spawn.postgresBinaries() }

    static func asPostgres(_ argv: [String]) -> [String] {
        getuid() == 0 ? [locate("runuser"), "-u", "postgres", "--"] + argv : argv
    }

    static func start(in runFolder: String, host: String) throws -> Postgres {
        let binaries = try binaries()
        let folder = runFolder + "/postgres"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        if getuid() == 0 {
            guard let user = getpwnam("postgres") else { throw JepsenFailure("there is no postgres user") }
            chown(runFolder, user.pointee.pw_uid, user.pointee.pw_gid)
            chown(folder, user.pointee.pw_uid, user.pointee.pw_gid)
        }
        _ = try output(
            asPostgres([binaries + "/initdb", "-D", folder + "/data", "-A", "trust", "-U", "postgres", "--no-sync"]),
            folder: folder)
        // The gateways connect from their namespace.
        let hba = folder + "/data/pg_hba.conf"
        if let handle = FileHandle(forWritingAtPath: hba) {
            handle.seekToEndOfFile()
            handle.write(Data("host all all 10.201.0.0/24 trust\n".utf8))
            handle.closeFile()
        }
        let port = freePort()
        let addresses = host == "127.0.0.1" ? "127.0.0.1" : "127.0.0.1,\(host)"
        _ = try output(
            asPostgres([
                binaries + "/pg_ctl", "-D", folder + "/data", "-l", folder + "/log", "-w", "-t", "60", "-o",
                "-p \(port) -k \(folder) -c listen_addresses=\(addresses) -c fsync=off -c max_connections=300",
                "start",
            ]), folder: folder)
        return Postgres(folder: folder, port: port, binaries: binaries, host: host)
    }

    /// `pg_ctl restart -m fast|immediate`.
    func restart(mode: String) throws {
        _ = try output(
            Self.asPostgres([binaries + "/pg_ctl", "-D", folder + "/data", "-m", mode, "-w", "-t", "60", "restart"]),
            folder: folder)
    }

    func stop() {
        _ = try? output(
            Self.asPostgres([binaries + "/pg_ctl", "-D", folder + "/data", "-m", "immediate", "-w", "stop"]),
            folder: folder)
    }

    /// One column of a query's rows.
    func column(_ sql: String) throws -> [String] {
        try output(
            Self.asPostgres([
                binaries + "/psql", "-h", "127.0.0.1", "-p", "\(port)", "-U", "postgres", "-At", "-c", sql,
            ]),
            folder: folder
        ).split(separator: "\n").map(String.init)
    }
}

func freePort() -> Int { Spawn.freePort() }

/// A child process this run started (a gateway or a device), with its log.
final class Child {
    let name: String
    let argv: [String]
    let log: String
    private(set) var process: Process?
    /// When it was killed with SIGKILL.
    private(set) var kills: [Double] = []
    private(set) var starts = 0
    var paused = false

    init(name: String, argv: [String], log: String) {
        self.name = name
        self.argv = argv
        self.log = log
    }

    /// Whether the process now running (or last run) was killed by the nemesis.
    private var killed = false
    /// Exits no fault caused: the exit status of each.
    private(set) var crashes: [Int32] = []

    var isRunning: Bool { process?.isRunning ?? false }

    /// Whether the last process ended by itself (not by a kill of the nemesis); noted once.
    func endedByItself() -> Bool {
        guard let process, !process.isRunning, !killed else { return false }
        killed = true
        crashes.append(process.terminationStatus)
        return true
    }
    var pid: Int32? { process.map(\.processIdentifier) }

    func start() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: locate(argv[0]))
        process.arguments = Array(argv.dropFirst())
        if !FileManager.default.fileExists(atPath: log) {
            _ = FileManager.default.createFile(atPath: log, contents: nil)
        }
        let handle = FileHandle(forWritingAtPath: log)
        handle?.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        try process.run()
        self.process = process
        killed = false
        starts += 1
    }

    func killHard() {
        guard let process, process.isRunning else { return }
        if paused { kill(process.processIdentifier, SIGCONT) }
        paused = false
        killed = true
        kill(process.processIdentifier, SIGKILL)
        kills.append(now())
        process.waitUntilExit()
    }

    func signal(_ number: Int32) {
        guard let process, process.isRunning else { return }
        kill(process.processIdentifier, number)
        paused = number == SIGSTOP
    }
}
