public import Foundation
public import Logging

/// The settings of an offline provider (SPEC §2). Names and types follow SAP's
/// `OfflineODataParameters` where SAP has the setting (`storeName: String?`, `storePath: URL?`,
/// `timeout: Int32?`, `pageSize` defaulting to ``noPaging``), so code written for SAP's SDK
/// compiles; settings SAP does not have are this package's own. Each default is in the
/// property's declaration.
public struct OfflineODataParameters: Sendable {
    /// The value of ``pageSize`` that means no paging (SAP's `noPaging`): nil.
    public static let noPaging: Int? = nil

    /// Key of the store file; fixed at the first open; every later open needs it.
    public var storeEncryptionKey: String?
    /// File name stem of the store (`localstore` gives `localstore.db`); nil means `localstore`.
    public var storeName: String? = "localstore"
    /// Folder of the store files, created when missing. Nil means the platform's folder for
    /// application data (see ``defaultStoreFolder``); SAP uses the app's Documents folder.
    public var storePath: URL?
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
    /// The app's version, sent as `OOData-App-Version` (a sync gateway lists it with the
    /// device's `Client-Instance-ID`); nil sends none.
    public var applicationVersion: String?
    /// The longest `Retry-After` a request waits for when it is answered 429 (too many
    /// requests) before it is sent again, seconds; a longer one, or a fourth 429 in a row,
    /// reaches the caller. 0 (or less) never waits; more than an hour counts as an hour. A
    /// request can so take up to three times this plus four of its timeouts. A change (POST,
    /// PATCH, …) is sent again only with a `Repeatability-Request-ID` (see
    /// ``enableRepeatableRequests``) or when a sync gateway answered the 429.
    public var maximumRetryAfter: Double = 60
    /// Cookies added to every HTTP request the provider sends.
    public var customCookies: [String: String] = [:]
    /// Send repeatable-request headers with every modification so each is applied exactly once.
    public var enableRepeatableRequests = true
    /// Whether an upload may overwrite other users' changes of entities whose ETag the store
    /// does not know (their backend gave none): with `true` such updates and deletes go with
    /// `If-Match: *`. With `false` (the default) they go without `If-Match`, so a backend that
    /// wants one answers 428 into the ErrorArchive. The first change of an entity with a known
    /// ETag is always checked with it.
    public var lastWriterWins = false
    /// Whether a first open through a sync gateway takes the store file the gateway offers
    /// (built on the server from the rows it keeps), checks it and encrypts it with
    /// ``storeEncryptionKey``, instead of paging through every defining query. False always pages.
    public var acceptsServerBuiltStore = true
    /// Whether ``OfflineODataProvider/open()`` of an existing store also checks the backend's
    /// `$metadata` and migrates the store when it changed, as every download does (SPEC §14).
    /// An open that cannot reach the backend still opens the store (the check is logged as
    /// failed and the next download makes it). False: only downloads check.
    public var checksMetadataAtOpen = false
    /// Whether a download's commits wait for the disk, as local changes and recorded upload
    /// answers always do. False (the default): they wait for the operating system only, which
    /// survives the app being killed; a power loss may undo the last download (never damage the
    /// store or lose a local change), and the next download fetches the same rows again.
    public var durableDownloads = false
    /// Whether a download compares the scope checksum a sync gateway sends with the last page
    /// of a defining query (`OOData-Scope-Checksum`) with the rows the store holds for it, and
    /// reads the query again when they differ (an EventLog entry of type
    /// `ScopeChecksumMismatch` says so). On by default; a backend that sends none is not
    /// affected.
    public var verifiesScopeChecksums = true
    /// How an upload resolves a request the backend refuses with 412 or 428 (another user
    /// changed the entity first; SPEC §15). ``OfflineODataConflictPolicy/archive``, the default,
    /// archives it with the backend's copy; the others resolve it and report the resolution.
    public var conflictPolicy: OfflineODataConflictPolicy = .archive
    /// Conflict policies for single entity sets, by name, over ``conflictPolicy``.
    public var conflictPolicies: [String: OfflineODataConflictPolicy] = [:]
    /// Seconds a custom conflict resolver (``OfflineODataConflictPolicy/custom(_:)``) may take
    /// for one conflict. One that has not answered by then is cancelled and its request goes to
    /// the ErrorArchive, so that a resolver waiting on a person or a network cannot hold the
    /// upload for ever.
    public var conflictResolverTimeout: TimeInterval = 60
    /// How often, in milliseconds, the status of an upload or download running on a sync
    /// gateway is pulled and reported as the gateway's steps (SAP's `cloudProgressPullInterval`;
    /// never below 500). Only through a gateway: a plain backend is never asked.
    public var cloudProgressPullInterval = 2000
    /// Largest number of entities one local read returns; ``noPaging`` (nil) for no paging.
    public var pageSize: Int? = OfflineODataParameters.noPaging
    /// Network timeout in whole seconds, as SAP declares it: how long a request may go without
    /// sending or receiving a byte before it fails (a long download that keeps receiving does
    /// not). Nil for the transport's default (60 s for both transports of this package).
    /// ``timeoutInterval`` takes precedence when set.
    public var timeout: Int32?
    /// The network timeout with fractions of a second (this package's own); when nil,
    /// ``timeout`` applies. (With AsyncHTTPClient, the connection is probed more often below
    /// 30 s; with URLSession on Linux, the timeout is rounded up to whole seconds.)
    public var timeoutInterval: TimeInterval?

    /// The timeout the transport gets: ``timeoutInterval``, else ``timeout``.
    public var effectiveTimeout: TimeInterval? { timeoutInterval ?? timeout.map(TimeInterval.init) }
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
    /// Most requests in one `$batch` request. An upload's first batch holds up to 100; each
    /// full batch the backend answers within 2 s (or a quarter of the timeout, when that is
    /// less) doubles the next one, up to this maximum, and
    /// a batch answered in more than a quarter of the timeout halves it. A fast backend so gets
    /// few large batches, and a slow one batches that stay well within the timeout. A batch
    /// also ends at about 4 MiB of requests (a larger change set goes alone).
    public var maxRequestsPerBatch = 1000
    /// Most pages one defining query may take in one download (its next links): a backend
    /// whose links never end fails the download with a clear error instead of running on.
    public var maximumPagesPerQuery = 100_000
    /// Entities a first open stores per transaction, at least: its pages are committed in groups
    /// (a page is never split; the entities of a page's `$expand` are not counted). A fill that
    /// is cut short starts again from nothing, so the commits between its pages only cost: each
    /// writes every page of the store it changed, and the indexes of foreign keys gain rows all
    /// over. Committed per page of 1,000 entities, the first open of 1M took 1.3 times as long
    /// as in groups of 20,000 (docs/benchmarks.md).
    package var firstOpenEntitiesPerCommit = 20_000
    /// When a first open builds the lookup indexes of the sets it fills at its end instead of
    /// row by row: once a group of its pages (``firstOpenEntitiesPerCommit``) writes more than
    /// `factor` pages per page the file grew by, for a group that grew it by at least
    /// `minimumGrowth` pages (see `Downloader.thrashing`). Tests lower both to force it.
    package var firstOpenIndexDeferral = (factor: 3, minimumGrowth: 256)
    /// How many bytes of a delta's pages (their bodies as received) a download keeps in memory,
    /// parsed, before it stages the rest in the store (see `Downloader.runStaged`): at 1M rows
    /// of ten properties, a delta of 1 % is 2.9 MiB.
    package var heldDeltaBytes = 4 << 20
    /// Most pages in a row without a single entity that still link to a next page; past it the
    /// download fails (a backend that pages through nothing).
    public var maximumEmptyPagesInARow = 100
    /// Credentials for the backend, asked for before the first request and refreshed once
    /// after a `401` (see ``ODataAuthenticator``). Nil: no `Authorization` header.
    public var authenticator: (any ODataAuthenticator)?
    /// The user who works with the store now, on a device that several users share in turn
    /// (SAP's `currentUser`; SPEC §16). The store records it with its data and with every
    /// request queued, and a request is only ever sent with its own user's credentials. Opening
    /// the store with another user switches it: the previous user's pending requests are
    /// uploaded first (``forceUploadOnUserSwitch``) or dealt with as ``userSwitchPolicy`` says,
    /// and every defining query is read again with the new user's credentials before the open
    /// returns, so nothing only the previous user could read stays readable. Nil: a store
    /// without users (opening one that has users with nil is refused).
    public var currentUser: String?
    /// Whether a switch to another ``currentUser`` first uploads the previous user's pending
    /// requests with that user's credentials, from ``userAuthenticators`` (SAP's
    /// `forceUploadOnUserSwitch`). Without them the switch goes as ``userSwitchPolicy`` says.
    public var forceUploadOnUserSwitch = false
    /// Credentials of users other than ``currentUser``, by user name: used only to upload that
    /// user's own requests (a forced upload at a switch), never for anyone else's.
    public var userAuthenticators: [String: any ODataAuthenticator] = [:]
    /// What a switch to another ``currentUser`` does with pending requests of the previous user
    /// that it does not upload (see ``OfflineODataUserSwitchPolicy``).
    public var userSwitchPolicy: OfflineODataUserSwitchPolicy = .refuse
    /// The key the backup of a previous user's requests is encrypted with
    /// (``OfflineODataUserSwitchPolicy/discardAfterBackup``): the operator's, never the store's.
    public var userSwitchBackupKey: String?
    /// Whether that backup is a copy of the whole store (its data with the queue) instead of
    /// the previous user's requests and ErrorArchive entries alone.
    public var userSwitchBackupIncludesStore = false
    /// Where that backup goes: nil for the sync gateway's `$oodata/support/<name>`; a URL
    /// relative to the service root, or absolute, that takes chunks as
    /// ``OfflineODataProvider/sendStore(to:supportKey:chunkSize:)`` sends them.
    public var userSwitchBackupURL: String?
    /// Fetch an `X-CSRF-Token` before modifying requests and send it with them, keeping the
    /// session cookies it belongs to, as SAP Gateway requires (see `docs/offline.md`, "Real backends"). A
    /// backend that gives no token is not asked again until it answers `403` with
    /// `X-CSRF-Token: Required`.
    public var csrfProtection = true

    /// Where the provider, its default transport and its backend session log (see
    /// ``OfflineODataLogging``): summaries of opens, uploads and downloads at `info`, CSRF and
    /// credential refreshes at `notice`, requests that went to the ErrorArchive and failed HTTP
    /// exchanges at `warning`, failed operations at `error`. Logs nothing by default.
    public var logger: Logger = OfflineODataLogging.disabled

    /// Creates parameters with the defaults.
    public init() {}

    /// Indexes for local queries, per entity set: each index is its properties in order
    /// (paths such as `Address/City` for a property of a complex property), e.g.
    /// `["Products": [["Name"], ["Category", "Price"]]]`. A `$filter` on the first properties
    /// of an index, or an `$orderby` in its order, then reads only the rows it needs. They are
    /// made with the first open's fill, and on an open when the declarations changed (indexes
    /// no longer declared are dropped, `[:]` drops them all). The store also indexes the `$orderby` and `$filter`
    /// properties of the defining queries themselves. Each index costs a little on every write.
    /// Nil (the default) keeps the indexes an existing store has.
    public var indexes: [String: [[String]]]?

    /// The store file: `storePath/storeName.db`.
    public var storeFile: String {
        let folder = storePath ?? Self.defaultStoreFolder
        return folder.appendingPathComponent((storeName ?? "localstore") + ".db").path
    }

    /// The folder of a store without ``storePath``: the platform's folder for application data.
    /// On Apple platforms Application Support (in a folder named after the bundle identifier on
    /// macOS, where that folder is shared); on Linux and elsewhere `$XDG_DATA_HOME` or
    /// `~/.local/share`, in a folder named after the program. The provider creates it when
    /// missing.
    public static var defaultStoreFolder: URL {
        let name = Bundle.main.bundleIdentifier ?? ProcessInfo.processInfo.processName
        #if os(macOS)
            let base =
                FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first
                ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent("Library/Application Support")
            return base.appendingPathComponent(name, isDirectory: true)
        #elseif canImport(Darwin)
            // iOS, tvOS, watchOS, visionOS: the app's own container.
            return FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first
                ?? FileManager.default.temporaryDirectory
        #else
            let environment = ProcessInfo.processInfo.environment
            let base: URL
            if let data = environment["XDG_DATA_HOME"], data.hasPrefix("/") {
                base = URL(fileURLWithPath: data, isDirectory: true)
            } else {
                let home =
                    environment["HOME"].map { URL(fileURLWithPath: $0, isDirectory: true) }
                    ?? FileManager.default.homeDirectoryForCurrentUser
                base = home.appendingPathComponent(".local/share", isDirectory: true)
            }
            return base.appendingPathComponent(name, isDirectory: true)
        #endif
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
                throw OfflineODataError(
                    .invalidParameter,
                    "extraStreamParameters: '\(key)' would be an OData query option; custom options cannot start with $ or @"
                )
            }
            options[key] = pair[1].trimmingCharacters(in: .whitespaces)
        }
        return options
    }
}

/// What a switch to another user does with the previous user's pending requests when they
/// are not uploaded first (SPEC §16; SAP's shared-device settings name the same choices).
public enum OfflineODataUserSwitchPolicy: String, Sendable, Hashable, CaseIterable {
    /// The open fails with ``OfflineODataError/Code/pendingChanges``, naming the user and how
    /// many of their requests wait: the previous user (or their credentials) must upload them
    /// first. Nothing changes.
    case refuse
    /// The requests are set aside for their user (with their ErrorArchive entries): the new
    /// user neither sees nor sends them, the entities they changed go back to their downloaded
    /// state, and they come back, applied again, when their user opens the store next.
    case keepForTheirUser
    /// The requests (pending and failed, with their ErrorArchive entries) are sent to the sync
    /// gateway for support first, in a file encrypted with
    /// ``OfflineODataParameters/userSwitchBackupKey`` (`POST $oodata/support/user-switch-…`,
    /// or ``OfflineODataParameters/userSwitchBackupURL``), then discarded, and the entities they
    /// changed go back to their downloaded state (SAP's "discard after upload"). The backup must
    /// be taken whole before anything is discarded: a failed backup fails the open, and nothing
    /// changes.
    case discardAfterBackup
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
            unauthorized,
            /// The disk that holds the store is full: the write was not made (nothing was
            /// queued or applied); reads, the RequestQueue and the ErrorArchive still work.
            diskFull
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
