public import ODataCore

/// What a download did when it found that the backend's `$metadata` had changed (SPEC §14),
/// as the delegate, ``OfflineODataEvent/metadataChanged(_:)`` and `oodata offline download`
/// report it.
public struct OfflineODataMetadataChange: Sendable, Hashable {
    /// How the store took the change.
    public enum Kind: String, Sendable, Hashable {
        /// Migrated in place: new tables and columns; the queue untouched.
        case additive
        /// Nothing a store keeps changed (an operation removed, say): the store follows the new
        /// model in place; calls to what is gone fail online.
        case neutral
        /// A new store was downloaded beside the old one, every queued request replayed onto
        /// it in order, and the new store replaced the old in one step.
        case breaking
    }

    /// How the store took the change.
    public var kind: Kind
    /// Every difference between the two models (`Model.changes(since:)`).
    public var changes: [ModelChange]
    /// Defining queries read again in full (their types gained properties), by name.
    public var reReadDefiningQueries: [String]
    /// Defining queries that no longer bind to the new model (their set or a property they name
    /// is gone), by name, with what is wrong. They are left out of the store.
    public var leftOutDefiningQueries: [String: String]
    /// Queued requests that no longer fit the new model: archived with code `MetadataChanged`,
    /// and the requests that depend on them with `DependencyFailed` (SPEC §7), by request ID.
    public var archivedRequests: [Int64]

    /// Creates a value from its parts.
    public init(
        kind: Kind, changes: [ModelChange], reReadDefiningQueries: [String] = [],
        leftOutDefiningQueries: [String: String] = [:], archivedRequests: [Int64] = []
    ) {
        self.kind = kind
        self.changes = changes
        self.reReadDefiningQueries = reReadDefiningQueries
        self.leftOutDefiningQueries = leftOutDefiningQueries
        self.archivedRequests = archivedRequests
    }

    /// One line for logs and the EventLog: the kind and the counts.
    public var summary: String {
        var parts = ["\(kind.rawValue) metadata change", "\(changes.count) differences"]
        if !reReadDefiningQueries.isEmpty {
            parts.append("read again: " + reReadDefiningQueries.joined(separator: ", "))
        }
        if !leftOutDefiningQueries.isEmpty {
            parts.append("left out: " + leftOutDefiningQueries.keys.sorted().joined(separator: ", "))
        }
        if !archivedRequests.isEmpty { parts.append("\(archivedRequests.count) queued requests archived") }
        return parts.joined(separator: "; ")
    }
}
