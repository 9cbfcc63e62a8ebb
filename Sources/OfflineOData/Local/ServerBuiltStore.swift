import Crypto
import Foundation
import ODataCore
import ODataStore

/// Stores built on a sync gateway for a device's first open (issue 37, SPEC §13): the gateway
/// makes the store with this package's own code (no key: the app's key never leaves the
/// device), and the device downloads the file, checks it, encrypts it with its key and then
/// downloads only what the file lacks.
public enum ServerBuiltStore {
    /// The store format of this release: a gateway builds a file only for a client of its own
    /// format (another answers "no file", and the first open pages).
    public static let format = "store-\(StoreSchema.version)/offline-1"

    /// Makes the store at `path` one self-contained file, ready to ship: its log copied into it
    /// and its journal out of WAL mode (the device's open returns it to WAL). Refuses a store
    /// whose fill did not finish or that holds local changes.
    public static func seal(path: String) throws {
        var options = Connection.Options()
        options.walMode = false
        options.create = false
        let connection = try Connection(path: path, options: options)
        defer { connection.close() }
        _ = try connection.query("PRAGMA wal_checkpoint(TRUNCATE)")
        _ = try connection.query("PRAGMA journal_mode = DELETE")
        let state = try LocalSchema.state(connection)
        guard state.isOfflineStore, !state.unfinished, try LocalSchema.isQueueEmpty(connection) else {
            throw OfflineODataError(.store, "\(path) is not a complete offline store without local changes")
        }
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    /// Marks the downloaded store at `path` unfinished (`oo_meta` `filling`), before it is
    /// encrypted and moved into place: the mark goes when the download of what it lacks is in.
    static func markUnfinished(_ path: String) throws {
        var options = Connection.Options()
        options.walMode = false
        options.create = false
        let connection = try Connection(path: path, options: options)
        defer { connection.close() }
        try connection.execute("INSERT OR REPLACE INTO oo_meta (key, value) VALUES ('filling', '1')")
    }

    /// Bytes asked for per request while a file downloads. At 1M rows (a 150 MiB file), the
    /// open's peak memory was 61.8 MiB with 1 MiB ranges and 67.7 MiB with 2 MiB
    /// (docs/benchmarks.md); on loopback the time hardly differed.
    static let chunk = 1 << 20

    /// What the gateway offers.
    struct Offer: Equatable, Codable {
        var id: String
        var size: Int64
        var sha256: String
        var definingQueries: [String]
    }

    /// The partial download of a store file beside the store at `path`, and what it is of.
    static func downloadPath(_ path: String) -> String { path + "-download" }
    static func offerPath(_ path: String) -> String { path + "-download.json" }

    /// Removes a partial or complete download beside the store at `path`.
    static func removeDownload(_ path: String) {
        let download = downloadPath(path)
        for file in [download, offerPath(path), download + ".encrypting", download + "-wal", download + "-shm"] {
            try? FileManager.default.removeItem(atPath: file)
        }
    }

    /// The SHA-256 of the file at `path`, as lowercase hex (what a gateway's offer names), read
    /// a megabyte at a time.
    public static func sha256(ofFile path: String) throws -> String {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw OfflineODataError(.store, "\(path) cannot be read")
        }
        defer { try? handle.close() }
        var hasher = SHA256()
        while let data = try handle.read(upToCount: 1 << 20), !data.isEmpty { hasher.update(data: data) }
        return hasher.finalize().map { byte in
            let digits = Array("0123456789abcdef".utf8)
            return String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 15)]], as: UTF8.self)
        }.joined()
    }

    /// Why the file at `path` is not the store this device would make, or nil when it is: a
    /// store of this format for `model`, made for `serviceRoot`, complete, intact, without
    /// local changes, whose defining queries are among `queries`. The file is only read.
    static func problem(
        with path: String, model: Model, serviceRoot: String, queries: [OfflineODataDefiningQuery]
    ) -> String? {
        var options = Connection.Options()
        options.readOnly = true
        options.walMode = false
        options.create = false
        let connection: Connection
        do {
            connection = try Connection(path: path, options: options)
        } catch {
            return "it cannot be opened as a database (\(error))"
        }
        defer { connection.close() }
        do {
            guard case .integer(let version)? = try connection.query("PRAGMA user_version").first?.first,
                version == Int64(StoreSchema.version)
            else { return "it is not a store of this release's format" }
            guard
                case .blob(let bytes)? = try connection.query("SELECT value FROM store_meta WHERE key = 'model'")
                    .first?.first,
                let stored = try? JSONDecoder().decode(Model.self, from: Data(bytes))
            else { return "it holds no model" }
            guard stored == model else { return "it was built for another model of the service" }
            guard case .text("ok")? = try connection.query("PRAGMA quick_check").first?.first else {
                return "its integrity check fails"
            }
            let state = try LocalSchema.state(connection)
            guard state.isOfflineStore, !state.unfinished else { return "it is not a complete offline store" }
            guard try LocalSchema.serviceRoot(connection) == serviceRoot else {
                return "it was built for another service root"
            }
            guard try connection.query("SELECT count(*) FROM oo_queue").first?.first == .integer(0) else {
                return "it holds local changes"
            }
            for stored in try DefiningQueries.load(connection)
            where !queries.contains(where: { $0.name == stored.name && $0.query == stored.query }) {
                return "it holds the defining query \(stored.name), which this app does not define so"
            }
            return nil
        } catch {
            return "it cannot be read (\(error))"
        }
    }
}

extension OfflineODataProvider {
    /// The first open through a gateway that offers a store file: downloads it (resuming a
    /// download an earlier open left), checks it, encrypts it with the app's key and puts it at
    /// `path`, then downloads what it lacks. False, with nothing left at `path`, when no file is
    /// offered or the file is refused (the open then pages as without a gateway). `progress`
    /// has the steps of ``gatewayOpenPlan``.
    func fillFromServerBuiltStore(at path: String, model: Model, progress: ProgressReporter) async throws -> Bool {
        report(progress, .creatingBootStrapDatabase)
        guard let offer = await storeOffer(progress: progress) else { return false }
        let download = ServerBuiltStore.downloadPath(path)
        do {
            try await downloadStoreFile(offer, to: path, progress: progress)
        } catch let error as OfflineODataError where error.code == .cancelled {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            // A gateway that cannot give the file now: the paged open instead; the part kept
            // is resumed by a later first open if the gateway still offers the file.
            logger.warning(
                "The store file the gateway offered could not be downloaded; paging instead",
                metadata: ["error": .string("\(error)")])
            operationSummary["server-store"] = "download failed"
            // Its part is not encrypted: with a key, it does not stay for a later resume.
            if parameters.storeEncryptionKey != nil { ServerBuiltStore.removeDownload(path) }
            return false
        }
        if let problem = ServerBuiltStore.problem(
            with: download, model: model, serviceRoot: serviceRoot, queries: definingQueries)
        {
            logger.warning(
                "The store file the gateway offered is refused; paging instead",
                metadata: ["reason": .string(problem)])
            operationSummary["server-store"] = .string("refused: \(problem)")
            ServerBuiltStore.removeDownload(path)
            return false
        }
        // From here until the download below completes, the store is marked unfinished, in the
        // file (`oo_meta` `filling`, committed) and beside it (the marker): an open that finds
        // either starts again (nothing local exists yet). Once the file is being encrypted it no
        // longer matches its SHA-256, so no later open resumes it: it starts over.
        try? FileManager.default.removeItem(atPath: ServerBuiltStore.offerPath(path))
        try ServerBuiltStore.markUnfinished(download)
        if let key = parameters.storeEncryptionKey {
            try Store.encrypt(path: download, key: key)
        }
        guard
            FileManager.default.createFile(
                atPath: StoreFiles.fillingMarker(path), contents: Data("\(definingQueries.count)".utf8)),
            rename(download, path) == 0
        else {
            throw OfflineODataError(.store, "The downloaded store cannot be moved to \(path)")
        }
        ServerBuiltStore.removeDownload(path)
        operationSummary["server-store"] = "file"
        do {
            try await openExisting(path, installing: true)
            guard let store else { throw OfflineODataError(.store, "The downloaded store did not open") }
            let downloader = Downloader(serviceRoot: serviceRoot, progress: progress)
            try await downloader.run(definingQueries, store: store, on: self)
            try await store.write { writer in try LocalSchema.markFilled(writer) }
            try? FileManager.default.removeItem(atPath: StoreFiles.fillingMarker(path))
        } catch {
            store?.close()
            store = nil
            StoreFiles.remove(path)
            throw error
        }
        keyMapCache = nil
        return true
    }

    /// The file the gateway offers for this provider's defining queries, or nil (none, or the
    /// gateway cannot build it now: the open pages).
    private func storeOffer(progress: ProgressReporter) async -> ServerBuiltStore.Offer? {
        let queries = JSONValue.array(
            definingQueries.map { query in
                .object([
                    .init("name", .string(query.name)), .init("query", .string(query.query)),
                    .init("streams", .bool(query.automaticallyRetrievesStreams)),
                ])
            })
        var members: [JSONValue.Member] = [
            .init("definingQueries", queries), .init("format", .string(ServerBuiltStore.format)),
        ]
        if let indexes = parameters.indexes {
            members.append(
                .init(
                    "indexes",
                    .object(
                        indexes.keys.sorted().map { set in
                            .init(
                                set,
                                .array((indexes[set] ?? []).map { .array($0.map { JSONValue.string($0) }) }))
                        })))
        }
        let response: TransportResponse
        do {
            // The gateway may build the file now: no bytes flow meanwhile, so the request may
            // wait longer than the network timeout allows a silent connection.
            response = try await withServerProgress(progress) { operation in
                var headers = ["Content-Type": "application/json", "Accept": "application/json"]
                if let operation { headers["OOData-Operation"] = operation }
                return try await send(
                    method: "POST", url: "$oodata/store", headers: headers,
                    body: Array(JSONValue.object(members).serialized.utf8), timeout: 1800)
            }
        } catch {
            logger.warning("Asking the gateway for a store file failed; paging", metadata: ["error": "\(error)"])
            return nil
        }
        guard response.status == 200 else {
            if response.status != 204 {
                logger.warning(
                    "The gateway gave no store file; paging",
                    metadata: [
                        "status": "\(response.status)",
                        "body": .string(String(decoding: response.body.prefix(300), as: UTF8.self)),
                    ])
            }
            return nil
        }
        guard let json = try? JSONValue.parse(response.body), let id = json["id"]?.stringValue,
            case .number(let sizeText)? = json["size"], let size = Int64(sizeText), size > 0,
            let sha256 = json["sha256"]?.stringValue, sha256.count == 64,
            id.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" }), !id.isEmpty, id.count <= 64
        else {
            logger.warning("The gateway's store offer cannot be read; paging")
            return nil
        }
        let names = (json["definingQueries"]?.arrayValue ?? []).compactMap(\.stringValue)
        return ServerBuiltStore.Offer(id: id, size: size, sha256: sha256.lowercased(), definingQueries: names)
    }

    /// Downloads `offer` beside the store at `path` in ranges, resuming what an earlier open
    /// downloaded of the same file, and checks its SHA-256.
    private func downloadStoreFile(
        _ offer: ServerBuiltStore.Offer, to path: String, progress: ProgressReporter
    )
        async throws
    {
        let download = ServerBuiltStore.downloadPath(path)
        let described = ServerBuiltStore.offerPath(path)
        var offset: Int64 = 0
        var resumed = false
        if let data = FileManager.default.contents(atPath: described),
            let earlier = try? JSONDecoder().decode(ServerBuiltStore.Offer.self, from: data), earlier == offer,
            let attributes = try? FileManager.default.attributesOfItem(atPath: download),
            let size = (attributes[.size] as? NSNumber)?.int64Value, size <= offer.size
        {
            offset = size
            resumed = size > 0
        } else {
            ServerBuiltStore.removeDownload(path)
            guard FileManager.default.createFile(atPath: download, contents: nil),
                FileManager.default.createFile(atPath: described, contents: try JSONEncoder().encode(offer))
            else { throw OfflineODataError(.store, "Cannot write \(download)") }
        }
        guard let handle = FileHandle(forWritingAtPath: download) else {
            throw OfflineODataError(.store, "Cannot write \(download)")
        }
        defer { try? handle.close() }
        try handle.truncate(atOffset: UInt64(offset))
        try handle.seekToEnd()
        report(progress, .downloadingEntityStore, ["receivedBytes": "\(offset)", "totalBytes": "\(offer.size)"])
        while offset < offer.size {
            try Task.checkCancellation()
            let last = min(offer.size, offset + Int64(ServerBuiltStore.chunk)) - 1
            let response = try await send(
                method: "GET", url: "$oodata/store/" + offer.id,
                headers: ["Range": "bytes=\(offset)-\(last)", "Accept": "application/vnd.sqlite3"], expect: 206)
            let expected = Int(last - offset + 1)
            guard response.status == 206, response.headers["Content-Range"]?.hasPrefix("bytes \(offset)-") == true,
                response.body.count == expected
            else {
                throw OfflineODataError(
                    .backend,
                    "The gateway answered bytes \(offset)-\(last) of the store file with status \(response.status), "
                        + "\(response.body.count) bytes, Content-Range \(response.headers["Content-Range"] ?? "none")")
            }
            try handle.write(contentsOf: response.body)
            offset += Int64(expected)
            report(progress, .downloadingEntityStore, ["receivedBytes": "\(offset)", "totalBytes": "\(offer.size)"])
        }
        try handle.synchronize()
        let sha256 = try ServerBuiltStore.sha256(ofFile: download)
        guard sha256 == offer.sha256 else {
            ServerBuiltStore.removeDownload(path)
            // A resumed part that was not what it claimed: once more from the start.
            if resumed {
                try await downloadStoreFile(offer, to: path, progress: progress)
                return
            }
            throw OfflineODataError(
                .store, "The downloaded store file has SHA-256 \(sha256), not the \(offer.sha256) the gateway gave")
        }
    }
}
