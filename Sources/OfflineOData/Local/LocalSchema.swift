import Foundation
import ODataCore
import ODataStore

/// The provider's own entity sets (ErrorArchive, RequestQueue, EventLog, SPEC §7) and the side
/// tables it keeps in the store file beside the entity tables.
enum LocalSchema {
    static let namespace = "OfflineOData.Local"
    static let errorArchive = "ErrorArchive"
    static let requestQueue = "RequestQueue"
    static let eventLog = "EventLog"
    static let systemSets: Set<String> = [errorArchive, requestQueue, eventLog]

    static let csdl = """
        <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
        <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="OfflineOData.Local">
          <EntityType Name="ErrorArchiveEntry"><Key><PropertyRef Name="RequestID"/></Key>
            <Property Name="RequestID" Type="Edm.Int64" Nullable="false"/><Property Name="CustomTag" Type="Edm.String"/>
            <Property Name="HTTPStatusCode" Type="Edm.Int32"/><Property Name="Code" Type="Edm.String"/>
            <Property Name="Message" Type="Edm.String"/><Property Name="InnerError" Type="Edm.String"/>
            <Property Name="Domain" Type="Edm.String"/><Property Name="RequestMethod" Type="Edm.String"/>
            <Property Name="RequestURL" Type="Edm.String"/><Property Name="RequestBody" Type="Edm.String"/>
            <Property Name="User" Type="Edm.String"/>
          </EntityType>
          <EntityType Name="RequestQueueEntry"><Key><PropertyRef Name="RequestID"/></Key>
            <Property Name="RequestID" Type="Edm.Int64" Nullable="false"/><Property Name="Status" Type="Edm.String"/>
            <Property Name="RequestMethod" Type="Edm.String"/><Property Name="RequestURL" Type="Edm.String"/>
            <Property Name="RequestBody" Type="Edm.String"/><Property Name="CustomTag" Type="Edm.String"/>
            <Property Name="TransactionID" Type="Edm.String"/><Property Name="UploadCategory" Type="Edm.String"/>
            <Property Name="AffectedEntityURL" Type="Edm.String"/><Property Name="User" Type="Edm.String"/>
          </EntityType>
          <EntityType Name="EventLogEntry"><Key><PropertyRef Name="ID"/></Key>
            <Property Name="ID" Type="Edm.Int64" Nullable="false"/><Property Name="Type" Type="Edm.String"/>
            <Property Name="Time" Type="Edm.DateTimeOffset"/><Property Name="Details" Type="Edm.String"/>
          </EntityType>
          <EntityContainer Name="LocalContainer">
            <EntitySet Name="ErrorArchive" EntityType="OfflineOData.Local.ErrorArchiveEntry"/>
            <EntitySet Name="RequestQueue" EntityType="OfflineOData.Local.RequestQueueEntry"/>
            <EntitySet Name="EventLog" EntityType="OfflineOData.Local.EventLogEntry"/>
          </EntityContainer>
        </Schema></edmx:DataServices></edmx:Edmx>
        """

    /// The backend's model with the local entity sets added.
    static func extend(_ model: Model) throws -> Model {
        let local = try MetadataParser().parse(Data(csdl.utf8))
        var model = model
        model.schemas += local.schemas
        model.rebuildIndex()
        return model
    }

    /// A store made before the ErrorArchive and the RequestQueue showed each entry's user
    /// (SPEC §16), migrated in place to the local model with `User`; others as they are.
    static func addingUserProperties(to store: Store) async throws -> Store {
        let type = store.model.entityType(ofEntitySet: errorArchive)
        guard let type, store.model.property("User", ofStructuredType: type.qualifiedName) == nil else { return store }
        var backend = store.model
        backend.schemas.removeAll { $0.namespace == namespace }
        backend.rebuildIndex()
        let model = try extend(backend)
        return try await store.migratingInPlace(to: model) { writer in
            let columns = try writer.connection.query("PRAGMA table_info(oo_queue)")
            if !columns.contains(where: { $0.count > 1 && $0[1] == .text("owner") }) {
                try writer.connection.execute("ALTER TABLE oo_queue ADD COLUMN owner TEXT")
            }
            try makeRequestQueueView(writer)
        }
    }

    /// Makes the RequestQueue entity set a view over `oo_queue`, so a local change writes one
    /// queue row instead of two (the store created a table for it from the model). The view
    /// has every column of that table; bookkeeping columns read as unset. A view made before
    /// media requests were queued (whose bodies are streams, not text) is made again.
    static func makeRequestQueueView(_ writer: StoreWriter) throws {
        guard let table = writer.schema.table(forEntitySet: requestQueue) else { return }
        let q = StoreSchema.quote
        let kind = try writer.connection.query(
            "SELECT type, sql FROM sqlite_master WHERE name = ?", [.text(table.name)])
        guard let row = kind.first else { return }
        if row.first == .text("view") {
            guard case .text(let sql) = row[1], !sql.contains("media_type") || !sql.contains("owner") else { return }
        }
        var columns = try writer.connection.query("PRAGMA table_info(\(q(table.name)))").compactMap { row -> String? in
            if case .text(let name) = row[1] { return name }
            return nil
        }
        // A property the local model gained since the view was made (`User`).
        for column in table.columns where !columns.contains(column.name) { columns.append(column.name) }
        let expressions: [String: String] = [
            "_rowid": "id", "RequestID": "id", "Status": "status", "RequestMethod": "method", "RequestURL": "url",
            "RequestBody": "CASE WHEN length(body) > 0 AND media_type IS NULL THEN CAST(body AS TEXT) END",
            "CustomTag": "custom_tag",
            "TransactionID": "transaction_id", "UploadCategory": "upload_category",
            "AffectedEntityURL": "entity_set || entity_key", "User": "owner",
            "_isLocal": "0", "_pending": "0", "_error": "0", "_upserted": "0",
        ]
        let select = columns.map { "\(expressions[$0] ?? "NULL") AS \(q($0))" }.joined(separator: ", ")
        try writer.connection.execute(
            row.first == .text("view") ? "DROP VIEW \(q(table.name))" : "DROP TABLE \(q(table.name))")
        try writer.connection.execute("CREATE VIEW \(q(table.name)) AS SELECT \(select) FROM oo_queue")
    }

    static let sideTables =
        [
            "CREATE TABLE oo_meta (key TEXT PRIMARY KEY, value TEXT)",
            "CREATE TABLE oo_defining (name TEXT PRIMARY KEY, query TEXT NOT NULL, streams INTEGER NOT NULL, delta_link TEXT, ordinal INTEGER NOT NULL)",
            """
            CREATE TABLE oo_queue (id INTEGER PRIMARY KEY, method TEXT NOT NULL, url TEXT NOT NULL, body BLOB, headers TEXT,
              entity_set TEXT, entity_key TEXT, is_create INTEGER NOT NULL DEFAULT 0, local_key INTEGER NOT NULL DEFAULT 0,
              transaction_id TEXT, custom_tag TEXT, upload_category TEXT, remove_after_upload INTEGER NOT NULL DEFAULT 0,
              unmodifiable INTEGER NOT NULL DEFAULT 0, repeat_id TEXT, first_sent TEXT, cascade TEXT, status TEXT NOT NULL DEFAULT 'pending',
              original_existed INTEGER, original BLOB, media_type TEXT, nested TEXT, resend_first_sent TEXT,
              owner TEXT)
            """,
            queueEntityIndex,
            "CREATE TABLE oo_original (entity_set TEXT NOT NULL, entity_key TEXT NOT NULL, existed INTEGER NOT NULL, body BLOB, PRIMARY KEY (entity_set, entity_key)) WITHOUT ROWID",
            "CREATE TABLE oo_key_map (entity_set TEXT NOT NULL, local_key TEXT NOT NULL, server_key TEXT NOT NULL, PRIMARY KEY (entity_set, local_key))",
            staging,
            conflicts,
        ] + streams

    /// Media streams of entities whose defining query retrieves them (`oo_streams`), and those
    /// a download has fetched but not yet applied (`oo_stream_staging`; a NULL body: the
    /// backend has no stream for the entity any more).
    static let streams = [
        "CREATE TABLE IF NOT EXISTS oo_streams (entity_set TEXT NOT NULL, entity_key TEXT NOT NULL, content_type TEXT, body BLOB NOT NULL, PRIMARY KEY (entity_set, entity_key))",
        "CREATE TABLE IF NOT EXISTS oo_stream_staging (entity_set TEXT NOT NULL, entity_key TEXT NOT NULL, content_type TEXT, body BLOB, PRIMARY KEY (entity_set, entity_key))",
        // The stream of an entity before its first local media change (a NULL body: none).
        "CREATE TABLE IF NOT EXISTS oo_stream_original (entity_set TEXT NOT NULL, entity_key TEXT NOT NULL, content_type TEXT, body BLOB, PRIMARY KEY (entity_set, entity_key))",
    ]

    /// The backend's copy of the entity of a request that failed with 412 or 428, and the state
    /// the local change started from, kept with the ErrorArchive row (SPEC §15): `backend` and
    /// `original` are V4 JSON bodies (NULL: the entity did not exist there).
    static let conflicts =
        "CREATE TABLE IF NOT EXISTS oo_conflict (request_id INTEGER PRIMARY KEY, entity_set TEXT NOT NULL, "
        + "backend BLOB, backend_etag TEXT, original BLOB)"

    /// The user a new queue row belongs to: the store's current user (SPEC §16), read by the
    /// insert itself, so that every path that queues a request records it.
    static let currentOwner = "SELECT value FROM oo_meta WHERE key = 'currentUser'"

    /// The queued requests of one entity, found without reading the whole queue (an upload
    /// asks after each entity it touched, batch by batch).
    static let queueEntityIndex = "CREATE INDEX IF NOT EXISTS oo_queue_entity ON oo_queue (entity_set, entity_key)"

    /// Pages of a download waiting to be applied together.
    static let staging =
        "CREATE TABLE IF NOT EXISTS oo_staging (seq INTEGER PRIMARY KEY, query TEXT NOT NULL, entity_set TEXT NOT NULL, is_delta INTEGER NOT NULL, body BLOB NOT NULL)"

    // MARK: Setting up, upgrading and reading the side tables

    /// Sets up a new store's side tables for `serviceRoot` and `queries`, marked as filling
    /// until ``markFilled(_:)``: a later open that finds the mark starts again.
    static func prepareNewStore(_ writer: StoreWriter, serviceRoot: String, queries: [OfflineODataDefiningQuery]) throws
    {
        for statement in sideTables { try writer.connection.execute(statement) }
        try makeRequestQueueView(writer)
        _ = try writer.connection.execute(
            "INSERT INTO oo_meta (key, value) VALUES ('serviceRoot', ?), ('nextLocalKey', '1'), ('filling', '1')",
            [.text(serviceRoot)])
        for (ordinal, query) in queries.enumerated() { try DefiningQueries.insert(query, ordinal: ordinal + 1, writer) }
    }

    /// The store's `Client-Instance-ID`: the one it keeps, or `proposed` when it keeps none
    /// (or `replacing`, for a new store or one built elsewhere).
    static func clientInstanceID(_ writer: StoreWriter, proposed: String, replacing: Bool) throws -> String {
        _ = try writer.connection.execute(
            "INSERT OR \(replacing ? "REPLACE" : "IGNORE") INTO oo_meta (key, value) VALUES ('clientInstanceID', ?)",
            [.text(proposed)])
        let rows = try writer.connection.query("SELECT value FROM oo_meta WHERE key = 'clientInstanceID'")
        if case .text(let value)? = rows.first?.first { return value }
        return proposed
    }

    /// The fill of a new store is complete.
    static func markFilled(_ writer: StoreWriter) throws {
        _ = try writer.connection.execute("DELETE FROM oo_meta WHERE key = 'filling'")
    }

    /// Whether a store file is an offline store, and whether its first fill never finished.
    static func state(_ connection: Connection) throws -> (isOfflineStore: Bool, unfinished: Bool) {
        guard try !connection.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'oo_meta'").isEmpty
        else {
            return (false, false)
        }
        return (true, try !connection.query("SELECT 1 FROM oo_meta WHERE key = 'filling'").isEmpty)
    }

    /// The service root a store was made for.
    static func serviceRoot(_ connection: Connection) throws -> String? {
        let rows = try connection.query("SELECT value FROM oo_meta WHERE key = 'serviceRoot'")
        if case .text(let value)? = rows.first?.first { return value }
        return nil
    }

    /// Brings a store made by an earlier version up to date, and drops what an interrupted
    /// download left staged.
    static func upgrade(_ writer: StoreWriter) throws {
        let columns = try writer.connection.query("PRAGMA table_info(oo_queue)")
        func has(_ name: String) -> Bool { columns.contains { $0.count > 1 && $0[1] == .text(name) } }
        // Stores made before the queue recorded cascades.
        if !has("cascade") { try writer.connection.execute("ALTER TABLE oo_queue ADD COLUMN cascade TEXT") }
        // Stores made before the first change of an entity kept its state in its queue row
        // (they keep theirs in oo_original, where it is still found).
        if !has("original") {
            try writer.connection.execute("ALTER TABLE oo_queue ADD COLUMN original_existed INTEGER")
            try writer.connection.execute("ALTER TABLE oo_queue ADD COLUMN original BLOB")
        }
        // Stores made before media changes were queued.
        if !has("media_type") { try writer.connection.execute("ALTER TABLE oo_queue ADD COLUMN media_type TEXT") }
        // Stores made before deep inserts recorded their nested entities.
        if !has("nested") { try writer.connection.execute("ALTER TABLE oo_queue ADD COLUMN nested TEXT") }
        // Stores made before conflict resends kept the time of their first sending.
        if !has("resend_first_sent") {
            try writer.connection.execute("ALTER TABLE oo_queue ADD COLUMN resend_first_sent TEXT")
        }
        // Stores made before requests recorded their user (SPEC §16).
        if !has("owner") { try writer.connection.execute("ALTER TABLE oo_queue ADD COLUMN owner TEXT") }
        // Stores made before the queue was indexed by entity.
        try writer.connection.execute(queueEntityIndex)
        // Stores made before RequestQueue became a view over the queue.
        try makeRequestQueueView(writer)
        // Stores made before downloads were staged; pages left by an interrupted download go.
        try writer.connection.execute(staging)
        // Stores made before conflicts kept the backend's copy.
        try writer.connection.execute(conflicts)
        // Stores made before media streams were kept.
        for statement in streams { try writer.connection.execute(statement) }
        _ = try writer.connection.execute("DELETE FROM oo_staging")
    }

    /// The SHA-256 of the backend's `$metadata` the store follows, and its ETag, as recorded
    /// by ``recordMetadata(_:hash:etag:)`` (nil for a store made before they were kept).
    static func metadataFingerprint(_ connection: Connection) throws -> (hash: String?, etag: String?) {
        var hash: String?
        var etag: String?
        for row in try connection.query(
            "SELECT key, value FROM oo_meta WHERE key IN ('metadataHash', 'metadataETag')")
        {
            guard case .text(let key) = row[0], case .text(let value) = row[1] else { continue }
            if key == "metadataHash" { hash = value } else { etag = value }
        }
        return (hash, etag)
    }

    /// Records the `$metadata` the store follows now.
    static func recordMetadata(_ writer: StoreWriter, hash: String, etag: String?) throws {
        _ = try writer.connection.execute(
            "INSERT OR REPLACE INTO oo_meta (key, value) VALUES ('metadataHash', ?)", [.text(hash)])
        _ = try writer.connection.execute("DELETE FROM oo_meta WHERE key = 'metadataETag'")
        if let etag {
            _ = try writer.connection.execute(
                "INSERT INTO oo_meta (key, value) VALUES ('metadataETag', ?)", [.text(etag)])
        }
    }

    /// What the sync status counts: requests pending and failed, and when the last upload and
    /// download succeeded.
    static func syncCounts(
        _ connection: Connection
    ) throws -> (pending: Int, failed: Int, lastUpload: Date?, lastDownload: Date?) {
        let rows = try connection.query("SELECT SUM(status = 'pending'), SUM(status = 'failed') FROM oo_queue")
        func number(_ value: DatabaseValue?) -> Int {
            if case .integer(let n)? = value { return Int(n) }
            return 0
        }
        var upload: Date?
        var download: Date?
        for row in try connection.query(
            "SELECT key, value FROM oo_meta WHERE key IN ('lastUpload', 'lastDownload')") where row.count == 2
        {
            guard case .text(let key) = row[0], case .text(let value) = row[1], let seconds = Double(value) else {
                continue
            }
            let date = Date(timeIntervalSince1970: seconds)
            if key == "lastUpload" { upload = date } else { download = date }
        }
        return (number(rows.first?[0]), number(rows.first?[1]), upload, download)
    }

    /// Records that an upload (`upload` true) or a download succeeded at `time`.
    static func recordSync(_ writer: StoreWriter, upload: Bool, at time: Date) throws {
        _ = try writer.connection.execute(
            "INSERT OR REPLACE INTO oo_meta (key, value) VALUES (?, ?)",
            [.text(upload ? "lastUpload" : "lastDownload"), .text(String(time.timeIntervalSince1970))])
    }

    /// Adds the ErrorArchive row of a failed request (an `httpStatus` of 0: none, as for a
    /// request that was never sent).
    static func archive(_ failure: OfflineODataFailedRequest, domain: String, _ writer: StoreWriter) throws {
        func text(_ value: String?) -> Value { value.map { .primitive(.string($0)) } ?? .null }
        let status: Value = failure.httpStatus == 0 ? .null : .primitive(.int32(Int32(failure.httpStatus)))
        var user: [NamedValue] = []
        if writer.schema.table(forEntitySet: errorArchive)?.columns.contains(where: { $0.name == "User" }) == true {
            let owner = try writer.connection.query(
                "SELECT owner FROM oo_queue WHERE id = ?", [.integer(failure.requestID)]
            ).first?.first
            if case .text(let name)? = owner { user = [NamedValue(name: "User", value: .primitive(.string(name)))] }
        }
        try writer.insert(
            Entity(properties: user + [
                NamedValue(name: "RequestID", value: .primitive(.int64(failure.requestID))),
                NamedValue(name: "CustomTag", value: text(failure.customTag)),
                NamedValue(name: "HTTPStatusCode", value: status),
                NamedValue(name: "Code", value: text(failure.code)),
                NamedValue(name: "Message", value: text(failure.message)),
                NamedValue(name: "InnerError", value: text(failure.innerError)),
                NamedValue(name: "Domain", value: text(domain)),
                NamedValue(name: "RequestMethod", value: text(failure.method)),
                NamedValue(name: "RequestURL", value: text(failure.url)),
                NamedValue(name: "RequestBody", value: text(failure.body)),
            ]), into: errorArchive)
    }

    /// Whether no request waits for upload (stops at the first one).
    static func isQueueEmpty(_ connection: Connection) throws -> Bool {
        try connection.query("SELECT EXISTS (SELECT 1 FROM oo_queue WHERE status = 'pending')").first?.first
            == .integer(0)
    }

    /// Adds an EventLog entry at `time`, keeping the last 100.
    static func logEvent(_ writer: StoreWriter, type: String, details: String, time: Value) throws {
        let table = writer.schema.table(forEntitySet: eventLog)
        let next = try writer.connection.query(
            "SELECT coalesce(max(\"ID\"), 0) + 1 FROM \(StoreSchema.quote(table?.name ?? "EventLog"))")
        var id: Int64 = 1
        if case .integer(let value)? = next.first?.first { id = value }
        let entry = Entity(properties: [
            NamedValue(name: "ID", value: .primitive(.int64(id))),
            NamedValue(name: "Type", value: .primitive(.string(type))),
            NamedValue(name: "Time", value: time), NamedValue(name: "Details", value: .primitive(.string(details))),
        ])
        try writer.insert(entry, into: eventLog)
        if id > 100, let table {
            _ = try writer.connection.execute(
                "DELETE FROM \(StoreSchema.quote(table.name)) WHERE \"ID\" <= ?", [.integer(id - 100)])
        }
    }

    /// The entity a queued request changes (`Set(key)`, as queued), for `…(n)/AffectedEntity`.
    static func affectedEntity(ofRequest id: Int64, _ connection: Connection) throws -> String? {
        let rows = try connection.query("SELECT entity_set, entity_key FROM oo_queue WHERE id = ?", [.integer(id)])
        guard let row = rows.first, case .text(let set) = row[0], case .text(let key) = row[1] else { return nil }
        return set + key
    }
}
