import ArgumentParser
import Foundation
import Hummingbird
import ODataCore
import ODataServer
import ODataStore

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the reference OData service (V4 at /odata/v4/, V2 at /odata/v2/)."
    )

    @Option(help: "A $metadata document to serve (with --data).") var metadata: String?
    @Option(help: "A folder of <EntitySet>.json collections (V4 or V2 JSON) to load into a new store.") var data: String?
    @Option(help: "A built-in sample model: sales.") var sample: String?
    @Option(help: "Sample size: N business partners and about 10×N orders.") var scale = 20
    @Option(help: "The store file (kept between runs); a temporary store when omitted.") var store: String?
    @Option(help: "Encryption key for the store.") var key: String?
    @Option(help: "Port to listen on.") var port = 8080
    @Option(help: "Address to listen on (loopback unless you say otherwise).") var host = "127.0.0.1"
    @Option(help: "Default page size.") var pageSize = 100
    @Option(help: "A JSON file of fault rules (see docs/server.md).") var faults: String?
    @Option(help: "A folder for stores that offline clients send for support (sendStore); not taken when omitted.") var supportDir: String?
    @Flag(help: ArgumentHelp("Require SAP Gateway's CSRF token on modifying requests and $batch.",
                             discussion: "A GET with 'X-CSRF-Token: Fetch' answers a token bound to a session cookie; POST, PUT, PATCH, "
                                 + "MERGE and DELETE without a valid token and cookie get 403 with 'X-CSRF-Token: Required'."))
    var csrf = false
    @Option(help: "How long a CSRF token stays valid, in seconds.") var csrfLifetime = 1800
    @Flag(help: "Play a backend without change tracking: no delta links, Prefer: odata.track-changes ignored.")
    var noDelta = false
    @Flag(help: "Play a backend that ignores repeatable-request headers: a resent request is applied again.")
    var noRepeatability = false
    @Flag(help: "Play a backend without ETags: none in answers, If-Match and If-None-Match ignored.")
    var noEtags = false
    @Flag(help: "Accept PUT, PATCH, MERGE and DELETE without If-Match (428 Precondition Required otherwise).")
    var allowUnconditionalWrites = false
    @Option(help: ArgumentHelp("Require HTTP Basic authentication with USER:PASSWORD (401 otherwise).", valueName: "USER:PASSWORD"))
    var basicAuth: String?
    @Option(help: ArgumentHelp("Require 'Authorization: Bearer TOKEN' (401 otherwise); repeatable.", valueName: "TOKEN"))
    var bearerToken: [String] = []
    @Option(help: ArgumentHelp("A JSON file of users who see different rows (see docs/server.md); every request "
                                   + "must be one of them (401 otherwise).", valueName: "FILE"))
    var users: String?
    @Option(help: ArgumentHelp("Log to standard error from this level (default error: internal errors; debug shows each request).",
                               valueName: "LEVEL"))
    var logLevel: String?

    func run() async throws {
        guard (sample == nil) != (metadata == nil) else { throw CLIFailure("give either --sample sales or --metadata FILE") }
        if let sample, sample != "sales" { throw CLIFailure("unknown sample '\(sample)'; the built-in sample is 'sales'") }
        let model: Model
        do {
            model = sample != nil ? try SalesSample.model() : try loadModel(metadata ?? "")
        } catch let error as CLIFailure {
            throw error
        } catch {
            throw CLIFailure("\(error)")
        }
        let path = store ?? FileManager.default.temporaryDirectory.appendingPathComponent("oodata-serve-\(UUID().uuidString).sqlite").path
        // A temporary store goes when the server stops, with its journal files, whatever stops it.
        defer { if store == nil { Self.removeStoreFiles(path) } }
        let existed = FileManager.default.fileExists(atPath: path)
        let opened: Store = try await storeFailure {
            existed ? try await Store.open(path: path, key: key) : try await Store.create(path: path, model: model, key: key)
        }
        // Closed before its files go (defers run last first).
        defer { opened.close() }
        var options = ODataService.Options()
        // Internal errors (a 500 names its id in the log) always reach standard error.
        options.logger = try standardErrorLogger(level: logLevel ?? "error")
        options.pageSize = pageSize
        options.supportDirectory = supportDir
        options.requireIfMatch = !allowUnconditionalWrites
        options.tracksChanges = !noDelta
        options.honorsRepeatableRequests = !noRepeatability
        options.sendsETags = !noEtags
        if sample != nil { options.serverGeneratedKeys = SalesSample.serverGeneratedKeys }
        if csrf {
            guard csrfLifetime > 0 else { throw CLIFailure("--csrf-lifetime must be positive") }
            options.csrf = CSRFProtection(tokenLifetime: .seconds(csrfLifetime))
        }
        if let users {
            guard basicAuth == nil, bearerToken.isEmpty else {
                throw CLIFailure("give either --users or --basic-auth/--bearer-token, not both")
            }
            let loaded: ServiceUsers
            do {
                loaded = try ServiceUsers.load(path: users)
            } catch let error as ServiceUsersError {
                // The message names the file.
                throw CLIFailure("cannot use the users file \(error.message)")
            }
            do {
                // Checked against the model being served, so that a bad filter stops the start.
                try loaded.check(against: opened.model)
            } catch {
                throw CLIFailure("cannot use the users file \(users): \(error.message)")
            }
            options.users = loaded
        }
        switch (basicAuth, bearerToken.isEmpty) {
        case (let basic?, true):
            guard let colon = basic.firstIndex(of: ":"), colon != basic.startIndex else { throw CLIFailure("--basic-auth needs USER:PASSWORD") }
            options.requiredCredentials = .basic(user: String(basic[..<colon]), password: String(basic[basic.index(after: colon)...]))
        case (nil, false):
            options.requiredCredentials = .bearer(Set(bearerToken))
        case (nil, true): break
        case (_?, false): throw CLIFailure("give either --basic-auth or --bearer-token, not both")
        }
        var rules: [FaultRule] = []
        if let faults {
            do { rules = try FaultInjector.rules(fromFile: faults) } catch { throw CLIFailure("cannot read fault rules \(faults): \(error)") }
        }
        let service = try await storeFailure { try await ODataService.open(store: opened, options: options, faults: rules) }
        if !existed {
            if sample != nil {
                try await storeFailure { try await service.load(SalesSample.data(scale: scale)) }
            } else if let data {
                try await storeFailure { try await service.load(try Self.readData(data, model)) }
            }
        }
        let app = ODataHTTPServer.application(service: service, host: host, port: port) { port in
            var text = "OData V4: http://\(host):\(port)/odata/v4/\nOData V2: http://\(host):\(port)/odata/v2/\nstore: \(path)\(existed ? " (existing)" : "")\n"
            if let supportDir { text += "stores sent for support: http://\(host):\(port)/support/stores/<name> → \(supportDir)\n" }
            FileHandle.standardOutput.write(Data(text.utf8))
        }
        do {
            try await app.runService()
        } catch {
            let text = String(describing: error)
            if text.contains("Address already in use") || text.contains("EADDRINUSE") {
                throw CLIFailure("cannot listen on \(host):\(port): the address is already in use (choose another --port, or 0 for any free one)")
            }
            if text.lowercased().contains("bind(") || text.contains("Cannot assign requested address") {
                throw CLIFailure("cannot listen on \(host):\(port): \(text)")
            }
            throw error
        }
    }

    /// Removes a store file and the journal files SQLite keeps beside it.
    static func removeStoreFiles(_ path: String) {
        for suffix in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    static func readData(_ folder: String, _ model: Model) throws -> [(entitySet: String, entities: [Entity])] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        var result: [(entitySet: String, entities: [Entity])] = []
        for file in files.sorted() where file.hasSuffix(".json") {
            let set = String(file.dropLast(5))
            guard let type = model.entityType(ofEntitySet: set) else { throw CLIFailure("\(file): \(set) is not an entity set of the model") }
            let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: folder).appendingPathComponent(file)))
            do {
                let root = try JSONValue.parse(bytes)
                let entities = root["d"] != nil ? try V2JSONReader(model: model).readCollection(bytes, entityType: type.qualifiedName).entities
                    : try V4JSONReader(model: model).readCollection(bytes, entityType: type.qualifiedName).entities
                result.append((set, entities))
            } catch {
                throw CLIFailure("\(file): \(error)")
            }
        }
        return result
    }
}
