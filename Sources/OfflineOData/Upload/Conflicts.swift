import Foundation
public import ODataCore
import ODataStore

/// How an upload resolves a request the backend refused with 412 (another user changed the
/// entity first) or 428 (SPEC §15). Set it for the provider
/// (``OfflineODataParameters/conflictPolicy``) and per entity set
/// (``OfflineODataParameters/conflictPolicies``).
public enum OfflineODataConflictPolicy: Sendable {
    /// The request goes to the ErrorArchive with the three copies (SAP's behaviour; the default).
    case archive
    /// When the local change and the backend's change touched different properties, the
    /// request is sent again with the backend's ETag; otherwise it is archived. Updates only.
    case mergeDisjoint
    /// The request is sent again with the backend's ETag (updates and deletes).
    case clientWins
    /// The local change is dropped and the entity takes the backend's copy.
    case backendWins
    /// `resolve` decides, given the three copies.
    case custom(@Sendable (OfflineODataConflict) async -> OfflineODataConflictResolution)
}

/// What a custom conflict resolver decides.
public enum OfflineODataConflictResolution: Sendable {
    /// Into the ErrorArchive.
    case archive
    /// Send the request again with the backend's ETag.
    case resend
    /// Drop the local change and take the backend's copy.
    case takeBackend
    /// Send these values (a merge of the copies) with the backend's ETag, as a PATCH (MERGE in
    /// V2) of the properties in which they differ from the backend's copy.
    case merged(Entity)
}

/// A request the backend refused with 412 or 428, with the three copies of its entity.
public struct OfflineODataConflict: Sendable {
    /// The queue's request ID (the ErrorArchive key if it ends there).
    public var requestID: Int64
    /// The request's method, as queued.
    public var method: String
    /// The request's URL, as queued.
    public var url: String
    /// The entity set of its entity.
    public var entitySet: String
    /// The HTTP status of the refusal: 412 or 428.
    public var httpStatus: Int
    /// The entity as the store holds it (nil: deleted locally).
    public var local: Entity?
    /// The backend's copy, read after the refusal, with its ETag (nil: gone on the backend, or
    /// it could not be read; see ``backendRead``).
    public var backend: Entity?
    /// Whether the backend's copy was read (then a nil ``backend`` means the entity is gone
    /// there). When it was not, every resolution but `archive` archives.
    public var backendRead: Bool
    /// What the local change started from (nil: not known, or created locally).
    public var original: Entity?
    /// The properties the local request sets.
    public var localChanges: Set<String>
    /// The properties in which the backend's copy differs from the original.
    public var backendChanges: Set<String>

    /// Creates a value from its parts.
    public init(
        requestID: Int64, method: String, url: String, entitySet: String, httpStatus: Int, local: Entity?,
        backend: Entity?, backendRead: Bool = true, original: Entity?, localChanges: Set<String>,
        backendChanges: Set<String>
    ) {
        self.requestID = requestID
        self.method = method
        self.url = url
        self.entitySet = entitySet
        self.httpStatus = httpStatus
        self.local = local
        self.backend = backend
        self.backendRead = backendRead
        self.original = original
        self.localChanges = localChanges
        self.backendChanges = backendChanges
    }
}

/// A conflict an upload resolved without the ErrorArchive, as reported to the app (event,
/// delegate, EventLog).
public struct OfflineODataConflictResolved: Sendable, Hashable {
    /// How it was resolved.
    public enum Outcome: String, Sendable, Hashable {
        /// Sent again with the backend's ETag, as it was (client wins, or disjoint changes).
        case resent
        /// Sent again with values a custom resolver merged.
        case merged
        /// The local change was dropped; the entity took the backend's copy.
        case backendWins
    }

    /// The queue's request ID.
    public var requestID: Int64
    /// The request's method, as queued.
    public var method: String
    /// The request's URL, as queued.
    public var url: String
    /// The entity set of its entity.
    public var entitySet: String
    /// How it was resolved.
    public var outcome: Outcome
    /// The policy that decided (`mergeDisjoint`, `clientWins`, `backendWins`, `custom`).
    public var policy: String
    /// The properties the local change set.
    public var localChanges: Set<String>
    /// The properties the backend had changed (to other values than the local ones).
    public var backendChanges: Set<String>
}

extension OfflineODataParameters {
    /// The conflict policy for requests on `entitySet`.
    func conflictPolicy(for entitySet: String) -> OfflineODataConflictPolicy {
        conflictPolicies[entitySet] ?? conflictPolicy
    }
}

/// The backend's copy of a conflicting request's entity, as read after the refusal.
struct BackendCopy: Sendable {
    var entity: Entity?
    var etag: String?
}

extension OfflineODataConflictPolicy {
    var name: String {
        switch self {
        case .archive: "archive"
        case .mergeDisjoint: "mergeDisjoint"
        case .clientWins: "clientWins"
        case .backendWins: "backendWins"
        case .custom: "custom"
        }
    }
}

/// Where the copies of a conflict are kept (`oo_conflict`) and read back.
enum ConflictCopies {
    /// Keeps the backend's copy and the original of a request that ends in the ErrorArchive.
    static func keep(
        requestID: Int64, entitySet: String, backend: BackendCopy?, original: Entity?, writer: StoreWriter
    ) throws {
        _ = try writer.connection.execute(
            "INSERT OR REPLACE INTO oo_conflict (request_id, entity_set, backend, backend_etag, original) "
                + "VALUES (?, ?, ?, ?, ?)",
            [
                .integer(requestID), .text(entitySet),
                backend?.entity.map { .blob(V4JSONWriter().write($0)) } ?? .null,
                backend?.etag.map { .text($0) } ?? .null,
                original.map { .blob(V4JSONWriter().write($0)) } ?? .null,
            ])
    }

    /// The backend's copy (`backend` true) or the original kept for an ErrorArchive row; nil
    /// when none is kept (the row is not a conflict, or that copy did not exist).
    static func copy(requestID: Int64, backend: Bool, connection: Connection, model: Model) throws -> Entity? {
        let column = backend ? "backend" : "original"
        guard
            let row = try connection.query(
                "SELECT entity_set, \(column), backend_etag FROM oo_conflict WHERE request_id = ?",
                [.integer(requestID)]
            ).first,
            case .text(let set) = row[0], case .blob(let body) = row[1]
        else { return nil }
        var entity = try V4JSONReader(model: model).readEntity(body, entityType: model.entitySet(set)?.entityType)
        if backend, case .text(let etag) = row[2] { entity.control.etag = etag }
        return entity
    }

    /// The entities of requests dropped for the backend's copy take it: it becomes their kept
    /// state, and their remaining queued requests are applied on top again.
    static func takeBackend(
        _ won: [Int64: (entitySet: String, predicate: String, backend: Entity?, changed: Set<String>)],
        writer: StoreWriter, model: Model, serviceRoot: String
    ) throws {
        guard !won.isEmpty else { return }
        for (_, entity) in won {
            _ = try writer.connection.execute(
                "INSERT OR REPLACE INTO oo_original (entity_set, entity_key, existed, body) VALUES (?, ?, ?, ?)",
                [
                    .text(entity.entitySet), .text(entity.predicate), .integer(entity.backend == nil ? 0 : 1),
                    entity.backend.map { .blob(V4JSONWriter().write($0)) } ?? .null,
                ])
        }
        let keyMap = try RequestQueue.keyMap(writer.connection)
        let requests = try RequestQueue.load(writer.connection, statuses: ["pending", "failed"])
        let entries = QueueEntry.analyse(requests, model: model, serviceRoot: serviceRoot, keyMap: keyMap)
        // With the entity, what its request changed besides (what a delete cascaded to).
        var entities = Set(won.values.map { $0.entitySet + $0.predicate })
        for entity in won.values { entities.formUnion(entity.changed) }
        try RequestQueue(writer, model: model, serviceRoot: serviceRoot).rebuild(
            entities, remaining: entries, keyMap: keyMap)
    }

    /// The properties in which `entity` differs from `base` (both as read from the store:
    /// structural properties only; an absent base differs everywhere).
    static func differences(_ entity: Entity?, from base: Entity?) -> Set<String> {
        guard let entity else { return [] }
        var names: Set<String> = []
        for property in entity.properties where base?[property.name] != property.value {
            names.insert(property.name)
        }
        return names
    }
}

/// The three copies of the entity of an ErrorArchive row that failed with a conflict (SPEC §15).
public struct OfflineODataConflictCopies: Sendable, Hashable {
    /// The entity as the store holds it now (`AffectedEntity`; nil: deleted locally).
    public var local: Entity?
    /// The backend's copy read after the refusal, with its ETag (`BackendEntity`; nil: gone on
    /// the backend, or not read).
    public var backend: Entity?
    /// What the local change started from (`OriginalEntity`; nil: created locally, or unknown).
    public var original: Entity?
}

extension OfflineODataProvider {
    /// The three copies kept with ErrorArchive row `requestID`, as `ErrorArchive(n)?$expand=
    /// AffectedEntity,BackendEntity,OriginalEntity` reads them. Nil when the row does not exist.
    public func conflictCopies(forRequest requestID: Int64) async throws -> OfflineODataConflictCopies? {
        let url = "ErrorArchive(\(requestID))?$expand=AffectedEntity,BackendEntity,OriginalEntity"
        guard case .entity(let row?) = try await read(url) else { return nil }
        func inline(_ name: String) -> Entity? {
            guard case .entity(let entity)? = row.navigation.first(where: { $0.name == name })?.inline else {
                return nil
            }
            return entity
        }
        return OfflineODataConflictCopies(
            local: inline("AffectedEntity"), backend: inline("BackendEntity"), original: inline("OriginalEntity"))
    }
}

extension DataService {
    /// The three copies of ErrorArchive row `requestID` as generated types (local, the
    /// backend's, and what the local change started from); nil where a copy does not exist.
    public func conflictCopies<E: ODataEntity>(
        of type: E.Type, requestID: Int64
    ) async throws(DataServiceError) -> (local: E?, backend: E?, original: E?) {
        guard let provider = handler as? OfflineODataProvider else {
            throw DataServiceError(
                .offlineStore, "Conflict copies are kept by the offline provider only; this service is online")
        }
        do {
            guard let copies = try await provider.conflictCopies(forRequest: requestID) else { return (nil, nil, nil) }
            return (
                try copies.local.map { try E(entity: $0) }, try copies.backend.map { try E(entity: $0) },
                try copies.original.map { try E(entity: $0) }
            )
        } catch {
            throw DataServiceError.wrap(error, "the conflict copies of request \(requestID)")
        }
    }
}
