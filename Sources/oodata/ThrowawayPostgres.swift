import Foundation

/// A PostgreSQL server in a temporary folder for the demo, as the gateway's tests start one:
/// `initdb` with a random password (SCRAM) on loopback, so that no other user of the machine can
/// connect while the demo runs, its socket only for its owner; `pg_ctl` on a free port, stopped
/// and removed afterwards. As root its programs run as the `postgres` user Debian's package
/// creates (PostgreSQL refuses root).
struct ThrowawayPostgres {
    let folder: String
    let port: Int
    let binaries: String
    let password: String

    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres`, for this process only.
    var url: String { "postgres://postgres:\(password)@127.0.0.1:\(port)/postgres" }

    static func binaries() throws -> String {
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        for version in versions.sorted(by: { (Int($0) ?? 0) > (Int($1) ?? 0) }) {
            let folder = "/usr/lib/postgresql/\(version)/bin"
            if FileManager.default.isExecutableFile(atPath: folder + "/initdb") { return folder }
        }
        for folder in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
        where FileManager.default.isExecutableFile(atPath: folder + "/initdb") {
            return folder
        }
        throw CLIFailure(
            "PostgreSQL's initdb is not installed: run `scripts/setup gateway` (Debian: apt-get install postgresql)")
    }

    /// Runs `program` (as `postgres` when root) with its output in `log`, failing with that
    /// output. Waited for with `waitpid` on a thread of its own: Foundation's `Process` can miss
    /// the exit of `pg_ctl start`, whose server lives on; and a wait on the two-thread
    /// concurrency pool would stall the rest of the demo.
    static func run(_ program: String, _ arguments: [String], log: String) async throws {
        let argv = (getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--", program] : [program]) + arguments
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let status: Int32 = try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                var actions = posix_spawn_file_actions_t()
                posix_spawn_file_actions_init(&actions)
                defer { posix_spawn_file_actions_destroy(&actions) }
                posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
                posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_APPEND, 0o644)
                posix_spawn_file_actions_adddup2(&actions, 1, 2)
                var pointers = argv.map { strdup($0) } + [nil]
                defer { for pointer in pointers { free(pointer) } }
                var pid: pid_t = 0
                let spawned = posix_spawn(&pid, argv[0], &actions, nil, &pointers, environ)
                guard spawned == 0 else {
                    continuation.resume(throwing: CLIFailure("cannot start \(argv[0]): error \(spawned)"))
                    return
                }
                var status: Int32 = 0
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                continuation.resume(returning: status)
            }
        }
        guard status == 0 else {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw CLIFailure("\((program as NSString).lastPathComponent) failed: \(text.suffix(600))")
        }
    }

    static func start(in parent: URL) async throws -> ThrowawayPostgres {
        let binaries = try binaries()
        let folder = parent.appendingPathComponent("postgres").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        if getuid() == 0 {
            guard let user = getpwnam("postgres") else {
                throw CLIFailure("there is no postgres user: run `scripts/setup gateway` (apt-get install postgresql)")
            }
            // The folder above must be reachable by postgres too.
            _ = chmod(parent.path, 0o755)
            guard chown(folder, user.pointee.pw_uid, user.pointee.pw_gid) == 0 else {
                throw CLIFailure("chown postgres \(folder) failed (errno \(errno))")
            }
        }
        let password = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let passwordFile = folder + "/password"
        // Made 0600 at once: never readable by others, not even for a moment.
        let descriptor = open(passwordFile, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600)
        guard descriptor >= 0,
            password.utf8CString.withUnsafeBufferPointer({ write(descriptor, $0.baseAddress, $0.count - 1) })
                == password.utf8.count
        else {
            if descriptor >= 0 { close(descriptor) }
            throw CLIFailure("\(passwordFile) could not be written (errno \(errno))")
        }
        close(descriptor)
        if getuid() == 0, let user = getpwnam("postgres") {
            _ = chown(passwordFile, user.pointee.pw_uid, user.pointee.pw_gid)
        }
        try await run(
            binaries + "/initdb",
            [
                "-D", folder + "/data", "--auth-host=scram-sha-256", "--auth-local=peer", "--pwfile=" + passwordFile,
                "-U", "postgres", "-E", "UTF8", "--no-sync",
            ], log: folder + "/initdb.log")
        try? FileManager.default.removeItem(atPath: passwordFile)
        let port = freePort()
        try await run(
            binaries + "/pg_ctl",
            [
                "-D", folder + "/data", "-l", folder + "/server.log", "-w", "-t", "60", "-o",
                "-p \(port) -k \(folder) -c listen_addresses=127.0.0.1 -c fsync=off -c unix_socket_permissions=0700",
                "start",
            ], log: folder + "/pg_ctl.log")
        return ThrowawayPostgres(folder: folder, port: port, binaries: binaries, password: password)
    }

    func stop() async {
        try? await Self.run(
            binaries + "/pg_ctl", ["-D", folder + "/data", "-m", "immediate", "-w", "stop"], log: folder + "/stop.log")
    }

    /// A free TCP port on loopback (bound and released).
    static func freePort() -> Int {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Bool in
                bind(socket, pointer, length) == 0 && getsockname(socket, pointer, &length) == 0
            }
        }
        return bound ? Int(UInt16(bigEndian: address.sin_port)) : 54_329
    }
}
