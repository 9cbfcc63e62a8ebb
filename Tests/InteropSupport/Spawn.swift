import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Programs run to their end, free ports and PostgreSQL's programs: for the gateway's tests and
/// the Jepsen-style harness (`oodata-jepsen`), which start PostgreSQL and other servers.
public enum Spawn {
    /// Runs `argv` (`argv[0]` found on PATH) with standard input from /dev/null and standard
    /// output and error appended to `outputFile`, and waits for it with `waitpid`: Foundation's
    /// `Process` can miss the exit of a program whose child lives on (`pg_ctl start`'s server).
    /// Nothing else of this process is inherited, so a daemon it starts holds no pipe of ours.
    /// Returns the exit status (128 + the signal when a signal ended it).
    public static func wait(_ argv: [String], outputFile: String) throws -> Int32 {
        if !FileManager.default.fileExists(atPath: outputFile) {
            _ = FileManager.default.createFile(atPath: outputFile, contents: nil)
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputFile, O_WRONLY | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // glibc 2.34's call, looked up: Swift's Glibc module does not declare it; an older C
        // library goes without.
        typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        if let closeFrom = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") {
            _ = unsafeBitCast(closeFrom, to: CloseFrom.self)(&actions, 3)
        }
        var arguments = argv.map { strdup($0) } + [nil]
        defer { for pointer in arguments { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawnp(&pid, argv[0], &actions, nil, &arguments, environ)
        guard spawned == 0 else { throw SpawnFailure(description: "cannot start \(argv[0]): error \(spawned)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }

    /// ``wait(_:outputFile:)`` on a dispatch queue, for async code: a program waited for on the
    /// two-thread concurrency pool (`initdb`, `pg_ctl start`) would stall every other task of
    /// the process, and their deadlines would pass while they could not run.
    public static func waitOffPool(_ argv: [String], outputFile: String) async throws -> Int32 {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                do {
                    continuation.resume(returning: try wait(argv, outputFile: outputFile))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    /// A TCP port free on 127.0.0.1 now.
    public static func freePort() -> Int {
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

    /// Where `initdb` and `pg_ctl` are: Debian's versioned folder (the newest), or PATH.
    public static func postgresBinaries() throws -> String {
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        for version in versions.sorted(by: { (Int($0) ?? 0) > (Int($1) ?? 0) }) {
            let folder = "/usr/lib/postgresql/\(version)/bin"
            if FileManager.default.isExecutableFile(atPath: folder + "/initdb") { return folder }
        }
        for folder in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
        where FileManager.default.isExecutableFile(atPath: folder + "/initdb") {
            return folder
        }
        throw SpawnFailure(
            description:
                "PostgreSQL's initdb is not installed: run `scripts/setup test` (Debian: apt-get install postgresql)")
    }

    /// Why a program could not be found or started.
    public struct SpawnFailure: Error, CustomStringConvertible {
        public let description: String
    }
}
