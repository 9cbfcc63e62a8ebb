import Foundation
import ODataGateway
import InteropSupport
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

    /// Where `initdb` and `pg_ctl` are (``Spawn/postgresBinaries()``).
    static func findBinaries() throws -> String { try Spawn.postgresBinaries() }

    static var isRoot: Bool { getuid() == 0 }

    /// Runs `program` (as `postgres` when this process is root) with its output in a file
    /// (``Spawn/waitOffPool(_:outputFile:)``, off the concurrency pool). Throws with the output when it fails.
    @discardableResult
    static func run(_ program: String, _ arguments: [String], outputFile: String) async throws -> String {
        let argv = isRoot ? ["/usr/sbin/runuser", "-u", "postgres", "--", program] + arguments : [program] + arguments
        _ = FileManager.default.createFile(atPath: outputFile, contents: nil)
        let status = try await Spawn.waitOffPool(argv, outputFile: outputFile)
        let text = (try? String(contentsOfFile: outputFile, encoding: .utf8)) ?? ""
        guard status == 0 else {
            throw Failure(description: "\(program) \(arguments.joined(separator: " ")) failed: \(text)")
        }
        return text
    }

    static func freePort() -> Int { Spawn.freePort() }

    /// A new server, running.
    static func start() async throws -> PostgresServer {
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
        try await run(
            binaries + "/initdb", ["-D", folder + "/data", "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"],
            outputFile: folder + "/initdb.out")
        // A free port can be taken by another test between its check and PostgreSQL's bind:
        // then the server stops at once with "Address already in use", and another port is tried.
        var attempt = 0
        while true {
            attempt += 1
            let port = freePort()
            do {
                try await run(
                    binaries + "/pg_ctl",
                    [
                        "-D", folder + "/data", "-l", folder + "/log", "-w", "-t", "60",
                        "-o",
                        "-p \(port) -k \(folder) -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
                        "start",
                    ], outputFile: folder + "/pg_ctl.out")
                return PostgresServer(folder: folder, port: port, binaries: binaries)
            } catch {
                let log = (try? String(contentsOfFile: folder + "/log", encoding: .utf8)) ?? ""
                guard attempt < 4, log.contains("Address already in use") else { throw error }
                try? FileManager.default.removeItem(atPath: folder + "/log")
            }
        }
    }

    /// Stops the server (`pg_ctl stop -m MODE`), keeping its files for ``startAgain()``.
    func halt(mode: String = "immediate") async throws {
        try await Self.run(
            binaries + "/pg_ctl", ["-D", folder + "/data", "-m", mode, "-w", "stop"],
            outputFile: folder + "/pg_ctl.out")
    }

    /// Starts the server stopped by ``halt(mode:)`` again, on the same port.
    func startAgain() async throws {
        try await Self.run(
            binaries + "/pg_ctl",
            [
                "-D", folder + "/data", "-l", folder + "/log", "-w", "-t", "60",
                "-o", "-p \(port) -k \(folder) -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
                "start",
            ], outputFile: folder + "/pg_ctl.out")
    }

    /// Runs `sql` with psql as `postgres`; throws with psql's output when it fails.
    @discardableResult
    func psql(_ sql: String) async throws -> String {
        try await Self.run(
            binaries + "/psql",
            [
                "-h", "127.0.0.1", "-p", "\(port)", "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-Atc",
                sql,
            ],
            outputFile: folder + "/psql-\(UUID().uuidString).out")
    }

    /// Stops the server at once and removes its files.
    func stop() async {
        _ = try? await Self.run(
            binaries + "/pg_ctl", ["-D", folder + "/data", "-m", "immediate", "-w", "stop"],
            outputFile: folder + "/pg_ctl.out")
        try? FileManager.default.removeItem(atPath: folder)
    }
}

extension GatewayConfiguration {
    /// A configuration whose scopes refresh at each download, with a long PostgreSQL deadline:
    /// for tests that change the backend behind the gateway and expect the next download to
    /// show it (the refresh target, the refresher and the deadline have tests of their own).
    static func refreshingAtEachRead(_ backends: [GatewayBackend]) -> GatewayConfiguration {
        var configuration = GatewayConfiguration(backends: backends)
        configuration.refreshInterval = 0
        configuration.metadataCheckInterval = 0
        // PostgreSQL's deadline is for outages, not for a test machine's load.
        configuration.postgresTimeout = 30
        return configuration
    }
}
