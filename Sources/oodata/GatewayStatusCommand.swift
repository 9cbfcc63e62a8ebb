import ArgumentParser
import Foundation
import ODataCore
import ODataGateway
import OfflineOData

/// `oodata gateway status --admin URL`: a running gateway as its admin API shows it, with lag
/// thresholds and exit codes for scripts and monitoring (0 OK, 1 warning, 2 critical, 3 the
/// admin API could not be read).
struct GatewayStatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show a running gateway: readiness, scopes and their lag, requests in doubt, devices.",
        discussion: """
            Exit codes: 0 all is well; 1 a warning (a scope in use lags more than --warn-lag, a refresh \
            failed, requests are in doubt, or the instance is on standby); 2 critical (not ready, or a \
            scope lags more than --fatal-lag); 3 the admin API could not be read. Scopes no device read \
            within --active-within are idle: the refresher leaves them, and their lag is not counted.
            """)

    @OptionGroup var connection: AdminOptions
    @Option(help: ArgumentHelp("Seconds of lag that warn (default 300).", valueName: "SECONDS")) var warnLag: Double =
        300
    @Option(help: ArgumentHelp("Seconds of lag that are critical (default 1800).", valueName: "SECONDS"))
    var fatalLag: Double = 1800
    @Option(
        help: ArgumentHelp(
            "Seconds since a device last read a scope for it to count (default 7200).",
            valueName: "SECONDS")) var activeWithin: Double = 7200
    @Flag(help: "Print the admin API's answers as one JSON object instead of text.") var json = false

    func run() async throws {
        guard warnLag > 0, fatalLag >= warnLag, activeWithin > 0 else {
            throw ValidationError(
                "--warn-lag must be more than 0, --fatal-lag at least --warn-lag, --active-within more than 0")
        }
        let admin: AdminConnection
        let status: AdminStatus
        var raw: [String: Data] = [:]
        do {
            admin = try await connection.connection()
            (status, raw["status"]) = try await admin.decoded("/api/status", as: AdminStatus.self)
        } catch let failure as AdminUnreadable {
            FileHandle.standardError.write(Data("oodata: gateway status: \(failure.message)\n".utf8))
            throw ExitCode(3)
        }
        // The lists can fail on their own (PostgreSQL down: the status says not ready); what
        // could not be read is a finding, and a list that stops short is said so.
        var unread: [String] = []
        func list<T: Decodable>(_ key: String, _ path: String, as type: [T].Type) async -> [T] {
            do {
                let (value, data, more) = try await admin.listed(path, as: type)
                raw[key] = data
                if more { unread.append("\(key): more than \(value.count); only those are counted") }
                return value
            } catch {
                unread.append("\(key): \((error as? AdminUnreadable)?.message ?? "\(error)")")
                return []
            }
        }
        let scopes = await list("scopes", "/api/scopes?limit=100000", as: [ScopeSummary].self)
        let doubts = await list("inDoubt", "/api/requests/in-doubt?limit=100000", as: [InDoubtRequest].self)
        let devices = await list("devices", "/api/devices?limit=100000", as: [DeviceSummary].self)
        let verdict = GatewayStatusVerdict(
            status: status, scopes: scopes, inDoubt: doubts, unread: unread, warnLag: warnLag, fatalLag: fatalLag,
            activeWithin: activeWithin, now: Date())
        if json {
            var parts: [String] = []
            for key in raw.keys.sorted() {
                if let data = raw[key] { parts.append("\"\(key)\":" + String(decoding: data, as: UTF8.self)) }
            }
            parts.append("\"verdict\":\"\(verdict.level.word)\"")
            print("{" + parts.joined(separator: ",") + "}")
        } else {
            print(verdict.report(devices: devices))
        }
        if verdict.level != .ok { throw ExitCode(verdict.level.rawValue) }
    }

}

/// How the `gateway` commands that read a running gateway reach its admin API.
struct AdminOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The gateway's admin URL (its --admin-port).", valueName: "URL")) var admin: String
    @Option(
        help: ArgumentHelp(
            "The admin token (prefer $OODATA_ADMIN_TOKEN: a command line is visible to other users).",
            valueName: "TOKEN")) var token: String?
    @Option(
        help: ArgumentHelp("Basic user of the admin API; its password from $OODATA_ADMIN_PASSWORD.", valueName: "USER"))
    var user: String?

    /// The admin API at `--admin`, once it answered as the admin API does: credentials are sent
    /// only then, never to the public port or anything else listening there.
    func connection() async throws -> AdminConnection {
        guard let url = URL(string: admin), ["http", "https"].contains(url.scheme?.lowercased() ?? ""),
            url.host != nil
        else {
            throw CLIFailure("--admin \(admin): give the admin port's URL, such as http://127.0.0.1:8081")
        }
        var headers = ODataCore.HTTPHeaders()
        var secrets: [String] = []
        if let user {
            guard let password = ProcessInfo.processInfo.environment["OODATA_ADMIN_PASSWORD"] else {
                throw CLIFailure("--user \(user) needs $OODATA_ADMIN_PASSWORD")
            }
            headers["Authorization"] = "Basic " + Data((user + ":" + password).utf8).base64EncodedString()
            secrets = [password, headers["Authorization"] ?? ""]
        } else if let token = token ?? ProcessInfo.processInfo.environment["OODATA_ADMIN_TOKEN"] {
            headers["Authorization"] = "Bearer " + token
            secrets = [token]
        }
        let root = admin.hasSuffix("/") ? String(admin.dropLast()) : admin
        let connection = AdminConnection(root: root, headers: headers, secrets: secrets.filter { !$0.isEmpty })
        try await connection.probe(withCredentials: headers["Authorization"] != nil)
        return connection
    }
}

/// The admin API could not be read: refused, unreachable, or not answering as it does.
struct AdminUnreadable: Error { var message: String }

/// A running gateway's admin API.
struct AdminConnection {
    var root: String
    var headers: ODataCore.HTTPHeaders
    /// The credentials given, to be masked wherever they show.
    var secrets: [String] = []
    let transport = DefaultTransport.make()

    /// Asks `/api/status` without credentials: the admin API answers 401 naming its realm. The
    /// public port (whose answers carry `OOData-Gateway`) and other servers are refused before
    /// a credential goes to them.
    func probe(withCredentials: Bool) async throws {
        let response: TransportResponse
        do {
            response = try await transport.send(
                TransportRequest(method: "GET", url: root + "/api/status"), timeout: 15)
        } catch {
            throw AdminUnreadable(message: "\(root)/api/status: \(error)")
        }
        if response.headers["OOData-Gateway"] != nil {
            throw AdminUnreadable(
                message: "\(root) is the gateway's public port (its answers carry OOData-Gateway): --admin takes "
                    + "the admin port (the gateway's --admin-port); no credentials were sent")
        }
        let realm = response.headers["WWW-Authenticate"]?.contains("oodata-gateway-admin") == true
        guard response.status == 401, realm else {
            throw AdminUnreadable(
                message: "\(root)/api/status answered \(response.status) without the admin API's realm: this is "
                    + "no gateway admin port; no credentials were sent")
        }
        guard withCredentials else {
            throw AdminUnreadable(
                message: "the admin API needs credentials: --token or $OODATA_ADMIN_TOKEN, or --user with "
                    + "$OODATA_ADMIN_PASSWORD")
        }
    }

    /// `GET path`, which must answer 200.
    func response(_ path: String) async throws -> TransportResponse {
        let response: TransportResponse
        do {
            response = try await transport.send(
                TransportRequest(method: "GET", url: root + path, headers: headers), timeout: 15)
        } catch {
            throw AdminUnreadable(message: "\(root)\(path): \(error)")
        }
        guard response.status == 200 else {
            let text = String(decoding: response.body.prefix(300), as: UTF8.self)
            throw AdminUnreadable(message: "\(root)\(path) answered \(response.status): \(text)")
        }
        return response
    }

    /// The body of `GET path`, which must answer 200.
    func body(_ path: String) async throws -> Data { Data(try await response(path).body) }

    /// `GET path` decoded as `type`, with its body.
    func decoded<T: Decodable>(_ path: String, as type: T.Type) async throws -> (T, Data) {
        let data = try await body(path)
        return (try decode(data, path, as: type), data)
    }

    /// A list of the admin API decoded, with its body and whether it stopped short of all
    /// (`OOData-More`).
    func listed<T: Decodable>(_ path: String, as type: [T].Type) async throws -> ([T], Data, more: Bool) {
        let answer = try await response(path)
        let data = Data(answer.body)
        return (try decode(data, path, as: type), data, answer.headers["OOData-More"] == "true")
    }

    private func decode<T: Decodable>(_ data: Data, _ path: String, as type: T.Type) throws -> T {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        do {
            return try decoder.decode(T.self, from: data)
        } catch {
            throw AdminUnreadable(message: "\(root)\(path) did not answer as the admin API does: \(error)")
        }
    }
}

/// What `gateway status` concludes from the admin API's answers; a value, tested on its own.
struct GatewayStatusVerdict {
    enum Level: Int32, Comparable {
        case ok = 0, warning = 1, critical = 2
        static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
        var word: String { ["OK", "WARNING", "CRITICAL"][Int(rawValue)] }
    }

    var status: AdminStatus
    var scopes: [ScopeSummary]
    var inDoubt: [InDoubtRequest]
    /// The lists that could not be read or stopped short, and why.
    var unread: [String] = []
    var warnLag: Double
    var fatalLag: Double
    var activeWithin: Double
    var now: Date

    /// Each finding with its level.
    var findings: [(Level, String)] {
        var found: [(Level, String)] = []
        // On standby alone an instance is not ready by choice: a warning, not an outage.
        let failed = status.readiness.checks.filter { !$0.ok }.map(\.name)
        let onlyStandby = status.standby && !failed.isEmpty && failed.allSatisfy { $0 == "standby" }
        if !status.ready && !onlyStandby {
            found.append((.critical, "not ready: \(status.readiness.reason ?? "?")"))
        }
        for part in unread { found.append((.warning, "not read: \(part)")) }
        if status.standby { found.append((.warning, "on standby: load balancers send no new devices")) }
        for scope in scopes where isActive(scope) {
            let lag = scope.lagSeconds ?? .infinity
            if lag > fatalLag {
                found.append((.critical, "scope \(scope.id) (\(scope.query)) lags \(Self.seconds(lag))"))
            } else if lag > warnLag {
                found.append((.warning, "scope \(scope.id) (\(scope.query)) lags \(Self.seconds(lag))"))
            }
            if let error = scope.lastError {
                found.append((.warning, "scope \(scope.id) (\(scope.query)): last refresh failed: \(error)"))
            }
        }
        let open = inDoubt.filter { $0.resolution == nil }
        if !open.isEmpty { found.append((.warning, "\(open.count) request(s) in doubt wait for an operator")) }
        return found
    }

    var level: Level { findings.map(\.0).max() ?? .ok }

    func isActive(_ scope: ScopeSummary) -> Bool { now.timeIntervalSince(scope.lastUsed) <= activeWithin }

    static func seconds(_ value: Double) -> String {
        guard value.isFinite else { return "never refreshed" }
        return value < 120 ? "\(Int(value)) s" : value < 7200 ? "\(Int(value / 60)) min" : "\(Int(value / 3600)) h"
    }

    func report(devices: [DeviceSummary]) -> String {
        let readiness = status.ready ? ", ready" : status.standby && level < .critical ? ", on standby" : ", NOT READY"
        var lines = ["gateway \(status.version): \(level.word)" + readiness]
        for check in status.readiness.checks {
            lines.append("  \(check.ok ? "ok  " : "FAIL") \(check.name): \(check.detail)")
        }
        lines.append("scopes: \(scopes.count) (\(scopes.filter(isActive).count) in use)")
        lines.append("  id | lag | rows | user | query | last error")
        for scope in scopes.prefix(50) {
            let lag = isActive(scope) ? Self.seconds(scope.lagSeconds ?? .infinity) : "idle"
            lines.append(
                "  \(scope.id) | \(lag) | \(scope.rows.map(String.init) ?? "-") | \(scope.user) | \(scope.query) | "
                    + (scope.lastError ?? "-"))
        }
        if scopes.count > 50 { lines.append("  … \(scopes.count - 50) more (--json lists every one)") }
        lines.append("requests in doubt: \(inDoubt.count)")
        for request in inDoubt.prefix(20) {
            lines.append(
                "  \(request.requestID) | \(request.state) | \(request.request) | "
                    + (request.resolution ?? "waits for an operator"))
        }
        lines.append("devices: \(devices.count)")
        for finding in findings { lines.append("\(finding.0.word): \(finding.1)") }
        return lines.joined(separator: "\n")
    }
}
