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
        let admin = try connection.connection()
        var bundle: [String: Any] = [:]
        var errors: [String] = []
        do {
            bundle["status"] = try JSONSerialization.jsonObject(with: try await admin.body("/api/status"))
        } catch {
            let message = (error as? AdminUnreadable)?.message ?? "\(admin.root)/api/status: \(error)"
            FileHandle.standardError.write(Data("oodata: gateway diagnose: \(message)\n".utf8))
            throw ExitCode(3)
        }
        for part in Self.parts {
            do {
                bundle[part.key] = try JSONSerialization.jsonObject(with: try await admin.body(part.path))
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
        let cleaned = Self.withoutSecrets(bundle)
        let data = try JSONSerialization.data(
            withJSONObject: cleaned, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        if output == "-" {
            FileHandle.standardOutput.write(data + Data("\n".utf8))
        } else {
            let stamp = formatter.string(from: now).replacingOccurrences(of: ":", with: "")
            let path = output ?? "gateway-diagnose-\(stamp).json"
            // Only its owner reads it: it describes the gateway's users and their devices.
            guard FileManager.default.createFile(atPath: path, contents: data, attributes: [.posixPermissions: 0o600])
            else { throw CLIFailure("--output \(path): the bundle could not be written there") }
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

    /// `value` with every secret-named key's string masked and every string run through
    /// ``GatewayRecentLog/masked(_:)``.
    static func withoutSecrets(_ value: Any, key: String? = nil) -> Any {
        if let object = value as? [String: Any] {
            return object.reduce(into: [String: Any]()) { $0[$1.key] = withoutSecrets($1.value, key: $1.key) }
        }
        if let array = value as? [Any] { return array.map { withoutSecrets($0, key: key) } }
        if let text = value as? String {
            if let key, isSecret(key), !text.isEmpty { return "•••" }
            return GatewayRecentLog.masked(text)
        }
        return value
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
