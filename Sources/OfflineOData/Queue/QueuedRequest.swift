import Foundation
import ODataCore

/// Options of one local modification.
public struct OfflineODataRequestOptions: Sendable, Hashable {
    /// Requests with the same transaction ID travel in one change set.
    public var transactionID: String?
    /// Never combined with other requests by the queue algorithms.
    public var unmodifiableRequest = false
    /// Free text shown in RequestQueue and ErrorArchive.
    public var customTag: String?
    /// `upload(categories:)` sends only requests of the given categories.
    public var uploadCategory: String?
    /// Drop the local created entity once uploaded; the backend's copy arrives with the next download.
    public var removeAfterUpload = false
    /// Headers sent with this request when it is uploaded.
    public var customHeaders: [String: String] = [:]

    /// Creates options; every field is optional.
    public init(
        transactionID: String? = nil, unmodifiableRequest: Bool = false, customTag: String? = nil,
        uploadCategory: String? = nil,
        removeAfterUpload: Bool = false, customHeaders: [String: String] = [:]
    ) {
        self.transactionID = transactionID
        self.unmodifiableRequest = unmodifiableRequest
        self.customTag = customTag
        self.uploadCategory = uploadCategory
        self.removeAfterUpload = removeAfterUpload
        self.customHeaders = customHeaders
    }
}

/// The state of an entity before its local changes: it did not exist (a local create), or its
/// downloaded values as a JSON entity.
struct Original: Sendable {
    var existed: Bool
    var body: [UInt8]?
}

/// A nested entity created by a deep insert: where it is in the body (`Contacts/0`,
/// `Items/1/Notes/0`, `Manager` for a single one), its `Set(key)`, and whether that key is a
/// local temporary one that the backend replaces.
struct NestedCreate: Sendable, Hashable {
    var path: String
    var entity: String
    var localKey: Bool

    var json: JSONValue {
        .object([.init("path", .string(path)), .init("entity", .string(entity)), .init("localKey", .bool(localKey))])
    }

    init(path: String, entity: String, localKey: Bool) {
        self.path = path
        self.entity = entity
        self.localKey = localKey
    }

    init?(_ json: JSONValue) {
        guard let path = json["path"]?.stringValue, let entity = json["entity"]?.stringValue else { return nil }
        self.init(path: path, entity: entity, localKey: json["localKey"] == .bool(true))
    }
}

/// A request in the queue.
struct QueuedRequest: Sendable {
    var id: Int64 = 0
    var method: String
    var url: String
    var body: [UInt8]
    var headers: [String: String]
    var options: OfflineODataRequestOptions
    var entitySet: String?
    var entityKey: String?
    var isCreate = false
    var localKey = false
    var repeatID: String?
    var firstSent: String?
    /// `Set(key)` of the entities a delete removed through `OnDelete` cascades.
    var cascade: [String] = []
    /// Sent and rejected (or not sent because a request it depends on was): in the ErrorArchive.
    var failed = false
    /// The content type of a media request (the body is a stream); nil for JSON.
    var mediaType: String?
    /// For a deep insert: the nested entities it creates.
    var nested: [NestedCreate] = []
    /// The user who made the request (SPEC §16); nil in a store without users.
    var owner: String?
    /// The state of its entity before this request, when this is the entity's first change
    /// (written with the request; not loaded with the queue).
    var original: Original?

    /// The headers as stored in the queue: a JSON object, names sorted.
    var headersJSON: String {
        JSONValue.object(headers.sorted { $0.key < $1.key }.map { .init($0.key, .string($0.value)) }).serialized
    }

    init(method: String, url: String, body: [UInt8], headers: [String: String], options: OfflineODataRequestOptions) {
        self.method = method
        self.url = url
        self.body = body
        self.headers = headers
        self.options = options
    }

    /// Whether the request changes a link rather than an entity (see ``isLinkURL(_:)``).
    var isLinkRequest: Bool { Self.isLinkURL(url) }

    /// Whether `url` addresses a link: its path (before any query or fragment) has a `$ref`
    /// segment (V4) or a `$links` segment (V2), also with its `$` percent-encoded (`%24ref`;
    /// other escapes are not decoded). A key or a query that only holds those letters
    /// (`Notes('see $ref')`, `?$filter=…'$links'`) does not.
    static func isLinkURL(_ url: String) -> Bool {
        var segment: [UInt8] = []
        for byte in url.utf8 {
            if byte == UInt8(ascii: "/") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#") {
                if isLinkSegment(segment) { return true }
                if byte != UInt8(ascii: "/") { return false }
                segment.removeAll(keepingCapacity: true)
            } else if segment.count < 9 {
                segment.append(byte)
            } else {
                // Longer than any link segment: marked so it cannot match.
                segment[0] = 0
            }
        }
        return isLinkSegment(segment)
    }

    private static func isLinkSegment(_ segment: [UInt8]) -> Bool {
        var name = segment[...]
        if name.first == UInt8(ascii: "$") {
            name = name.dropFirst()
        } else if name.count > 3, name.prefix(3).elementsEqual("%24".utf8) {
            name = name.dropFirst(3)
        } else {
            return false
        }
        return name.elementsEqual("ref".utf8) || name.elementsEqual("links".utf8)
    }
}
