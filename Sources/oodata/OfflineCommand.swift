import ArgumentParser
import Foundation
import Logging
import ODataCore
import ODataStore
import OfflineOData

/// Prints progress as a bar on a terminal and as plain lines otherwise.
final class ProgressPrinter: OfflineODataDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private let terminal = isatty(STDOUT_FILENO) == 1
    private var lastLine = ""
    private(set) var failures: [OfflineODataFailedRequest] = []
    private(set) var metadataChanges: [OfflineODataMetadataChange] = []
    private(set) var resolvedConflicts: [OfflineODataConflictResolved] = []

    func offlineODataProvider(didUpdate progress: OfflineODataProgress) {
        lock.withLock {
            if terminal {
                let width = 24
                let filled = progress.totalSteps > 0 ? width * progress.stepNumber / progress.totalSteps : 0
                let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
                let text = String(progress.message.prefix(90))
                print("\r\u{1B}[2K  \(bar) \(text)", terminator: "")
            } else if progress.message != lastLine {
                print("  \(progress.message)")
            }
            // Standard output is buffered (fully, when it is a pipe): each step shows at once.
            fflush(nil)
            lastLine = progress.message
        }
    }

    func offlineODataProvider(requestDidFail request: OfflineODataFailedRequest) {
        lock.withLock { failures.append(request) }
    }

    func offlineODataProvider(_ provider: OfflineODataProvider, didChangeMetadata change: OfflineODataMetadataChange) {
        lock.withLock { metadataChanges.append(change) }
    }

    func offlineODataProvider(
        _ provider: OfflineODataProvider, didResolveConflict resolution: OfflineODataConflictResolved
    ) {
        lock.withLock { resolvedConflicts.append(resolution) }
    }

    /// What a migration to a changed `$metadata` did, for people (SPEC §14).
    static func describe(_ change: OfflineODataMetadataChange) -> [String] {
        var lines: [String] = []
        switch change.kind {
        case .additive:
            lines.append("the backend's $metadata changed (additive): the store was migrated in place")
        case .neutral:
            lines.append("the backend's $metadata changed, not in anything the store keeps: it follows the new model")
        case .breaking:
            lines.append(
                "the backend's $metadata changed (breaking): a new store was downloaded and the queue replayed onto it")
        }
        for item in change.changes { lines.append("  \(item.kind.rawValue): \(item.what)") }
        if !change.reReadDefiningQueries.isEmpty {
            lines.append("  read again in full: " + change.reReadDefiningQueries.joined(separator: ", "))
        }
        for (name, problem) in change.leftOutDefiningQueries.sorted(by: { $0.key < $1.key }) {
            lines.append("  defining query \(name) left out: \(problem)")
        }
        if !change.archivedRequests.isEmpty {
            let ids = change.archivedRequests.map(String.init).joined(separator: ", ")
            lines.append(
                "  \(change.archivedRequests.count) queued requests no longer fit and are in the ErrorArchive "
                    + "(requests \(ids)); see `oodata offline errors`")
        }
        return lines
    }

    /// Ends a progress bar line.
    func finish() {
        lock.withLock {
            if terminal && !lastLine.isEmpty { print("\r\u{1B}[2K", terminator: "") }
            lastLine = ""
        }
    }
}

/// Options every offline command shares.
struct OfflineStoreOptions: ParsableArguments {
    @Option(help: "The store file (created by `offline open`).") var store: String
    @Option(help: "The store's encryption key.") var key: String?
    @Flag(name: .customLong("optimize-queue"), help: "Combine queued requests before upload (SPEC §6.1).") var optimizeQueue = false
    @Flag(name: .customLong("undo-local-creation"), help: "Drop requests of entities created and deleted locally (SPEC §6.2).") var undoLocalCreation = false
    @Flag(name: .customLong("transaction-builder"), help: "Group requests by transaction ID into change sets (SPEC §6.3).") var transactionBuilder = false
    @Flag(name: .customLong("individual-error-deletion"), help: "Delete single ErrorArchive rows with their dependants (SPEC §7).") var individualErrorDeletion = false
    @Flag(name: .customLong("no-batch"), help: "The backend has no $batch: upload request by request, in queue order.") var noBatch = false
    @Flag(name: .customLong("no-csrf"), help: "Do not fetch or send SAP Gateway's X-CSRF-Token.") var noCSRF = false
    @Flag(name: .customLong("no-server-store"),
          help: "A first open through a sync gateway pages, even when the gateway offers a store file.")
    var noServerStore = false
    @Option(
        name: .customLong("conflicts"),
        help: ArgumentHelp(
            "How an upload resolves a 412 or 428 (SPEC §15): archive (default), mergeDisjoint, clientWins, "
                + "backendWins (the SPEC's names; merge-disjoint, client-wins, backend-wins also work).",
            valueName: "POLICY"))
    var conflicts: String?
    @Flag(name: .customLong("check-metadata"),
          help: "Opening an existing store also checks the backend's $metadata and migrates the store (SPEC §14).")
    var checkMetadata = false
    @Option(help: ArgumentHelp("HTTP Basic user; the password comes from --password or $OODATA_PASSWORD.", valueName: "USER")) var user: String?
    @Option(help: "HTTP Basic password (prefer $OODATA_PASSWORD: a command line is visible to other users).") var password: String?
    @Option(help: ArgumentHelp("A bearer token to send (or $OODATA_BEARER_TOKEN).", valueName: "TOKEN")) var bearerToken: String?
    @Option(help: ArgumentHelp("Appended to every request URL, e.g. sap-client=100.", valueName: "QUERY")) var urlSuffix: String?
    @Option(name: .customLong("header"), help: ArgumentHelp("A header for every request, NAME:VALUE (repeatable).", valueName: "NAME:VALUE"))
    var headers: [String] = []
    @Option(help: ArgumentHelp("Log to standard error from this level: trace, debug, info, notice, warning, error, critical.",
                               valueName: "LEVEL"))
    var logLevel: String?
    @Option(name: .customLong("current-user"),
            help: ArgumentHelp("The user working with a shared store now (SPEC §16); another user than the last switches it.",
                               valueName: "NAME"))
    var currentUser: String?
    @Flag(name: .customLong("force-upload-on-user-switch"),
          help: "A switch first uploads the previous user's pending requests with their --user-credentials.")
    var forceUploadOnUserSwitch = false
    @Option(name: .customLong("user-credentials"),
            help: ArgumentHelp("Basic credentials of another user, for their own requests only (repeatable).",
                               valueName: "NAME=USER:PASSWORD"))
    var userCredentials: [String] = []
    @Option(name: .customLong("user-switch-policy"),
            help: ArgumentHelp("What a switch does with the previous user's requests it does not upload: refuse "
                                   + "(default), keep (for their user) or discard (after a backup on the gateway).",
                               valueName: "POLICY"))
    var userSwitchPolicy: String?
    @Option(name: .customLong("user-switch-backup-key"),
            help: ArgumentHelp("The key that backup is encrypted with (or $OODATA_USER_SWITCH_BACKUP_KEY).",
                               valueName: "KEY"))
    var userSwitchBackupKey: String?

    /// The credentials the options and environment give.
    func credentials() throws -> ODataCredentials? {
        let environment = ProcessInfo.processInfo.environment
        if let user {
            // Options win over the environment: `--user` ignores $OODATA_BEARER_TOKEN.
            guard bearerToken == nil else { throw CLIFailure("give either --user or --bearer-token, not both") }
            guard let password = password ?? environment["OODATA_PASSWORD"] else {
                throw CLIFailure("--user \(user) needs a password: set $OODATA_PASSWORD or give --password")
            }
            return .basic(user: user, password: password)
        }
        guard password == nil else { throw CLIFailure("--password needs --user") }
        return (bearerToken ?? environment["OODATA_BEARER_TOKEN"]).map { .bearer($0) }
    }

    func parameters() throws -> OfflineODataParameters {
        var parameters = OfflineODataParameters()
        parameters.backendSupportsBatch = !noBatch
        parameters.csrfProtection = !noCSRF
        parameters.acceptsServerBuiltStore = !noServerStore
        parameters.checksMetadataAtOpen = checkMetadata
        // The SPEC's and the docs' names (`mergeDisjoint`), and the dashed forms, in any case.
        switch conflicts.map({ $0.lowercased().replacingOccurrences(of: "-", with: "") }) {
        case nil, "archive": parameters.conflictPolicy = .archive
        case "mergedisjoint": parameters.conflictPolicy = .mergeDisjoint
        case "clientwins": parameters.conflictPolicy = .clientWins
        case "backendwins": parameters.conflictPolicy = .backendWins
        case .some:
            throw ValidationError(
                "--conflicts \(conflicts ?? ""): give archive, mergeDisjoint, clientWins or backendWins")
        }
        parameters.urlSuffix = urlSuffix
        parameters.authenticator = try credentials().map { StaticCredentials($0) }
        for header in headers {
            guard let colon = header.firstIndex(of: ":"), colon != header.startIndex else { throw CLIFailure("--header \(header) must be NAME:VALUE") }
            parameters.customHeaders[String(header[..<colon])] = header[header.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        parameters.enableRequestQueueOptimization = optimizeQueue
        parameters.enableUndoLocalCreation = undoLocalCreation
        parameters.enableTransactionBuilder = transactionBuilder
        parameters.enableIndividualErrorArchiveDeletion = individualErrorDeletion
        let url = URL(fileURLWithPath: store)
        parameters.storePath = url.deletingLastPathComponent()
        parameters.storeName = url.lastPathComponent.hasSuffix(".db") ? String(url.lastPathComponent.dropLast(3)) : url.lastPathComponent
        parameters.storeEncryptionKey = key
        if let logLevel { parameters.logger = try standardErrorLogger(level: logLevel) }
        parameters.currentUser = currentUser
        parameters.forceUploadOnUserSwitch = forceUploadOnUserSwitch
        for entry in userCredentials {
            guard let equals = entry.firstIndex(of: "="), let colon = entry[equals...].firstIndex(of: ":"),
                equals != entry.startIndex
            else { throw CLIFailure("--user-credentials \(entry.prefix { $0 != ":" }) must be NAME=USER:PASSWORD") }
            let name = String(entry[..<equals])
            let user = String(entry[entry.index(after: equals)..<colon])
            let password = String(entry[entry.index(after: colon)...])
            parameters.userAuthenticators[name] = StaticCredentials(.basic(user: user, password: password))
        }
        switch userSwitchPolicy?.lowercased() {
        case nil, "refuse": parameters.userSwitchPolicy = .refuse
        case "keep", "keepfortheiruser": parameters.userSwitchPolicy = .keepForTheirUser
        case "discard", "discardafterbackup", "discard_after_backup": parameters.userSwitchPolicy = .discardAfterBackup
        case .some(let other): throw ValidationError("--user-switch-policy \(other): give refuse, keep or discard")
        }
        parameters.userSwitchBackupKey = userSwitchBackupKey
            ?? ProcessInfo.processInfo.environment["OODATA_USER_SWITCH_BACKUP_KEY"]
        return parameters
    }

    /// Opens the provider of an existing store.
    func provider(_ printer: ProgressPrinter? = nil) async throws -> OfflineODataProvider {
        let parameters = try parameters()
        guard let root = try await OfflineODataProvider.storedServiceRoot(parameters: parameters) else {
            throw CLIFailure("No offline store at \(parameters.storeFile); create it with `oodata offline open`")
        }
        let provider = OfflineODataProvider(serviceRoot: root, parameters: parameters, delegate: printer)
        try await provider.open()
        return provider
    }
}

/// What a local change can carry (SPEC §4): a transaction ID (with `--transaction-builder` at
/// upload, one change set per ID), an upload category (`upload --category`) and a custom tag.
struct LocalWriteOptions: ParsableArguments {
    @Option(help: "Custom tag shown in RequestQueue and ErrorArchive.") var tag: String?
    @Option(help: ArgumentHelp("Transaction ID: requests with the same one go in one change set (upload --transaction-builder).",
                               valueName: "ID"))
    var transactionID: String?
    @Option(help: ArgumentHelp("Upload category: `upload --category NAME` sends only requests of the categories named.",
                               valueName: "NAME"))
    var category: String?

    var requestOptions: OfflineODataRequestOptions {
        OfflineODataRequestOptions(transactionID: transactionID, customTag: tag, uploadCategory: category)
    }
}

/// A logger that writes to standard error from `level` on.
func standardErrorLogger(level: String) throws -> Logger {
    guard let parsed = Logger.Level(rawValue: level.lowercased()) else {
        throw CLIFailure("--log-level \(level) must be one of trace, debug, info, notice, warning, error, critical")
    }
    var logger = Logger(label: "oodata") { label in StreamLogHandler.standardError(label: label) }
    logger.logLevel = parsed
    return logger
}

struct OfflineCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "offline",
        abstract: "Work with an offline store: open, read and change it locally, upload and download.",
        subcommands: [Open.self, Read.self, Create.self, Update.self, Delete.self, Media.self, Upload.self, Download.self, SendStore.self, Errors.self, Queue.self,
                      Events.self, Undo.self]
    )

    struct Open: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create the store from a service's defining queries (or reopen it).")
        @Option(help: "The service root URL.") var service: String
        @Option(name: .customLong("define"), help: "A defining query, NAME=QUERY (repeatable).") var definitions: [String] = []
        @Option(name: .customLong("streams"), help: "A defining query (by NAME) that also retrieves media streams (repeatable).") var streamQueries: [String] = []
        @Option(name: .customLong("index"),
                help: ArgumentHelp("An index for local queries, SET=PROPERTY,PROPERTY (repeatable; on a reopen, replaces the store's).",
                                   valueName: "SET=PROPS"))
        var indexes: [String] = []
        @OptionGroup var options: OfflineStoreOptions

        func run() async throws {
            guard let root = URL(string: service), root.scheme != nil else { throw CLIFailure("--service \(service) is not an absolute URL") }
            let printer = ProgressPrinter()
            var parameters = try options.parameters()
            if !indexes.isEmpty {
                var declared: [String: [[String]]] = [:]
                for text in indexes {
                    guard let index = try? StoreIndex(parsing: text) else { throw CLIFailure("--index \(text) must be SET=PROPERTY,PROPERTY") }
                    declared[index.entitySet, default: []].append(index.properties)
                }
                parameters.indexes = declared
            }
            // A reopen: the store keeps the service it was made for, and learns of new queries.
            var serviceRoot = root
            var known: Set<String>?
            // (A store that does not open here, damaged or never filled, is the open's to handle.)
            let summary = (try? await OfflineODataProvider.storedSummary(parameters: parameters)) ?? nil
            if let summary, let stored = summary.serviceRoot {
                if Self.normalized(stored) != Self.normalized(root) {
                    FileHandle.standardError.write(Data(
                        ("warning: \(parameters.storeFile) was made for \(stored.absoluteString); --service \(service) is ignored "
                            + "(every command talks to the store's service; delete the store to change services)\n").utf8))
                    serviceRoot = stored
                }
                // The store's own queries, read without opening it as a provider (a store whose
                // first fill never ended is the open's to fill).
                known = Set(summary.definingQueryNames)
            }
            let provider = OfflineODataProvider(serviceRoot: serviceRoot, parameters: parameters, delegate: printer)
            for definition in definitions {
                let parts = definition.split(separator: "=", maxSplits: 1)
                guard parts.count == 2 else { throw CLIFailure("--define \(definition) must be NAME=QUERY") }
                try await provider.add(definingQuery: OfflineODataDefiningQuery(name: String(parts[0]), query: String(parts[1]),
                                                                                automaticallyRetrievesStreams: streamQueries.contains(String(parts[0]))))
            }
            for name in streamQueries where !definitions.contains(where: { $0.hasPrefix(name + "=") }) {
                throw CLIFailure("--streams \(name) names no --define")
            }
            try await provider.open()
            printer.finish()
            for change in printer.metadataChanges {
                for line in ProgressPrinter.describe(change) { print(line) }
            }
            for query in await provider.currentDefiningQueries {
                let set = query.query.split(separator: "?").first.map(String.init) ?? query.query
                guard let count = try? await provider.read("\(set)/$count") else {
                    print("\(query.name): left out (it does not bind to the backend's $metadata)")
                    continue
                }
                if case .count(let n) = count { print("\(query.name): \(n) \(set)") }
                if let known, !known.contains(query.name) {
                    FileHandle.standardError.write(Data(
                        ("note: \(query.name) is a new defining query of an existing store: its data arrives with the next "
                            + "`oodata offline download`\n").utf8))
                }
            }
            await provider.close()
        }

        /// A service root as compared: lowercased scheme and host, no default port, no trailing
        /// slash.
        static func normalized(_ url: URL) -> String {
            var text = url.absoluteString
            while text.hasSuffix("/") { text.removeLast() }
            guard var components = URLComponents(string: text) else { return text }
            components.scheme = components.scheme?.lowercased()
            components.host = components.host?.lowercased()
            if components.port == (components.scheme == "https" ? 443 : 80) { components.port = nil }
            return components.string ?? text
        }
    }

    struct Read: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Read from the store with the OData query language.")
        @OptionGroup var options: OfflineStoreOptions
        @Argument(help: "Relative URL, e.g. \"SalesOrders?$filter=GrossAmount gt 100\".") var url: String
        @Option(help: "Write the answer (e.g. a media stream, Set(key)/$value) to this file instead of printing it.") var output: String?

        func run() async throws {
            let provider = try await options.provider()
            let response = try await provider.execute(method: "GET", url: url)
            let path = ODataRouter.resourcePath(of: url, serviceRoot: "")
            let set = String(path.prefix { $0 != "/" && $0 != "(" })
            if !set.isEmpty, !set.hasPrefix("$"), try await !provider.readableEntitySets().contains(set),
                try await provider.model.entitySet(set) != nil
            {
                FileHandle.standardError.write(Data(
                    "note: no defining query downloads \(set), so the store has no \(set) to read; add one with `oodata offline open --define NAME=\(set)`\n".utf8))
            }
            if response.status == 404 {
                await provider.close()
                throw CLIFailure("\(url): the offline store has no such entity (404)")
            }
            if let output {
                try Data(response.body).write(to: URL(fileURLWithPath: output))
                print("wrote \(response.body.count) bytes\(response.headers["Content-Type"].map { " (\($0))" } ?? "") to \(output)")
            } else {
                print(String(decoding: response.body, as: UTF8.self))
            }
            await provider.close()
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create an entity locally (queued for upload).")
        @OptionGroup var options: OfflineStoreOptions
        @Argument(help: "Entity set or collection navigation path.") var url: String
        @Argument(help: "The entity as JSON.") var body: String
        @OptionGroup var write: LocalWriteOptions

        func run() async throws {
            let provider = try await options.provider()
            let response = try await provider.execute(method: "POST", url: url, body: Array(body.utf8), options: write.requestOptions)
            print(String(decoding: response.body, as: UTF8.self))
            await provider.close()
        }
    }

    struct Update: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Update an entity locally: merge, or replace with --replace.")
        @OptionGroup var options: OfflineStoreOptions
        @Argument(help: "The entity, e.g. \"BusinessPartners('BP1')\".") var url: String
        @Argument(help: "The changed properties as JSON.") var body: String
        @Flag(help: "Replace (PUT) instead of merge.") var replace = false
        @OptionGroup var write: LocalWriteOptions

        func run() async throws {
            let provider = try await options.provider()
            let legacy = try await provider.model.version.isLegacy
            _ = try await provider.execute(method: replace ? "PUT" : (legacy ? "MERGE" : "PATCH"), url: url, body: Array(body.utf8),
                                           options: write.requestOptions)
            print("updated \(url) locally; \(try await provider.hasPendingUpload ? "queued for upload" : "")")
            await provider.close()
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete an entity locally (queued for upload).")
        @OptionGroup var options: OfflineStoreOptions
        @Argument(help: "The entity, e.g. \"BusinessPartners('BP1')\".") var url: String
        @OptionGroup var write: LocalWriteOptions

        func run() async throws {
            let provider = try await options.provider()
            _ = try await provider.execute(method: "DELETE", url: url, options: write.requestOptions)
            print("deleted \(url) locally; queued for upload")
            await provider.close()
        }
    }

    struct Media: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Change media locally (queued for upload): a new stream for Set(key)/$value, or a new media entity in Set.")
        @OptionGroup var options: OfflineStoreOptions
        @Argument(help: "\"ProductPictures('PIC1')/$value\" (replace its stream) or \"ProductPictures\" (create a media entity).") var url: String
        @Option(help: "The file that holds the stream.") var file: String
        @Option(name: .customLong("content-type"), help: "The stream's media type.") var contentType = "application/octet-stream"
        @Option(help: "Slug header for a create (the backend may take the key or a file name from it).") var slug: String?
        @OptionGroup var write: LocalWriteOptions

        func run() async throws {
            let body: [UInt8]
            do {
                body = Array(try Data(contentsOf: URL(fileURLWithPath: file)))
            } catch {
                throw CLIFailure("--file \(file) cannot be read: \(error.localizedDescription)")
            }
            let provider = try await options.provider()
            let path = url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? url
            var headers = ["Content-Type": contentType]
            if let slug { headers["Slug"] = slug }
            let response = try await provider.execute(method: path.hasSuffix("/$value") ? "PUT" : "POST", url: url, headers: headers, body: body,
                                                      options: write.requestOptions)
            if response.body.isEmpty {
                print("replaced the stream of \(path.dropLast("/$value".count)) locally (\(body.count) bytes); queued for upload")
            } else {
                print(String(decoding: response.body, as: UTF8.self))
            }
            await provider.close()
        }
    }

    struct Upload: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Send the request queue to the backend.")
        @OptionGroup var options: OfflineStoreOptions
        @Option(name: .customLong("category"), help: "Only requests of this upload category (repeatable).") var categories: [String] = []

        func run() async throws {
            let printer = ProgressPrinter()
            let provider = try await options.provider(printer)
            try await provider.upload(categories: categories.isEmpty ? nil : categories)
            printer.finish()
            for resolved in printer.resolvedConflicts {
                print(
                    "conflict resolved: request \(resolved.requestID) \(resolved.method) \(resolved.url) → "
                        + "\(resolved.outcome.rawValue) (\(resolved.policy))")
            }
            for failure in printer.failures {
                print("failed: request \(failure.requestID) \(failure.method) \(failure.url) → HTTP \(failure.httpStatus) \(failure.code): \(failure.message)")
            }
            let failed = printer.failures.count
            let waiting = failed > 0 ? "; \(failed) failed in the ErrorArchive (`oodata offline errors`)" : ""
            print((try await provider.isRequestQueueEmpty ? "upload done; the queue is empty" : "upload done; requests remain queued") + waiting)
            await provider.close()
        }
    }

    struct Download: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Fetch changes for the defining queries.")
        @OptionGroup var options: OfflineStoreOptions
        @Option(name: .customLong("query"), help: "Only this defining query (repeatable).") var queries: [String] = []

        func run() async throws {
            let printer = ProgressPrinter()
            let provider = try await options.provider(printer)
            try await provider.download(definingQueries: queries.isEmpty ? nil : queries)
            printer.finish()
            for change in printer.metadataChanges {
                for line in ProgressPrinter.describe(change) { print(line) }
            }
            let last = try await provider.readEntities("EventLog?$orderby=ID desc&$top=1").first
            if case .primitive(.string(let details))? = last?["Details"] { print("download done: \(details)") }
            await provider.close()
        }
    }

    struct Errors: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the ErrorArchive; --clear deletes it and reverts those changes.",
            discussion: "With --individual-error-deletion, --delete ID removes only that request and the requests that depend on it.")
        @OptionGroup var options: OfflineStoreOptions
        @Flag(help: "Clear the archive.") var clear = false
        @Option(help: "Delete the row of this request ID.") var delete: Int64?

        func validate() throws {
            if clear && delete != nil { throw ValidationError("give either --clear or --delete ID, not both") }
        }

        func run() async throws {
            let provider = try await options.provider()
            let rows = try await provider.readEntities("ErrorArchive?$orderby=RequestID")
            for row in rows {
                let fields = [
                    "RequestID", "HTTPStatusCode", "Code", "Message", "RequestMethod", "RequestURL", "CustomTag",
                ]
                print(describe(row, fields))
                // A conflict: the properties in which the three copies differ, side by side.
                guard case .primitive(.int64(let id))? = row["RequestID"],
                      let copies = try await provider.conflictCopies(forRequest: id),
                      copies.backend != nil || copies.original != nil
                else { continue }
                for line in conflictLines(copies) { print(line) }
            }
            if rows.isEmpty { print("the ErrorArchive is empty") }
            if let delete {
                _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(delete))")
                let left = try await provider.readEntities("ErrorArchive").count
                print("deleted; \(rows.count - left) entries removed and their changes reverted, \(left) left")
            } else if clear {
                // By default one delete clears the whole archive; with individual deletion each
                // delete removes one entry and its dependants, so delete until none is left.
                var left = rows
                while let first = left.first, case .primitive(.int64(let id))? = first["RequestID"] {
                    _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(id))")
                    let now = try await provider.readEntities("ErrorArchive?$orderby=RequestID")
                    guard now.count < left.count else {
                        throw CLIFailure("ErrorArchive(\(id)) was not removed; \(now.count) entries are left")
                    }
                    left = now
                }
                print("cleared \(rows.count - left.count) entries and reverted their changes")
            }
            await provider.close()
        }
    }

    struct Queue: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the request queue.",
            discussion: "With --optimize-queue or --undo-local-creation, the algorithms run first and the queue shows their result.")
        @OptionGroup var options: OfflineStoreOptions

        func run() async throws {
            let provider = try await options.provider()
            if options.optimizeQueue || options.undoLocalCreation {
                let removed = try await provider.applyQueueAlgorithms()
                print("the queue algorithms removed \(removed) requests")
            }
            let rows = try await provider.readEntities("RequestQueue?$orderby=RequestID")
            for row in rows {
                print(describe(row, ["RequestID", "Status", "RequestMethod", "RequestURL", "RequestBody", "TransactionID", "CustomTag", "UploadCategory"]))
            }
            if rows.isEmpty { print("the request queue is empty") }
            await provider.close()
        }
    }

    struct SendStore: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "send-store",
                                                        abstract: "Send a copy of the store for support (re-keyed with --support-key when the store has a key).")
        @OptionGroup var options: OfflineStoreOptions
        @Option(help: "Where to send it, e.g. http://127.0.0.1:8080/support/stores/device-1.db (oodata serve --support-dir).") var to: String
        @Option(help: "The key of the copy (required for a store with a key; the store's own key is never sent).") var supportKey: String?

        func run() async throws {
            let printer = ProgressPrinter()
            let provider = try await options.provider(printer)
            try await provider.sendStore(to: to, supportKey: supportKey)
            printer.finish()
            print("sent a copy of the store to \(to)" + (supportKey == nil ? "" : ", encrypted with the support key"))
            await provider.close()
        }
    }

    struct Events: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show the EventLog: the last 100 opens, uploads, downloads and store sends.")
        @OptionGroup var options: OfflineStoreOptions

        func run() async throws {
            let provider = try await options.provider()
            for row in try await provider.readEntities("EventLog?$orderby=ID") { print(describe(row, ["ID", "Type", "Time", "Details"])) }
            await provider.close()
        }
    }

    struct Undo: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Undo the pending changes of entities, and of the changes that depend on them.")
        @OptionGroup var options: OfflineStoreOptions
        @Argument(help: "The entities, e.g. \"BusinessPartners('BP1')\".") var urls: [String]

        func run() async throws {
            let provider = try await options.provider()
            let before = try await provider.readEntities("RequestQueue").count
            try await provider.undoPendingChanges(forURLs: urls)
            let after = try await provider.readEntities("RequestQueue").count
            print("undid the pending changes of \(urls.joined(separator: ", ")); \(before - after) queued requests removed")
            await provider.close()
        }
    }
}

/// The properties in which the three copies of a conflict differ: one line each, with the
/// original, local and backend values.
func conflictLines(_ copies: OfflineODataConflictCopies) -> [String] {
    var names: [String] = []
    for entity in [copies.original, copies.local, copies.backend].compactMap({ $0 }) {
        for property in entity.properties where !names.contains(property.name) { names.append(property.name) }
    }
    func text(_ entity: Entity?, _ name: String) -> String {
        guard let entity else { return "(none)" }
        guard let value = entity[name], value != .null else { return "null" }
        return Literal.format(value)
    }
    var lines: [String] = ["  conflict: property | original | local | backend"]
    for name in names {
        let values = [copies.original, copies.local, copies.backend].map { text($0, name) }
        guard Set(values).count > 1 else { continue }
        lines.append("    \(name) | " + values.joined(separator: " | "))
    }
    if let etag = copies.backend?.control.etag { lines.append("    backend ETag \(etag)") }
    return lines
}

/// `Name=value` pairs of an entity's properties, for listings.
func describe(_ entity: Entity, _ names: [String]) -> String {
    names.compactMap { name -> String? in
        guard let value = entity[name], value != .null else { return nil }
        if case .primitive(.string(let text)) = value { return "\(name)=\(text)" }
        return "\(name)=\(Literal.format(value))"
    }.joined(separator: "  ")
}
