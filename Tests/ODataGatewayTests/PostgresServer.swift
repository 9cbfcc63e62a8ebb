import Foundation
import Testing

/// A real PostgreSQL server for one test: `initdb` into a temporary folder, `pg_ctl` on a free
/// loopback port, stopped (immediately) and removed afterwards. PostgreSQL refuses to run as
/// root, so as root its programs run as the `postgres` user Debian's package creates.
final class PostgresServer: Sendable {
    let folder: String
    let port: Int
    let binaries: String

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    var url: String { "postgres://postgres@127.0.0.1:\(port)/postgres" }

    struct Failure: Error, CustomStringConvertible { let description: String }

    private init(folder: String, port: Int, binaries: String) {
        self.folder = folder
        self.port = port
        self.binaries = binaries
    }

    /// Where `initdb` and `pg_ctl` are: Debian's versioned folder, `pg_config --bindir`, or PATH.
    static func findBinaries() throws -> String {
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        for version in versions.sorted(by: { (Int($0) ?? 0) > (Int($1) ?? 0) }) {
            let folder = "/usr/lib/postgresql/\(version)/bin"
            if FileManager.default.isExecutableFile(atPath: folder + "/initdb") { return folder }
        }
        for folder in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
        where FileManager.default.isExecutableFile(atPath: folder + "/initdb") {
            return folder
        }
        throw Failure(
            description:
                "PostgreSQL's initdb is not installed: run `scripts/setup test` (Debian: apt-get install postgresql)")
    }

    static var isRoot: Bool { getuid() == 0 }

    /// Runs `program` (as `postgres` when this process is root); throws with its output when it fails.
    /// Runs `program` (as `postgres` when this process is root) with its output in a file, and
    /// waits with `waitpid`: Foundation's `Process` can miss the exit of a program whose child
    /// (the server) lives on. Throws with the output when it fails.
    @discardableResult
    static func run(_ program: String, _ arguments: [String], outputFile: String) throws -> String {
        let argv = isRoot ? ["/usr/sbin/runuser", "-u", "postgres", "--", program] + arguments : [program] + arguments
        _ = FileManager.default.createFile(atPath: outputFile, contents: nil)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputFile, O_WRONLY | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // Nothing else of this process is inherited: a daemon (PostgreSQL) holding the write end
        // of another test's output pipe would keep that test waiting for its end forever.
        // (glibc 2.34's call, looked up: Swift's Glibc module does not declare it; an older C
        // library goes without, as before.)
        typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        if let closeFrom = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") {
            _ = unsafeBitCast(closeFrom, to: CloseFrom.self)(&actions, 3)
        }
        var cArguments = argv.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, argv[0], &actions, nil, &cArguments, environ)
        guard spawned == 0 else { throw Failure(description: "cannot start \(argv[0]): error \(spawned)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let text = (try? String(contentsOfFile: outputFile, encoding: .utf8)) ?? ""
        // Exited normally with 0.
        guard status & 0x7f == 0, (status >> 8) & 0xff == 0 else {
            throw Failure(description: "\(program) \(arguments.joined(separator: " ")) failed: \(text)")
        }
        return text
    }

    static func freePort() -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(descriptor, pointer, length) == 0 ? getsockname(descriptor, pointer, &length) : -1
            }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// A new server, running.
    static func start() throws -> PostgresServer {
        let binaries = try findBinaries()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-pg-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        if isRoot {
            guard let user = getpwnam("postgres") else {
                throw Failure(
                    description: "there is no postgres user: run `scripts/setup test` (apt-get install postgresql)")
            }
            guard chown(folder, user.pointee.pw_uid, user.pointee.pw_gid) == 0 else {
                throw Failure(description: "chown postgres \(folder) failed (errno \(errno))")
            }
        }
        try run(
            binaries + "/initdb", ["-D", folder + "/data", "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"],
            outputFile: folder + "/initdb.out")
        let port = freePort()
        try run(
            binaries + "/pg_ctl",
            [
                "-D", folder + "/data", "-l", folder + "/log", "-w", "-t", "60",
                "-o", "-p \(port) -k \(folder) -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
                "start",
            ], outputFile: folder + "/pg_ctl.out")
        return PostgresServer(folder: folder, port: port, binaries: binaries)
    }

    /// Stops the server at once and removes its files.
    func stop() {
        _ = try? Self.run(
            binaries + "/pg_ctl", ["-D", folder + "/data", "-m", "immediate", "-w", "stop"],
            outputFile: folder + "/pg_ctl.out")
        try? FileManager.default.removeItem(atPath: folder)
    }
}
