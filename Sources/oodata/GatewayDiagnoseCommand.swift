import ArgumentParser
import Foundation
import ODataCore
import ODataGateway

/// `oodata gateway diagnose --admin URL`: one JSON file for a support case, gathered from a
/// running gateway's admin API, with secrets left out (docs/gateway.md, "oodata gateway diagnose").
struct GatewayDiagnoseCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "diagnose",
        abstract: "Write a support bundle of a running gateway as one JSON file, secrets left out.",
        discussion: """
            The bundle holds the versions, the readiness checks, the configuration in force, the scopes, the \
            requests in doubt, the devices, the store files and support stores (lists, not bytes), the metrics \
            and the gateway's last warnings and errors, plus the last lines of --log FILE. Passwords, tokens, \
            keys and Authorization values are masked. Exit codes: 0 every part was read; 1 some part could \
            not be (named in "errors"); 3 the admin API could not be read at all.
            """)

    @OptionGroup var connection: AdminOptions
    @Option(help: ArgumentHelp("The gateway's log file, whose last lines go in the bundle.", valueName: "FILE"))
    var log: String?
    @Option(help: ArgumentHelp("How many of the log file's last lines (default 500).", valueName: "N"))
    var logLines = 500
    @Option(
        name: .shortAndLong,
        help: ArgumentHelp(
            "Where to write the bundle (default gateway-diagnose-<time>.json; - for standard output).",
            valueName: "FILE")) var output: String?

    /// The admin API's JSON parts and the bundle's keys for them.
    static let parts: [(key: String, path: String)] = [
        ("scopes", "/api/scopes?limit=100000"),
        ("requestsInDoubt", "/api/requests/in-doubt?limit=100000"),
        ("devices", "/api/devices?limit=100000"),
        ("storeFiles", "/api/files?limit=100000"),
        ("supportStores", "/api/support?limit=100000"),
        ("configuration", "/api/config"),
        ("recentLog", "/api/log"),
    ]

    func run() async throws {
        guard (1...100_000).contains(logLines) else { throw ValidationError("--log-lines must be 1 to 100000") }
        let admin: AdminConnection
        do {
            admin = try await connection.connection()
        } catch let failure as AdminUnreadable {
            FileHandle.standardError.write(Data("oodata: gateway diagnose: \(failure.message)\n".utf8))
            throw ExitCode(3)
        }
        var bundle: [String: Any] = [:]
        var errors: [String] = []
        do {
            bundle["status"] = try JSONSerialization.jsonObject(with: try await admin.body("/api/status"))
        } catch {
            let message = (error as? AdminUnreadable)?.message ?? "\(admin.root)/api/status: \(error)"
            FileHandle.standardError.write(Data("oodata: gateway diagnose: \(message)\n".utf8))
            throw ExitCode(3)
        }
        var truncated: [String] = []
        for part in Self.parts {
            do {
                let answer = try await admin.response(part.path)
                bundle[part.key] = try JSONSerialization.jsonObject(with: Data(answer.body))
                if answer.headers["OOData-More"] == "true" { truncated.append(part.key) }
            } catch {
                errors.append("\(part.key): \((error as? AdminUnreadable)?.message ?? "\(error)")")
            }
        }
        do {
            bundle["metrics"] = String(decoding: try await admin.body("/api/metrics"), as: UTF8.self)
        } catch {
            errors.append("metrics: \((error as? AdminUnreadable)?.message ?? "\(error)")")
        }
        if let log {
            do {
                bundle["logFile"] = ["path": log, "lines": try Self.lastLines(of: log, count: logLines)]
            } catch {
                errors.append("logFile: \(log): \(error.localizedDescription)")
            }
        }
        let formatter = ISO8601DateFormatter()
        let now = Date()
        bundle["taken"] = formatter.string(from: now)
        bundle["tool"] = [
            "version": "oodata (OfflineOData) \(PackageVersion.string)",
            "host": ProcessInfo.processInfo.hostName,
            "operatingSystem": ProcessInfo.processInfo.operatingSystemVersionString,
            "admin": GatewayRecentLog.masked(admin.root),
        ]
        bundle["errors"] = errors
        // Lists that stop at 100,000 entries: the rest is not in the bundle.
        bundle["truncated"] = truncated
        let cleaned = Self.withoutSecrets(bundle, known: admin.secrets)
        let data = try JSONSerialization.data(
            withJSONObject: cleaned, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        if output == "-" {
            FileHandle.standardOutput.write(data + Data("\n".utf8))
        } else {
            let stamp = formatter.string(from: now).replacingOccurrences(of: ":", with: "")
            let path = output ?? "gateway-diagnose-\(stamp).json"
            // Only its owner reads it: it describes the gateway's users and their devices.
            try Self.writePrivately(data, to: path)
            print("gateway diagnose: wrote \(path) (\(data.count) bytes)")
        }
        if !errors.isEmpty {
            FileHandle.standardError.write(
                Data(("oodata: gateway diagnose: not read: " + errors.joined(separator: "; ") + "\n").utf8))
            throw ExitCode(1)
        }
    }

    /// Keys whose values are secrets wherever they appear.
    static func isSecret(_ key: String) -> Bool {
        let lowered = key.lowercased()
        return ["password", "passwd", "secret", "token", "authorization", "apikey", "api_key", "credential"].contains {
            lowered.contains($0)
        }
    }

    /// `value` with every string under a secret-named key (at any depth below it) masked, the
    /// `known` secrets (the credentials the tool itself holds) replaced wherever they appear,
    /// and every string run through ``GatewayRecentLog/masked(_:)``.
    static func withoutSecrets(_ value: Any, known: [String] = [], underSecret: Bool = false) -> Any {
        if let object = value as? [String: Any] {
            return object.reduce(into: [String: Any]()) {
                $0[$1.key] = withoutSecrets($1.value, known: known, underSecret: underSecret || isSecret($1.key))
            }
        }
        if let array = value as? [Any] {
            return array.map { withoutSecrets($0, known: known, underSecret: underSecret) }
        }
        if let text = value as? String {
            if underSecret, !text.isEmpty { return "•••" }
            var masked = text
            for secret in known where secret.count >= 4 {
                masked = masked.replacingOccurrences(of: secret, with: "•••")
            }
            return GatewayRecentLog.masked(masked)
        }
        return value
    }

    /// Writes `data` to `path` created with mode 0600 (never readable by others, not even for
    /// a moment), replacing a file there; a symbolic link there is not followed.
    static func writePrivately(_ data: Data, to path: String) throws {
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isFolder), isFolder.boolValue {
            throw CLIFailure("--output \(path) is a folder: name a file")
        }
        let temporary = path + ".\(getpid()).partial"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            throw CLIFailure("--output \(path): \(String(cString: strerror(errno)))")
        }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        do {
            try handle.write(contentsOf: data)
            try handle.close()
        } catch {
            unlink(temporary)
            throw CLIFailure("--output \(path): \(error.localizedDescription)")
        }
        guard rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw CLIFailure("--output \(path): \(reason)")
        }
    }

    /// The last `count` lines of the file at `path`, read from its last 8 MiB at most, masked.
    static func lastLines(of path: String, count: Int) throws -> [String] {
        let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        let size = try handle.seekToEnd()
        let window: UInt64 = 8 << 20
        try handle.seek(toOffset: size > window ? size - window : 0)
        let data = try handle.readToEnd() ?? Data()
        var lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        if size > window, !lines.isEmpty { lines.removeFirst() }
        if lines.last?.isEmpty == true { lines.removeLast() }
        return lines.suffix(count).map { GatewayRecentLog.masked(String($0.prefix(4000))) }
    }
}
