public import Foundation

/// The settings of an offline provider (SPEC §2). The names follow SAP's `OfflineODataParameters` where SAP has
/// the setting; the defaults are this package's own, and not all of them are SAP's. For example, a nil
/// `storePath` means the current directory, where SAP uses the app's Documents directory. Each default is in
/// the property's declaration.
public struct OfflineODataParameters: Sendable {
    /// Key of the store file; fixed at the first open; every later open needs it.
    public var storeEncryptionKey: String?
    /// File name stem of the store (`localstore` gives `localstore.db`).
    public var storeName = "localstore"
    /// Folder of the store files; nil means the current directory.
    public var storePath: String?
    /// Appended to every URL sent to the backend (some proxies need it).
    public var urlSuffix: String?
    /// Advanced options for the download stream, as `key=value;key=value`: they travel as
    /// custom query options (`key=value`, percent-encoded) with every request of an open or a
    /// download that reads `$metadata` or a defining query's pages (next links included;
    /// options a URL names already are left as they are). A backend that needs, say,
    /// `sap-client=100` or a tracing option on its large reads gets it there. Keys cannot start
    /// with `$` or `@` (those are OData's own options). See ``extraStreamOptions()``.
    public var extraStreamParameters: String?
    /// Headers added to every HTTP request the provider sends.
    public var customHeaders: [String: String] = [:]
    /// Cookies added to every HTTP request the provider sends.
    public var customCookies: [String: String] = [:]
    /// Send repeatable-request headers with every modification so each is applied exactly once.
    public var enableRepeatableRequests = true
    /// Largest number of entities one local read returns; nil for no paging.
    public var pageSize: Int?
    /// Network timeout in seconds: how long a request may go without sending or receiving a
    /// byte before it fails (a long download that keeps receiving does not). Nil for the
    /// transport's default (60 s with ``AsyncHTTPClientTransport``). Below 30 s the connection
    /// is probed more often (``AsyncHTTPClientTransport/probeInterval(for:)``).
    public var timeout: TimeInterval?
    /// Combine queued requests before upload (SPEC §6.1).
    public var enableRequestQueueOptimization = false
    /// Deleting a not-yet-uploaded created entity removes its requests (SPEC §6.2).
    public var enableUndoLocalCreation = false
    /// Group requests by transaction ID into change sets (SPEC §6.3).
    public var enableTransactionBuilder = false
    /// Delete single ErrorArchive rows with their dependants (SPEC §7).
    public var enableIndividualErrorArchiveDeletion = false
    /// Whether the backend accepts `$batch`; without it the queue is sent request by request.
    public var backendSupportsBatch = true
    /// Most requests in one `$batch` request.
    public var maxRequestsPerBatch = 100
    /// Credentials for the backend, asked for before the first request and refreshed once
    /// after a `401` (see ``ODataAuthenticator``). Nil: no `Authorization` header.
    public var authenticator: (any ODataAuthenticator)?
    /// Fetch an `X-CSRF-Token` before modifying requests and send it with them, keeping the
    /// session cookies it belongs to, as SAP Gateway requires (see ``BackendSession``). A
    /// backend that gives no token is not asked again until it answers `403` with
    /// `X-CSRF-Token: Required`.
    public var csrfProtection = true

    /// Creates parameters with the defaults.
    public init() {}

    /// The store file: `storePath/storeName.db`.
    public var storeFile: String {
        let folder = storePath ?? FileManager.default.currentDirectoryPath
        return (folder as NSString).appendingPathComponent(storeName + ".db")
    }

    /// `extraStreamParameters` split into pairs; malformed text is an error naming the part.
    public func extraStreamOptions() throws(OfflineODataError) -> [String: String] {
        guard let text = extraStreamParameters, !text.isEmpty else { return [:] }
        var options: [String: String] = [:]
        for part in text.split(separator: ";", omittingEmptySubsequences: true) {
            let pair = part.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, !pair[0].trimmingCharacters(in: .whitespaces).isEmpty else {
                throw OfflineODataError(.invalidParameter, "extraStreamParameters: '\(part)' is not key=value")
            }
            let key = pair[0].trimmingCharacters(in: .whitespaces)
            guard !key.hasPrefix("$"), !key.hasPrefix("@") else {
                throw OfflineODataError(.invalidParameter, "extraStreamParameters: '\(key)' would be an OData query option; custom options cannot start with $ or @")
            }
            options[key] = pair[1].trimmingCharacters(in: .whitespaces)
        }
        return options
    }
}

/// A named read request whose results the store keeps (SPEC §3).
public struct OfflineODataDefiningQuery: Sendable, Hashable, Codable {
    /// Unique name.
    public var name: String
    /// The read request relative to the service root, e.g. `Orders?$expand=Items`.
    public var query: String
    /// Whether media streams of the entities are downloaded too.
    public var automaticallyRetrievesStreams: Bool

    /// Creates a defining query.
    public init(name: String, query: String, automaticallyRetrievesStreams: Bool = false) {
        self.name = name
        self.query = query
        self.automaticallyRetrievesStreams = automaticallyRetrievesStreams
    }
}

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
    public init(transactionID: String? = nil, unmodifiableRequest: Bool = false, customTag: String? = nil, uploadCategory: String? = nil,
                removeAfterUpload: Bool = false, customHeaders: [String: String] = [:]) {
        self.transactionID = transactionID
        self.unmodifiableRequest = unmodifiableRequest
        self.customTag = customTag
        self.uploadCategory = uploadCategory
        self.removeAfterUpload = removeAfterUpload
        self.customHeaders = customHeaders
    }
}

/// A provider failure with a category and a message that names what is wrong.
public struct OfflineODataError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure.
    public enum Code: String, Sendable {
        case invalidParameter, invalidRequest, notOpen, alreadyOpen, notSupportedOffline, duplicateDefiningQuery,
             unknownDefiningQuery, pendingChanges, backend, transport, store, cancelled,
             /// The store's key is wrong (or its first page is damaged: SQLCipher cannot tell).
             wrongKey,
             /// Another process or connection held the store locked past the busy timeout: try
             /// again later; the store and the key are fine.
             storeBusy,
             /// The store file is empty, cut off or has a damaged page: not a key problem.
             storeDamaged,
             /// The backend answered `401` again after the credentials were refreshed (or no
             /// ``ODataAuthenticator`` is set); nothing of the operation was lost.
             unauthorized
    }

    /// The kind of failure.
    public var code: Code
    /// What is wrong and where.
    public var message: String
    /// The HTTP status when the backend answered with an error.
    public var httpStatus: Int?

    /// Creates an error.
    public init(_ code: Code, _ message: String, httpStatus: Int? = nil) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
