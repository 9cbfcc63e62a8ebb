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
      </EntityType>
      <EntityType Name="RequestQueueEntry"><Key><PropertyRef Name="RequestID"/></Key>
        <Property Name="RequestID" Type="Edm.Int64" Nullable="false"/><Property Name="Status" Type="Edm.String"/>
        <Property Name="RequestMethod" Type="Edm.String"/><Property Name="RequestURL" Type="Edm.String"/>
        <Property Name="RequestBody" Type="Edm.String"/><Property Name="CustomTag" Type="Edm.String"/>
        <Property Name="TransactionID" Type="Edm.String"/><Property Name="UploadCategory" Type="Edm.String"/>
        <Property Name="AffectedEntityURL" Type="Edm.String"/>
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

    /// Makes the RequestQueue entity set a view over `oo_queue`, so a local change writes one
    /// queue row instead of two (the store created a table for it from the model). The view
    /// has every column of that table; bookkeeping columns read as unset. A view made before
    /// media requests were queued (whose bodies are streams, not text) is made again.
    static func makeRequestQueueView(_ writer: StoreWriter) throws {
        guard let table = writer.schema.table(forEntitySet: requestQueue) else { return }
        let q = StoreSchema.quote
        let kind = try writer.connection.query("SELECT type, sql FROM sqlite_master WHERE name = ?", [.text(table.name)])
        guard let row = kind.first else { return }
        if row.first == .text("view") {
            guard case .text(let sql) = row[1], !sql.contains("media_type") else { return }
        }
        let columns = try writer.connection.query("PRAGMA table_info(\(q(table.name)))").compactMap { row -> String? in
            if case .text(let name) = row[1] { return name }
            return nil
        }
        let expressions: [String: String] = [
            "_rowid": "id", "RequestID": "id", "Status": "status", "RequestMethod": "method", "RequestURL": "url",
            "RequestBody": "CASE WHEN length(body) > 0 AND media_type IS NULL THEN CAST(body AS TEXT) END", "CustomTag": "custom_tag",
            "TransactionID": "transaction_id", "UploadCategory": "upload_category", "AffectedEntityURL": "entity_set || entity_key",
            "_isLocal": "0", "_pending": "0", "_error": "0", "_upserted": "0",
        ]
        let select = columns.map { "\(expressions[$0] ?? "NULL") AS \(q($0))" }.joined(separator: ", ")
        try writer.connection.execute(row.first == .text("view") ? "DROP VIEW \(q(table.name))" : "DROP TABLE \(q(table.name))")
        try writer.connection.execute("CREATE VIEW \(q(table.name)) AS SELECT \(select) FROM oo_queue")
    }

    static let sideTables = [
        "CREATE TABLE oo_meta (key TEXT PRIMARY KEY, value TEXT)",
        "CREATE TABLE oo_defining (name TEXT PRIMARY KEY, query TEXT NOT NULL, streams INTEGER NOT NULL, delta_link TEXT, ordinal INTEGER NOT NULL)",
        """
        CREATE TABLE oo_queue (id INTEGER PRIMARY KEY, method TEXT NOT NULL, url TEXT NOT NULL, body BLOB, headers TEXT,
          entity_set TEXT, entity_key TEXT, is_create INTEGER NOT NULL DEFAULT 0, local_key INTEGER NOT NULL DEFAULT 0,
          transaction_id TEXT, custom_tag TEXT, upload_category TEXT, remove_after_upload INTEGER NOT NULL DEFAULT 0,
          unmodifiable INTEGER NOT NULL DEFAULT 0, repeat_id TEXT, first_sent TEXT, cascade TEXT, status TEXT NOT NULL DEFAULT 'pending',
          original_existed INTEGER, original BLOB, media_type TEXT, nested TEXT)
        """,
        "CREATE TABLE oo_original (entity_set TEXT NOT NULL, entity_key TEXT NOT NULL, existed INTEGER NOT NULL, body BLOB, PRIMARY KEY (entity_set, entity_key)) WITHOUT ROWID",
        "CREATE TABLE oo_key_map (entity_set TEXT NOT NULL, local_key TEXT NOT NULL, server_key TEXT NOT NULL, PRIMARY KEY (entity_set, local_key))",
        staging,
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

    /// Pages of a download waiting to be applied together.
    static let staging = "CREATE TABLE IF NOT EXISTS oo_staging (seq INTEGER PRIMARY KEY, query TEXT NOT NULL, entity_set TEXT NOT NULL, is_delta INTEGER NOT NULL, body BLOB NOT NULL)"
}
