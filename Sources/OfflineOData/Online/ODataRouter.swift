import Foundation
public import ODataStore

/// How the router sends requests (SPEC §9).
public enum ODataWorkingMode: String, Sendable, CaseIterable {
    /// Every request goes to the backend.
    case online
    /// Every request goes to the offline store.
    case offline
    /// A request goes offline when its entity set is the entity set of a defining query, and
    /// online otherwise (function and action imports, `$batch`, sets no query downloads).
    case mixed
}

/// Where the router sends a request.
public enum ODataDestination: String, Sendable {
    /// The backend, through the online provider.
    case online
    /// The offline store, through the offline provider.
    case offline
}

/// Holds an online and an offline provider and sends each request to one of them by the
/// working mode (SPEC §9). It has the same request API as the providers.
///
/// The mode can be switched at any time: a request goes where the mode said when it arrived,
/// and requests in flight finish where they started.
public actor ODataRouter: ODataRequestHandler {
    /// The provider for requests that go to the backend.
    public nonisolated let online: OnlineODataProvider
    /// The provider for requests that go to the offline store.
    public nonisolated let offline: OfflineODataProvider
    /// The working mode; `mixed` by default.
    public private(set) var mode: ODataWorkingMode

    /// Creates a router over two providers of the same service.
    public init(online: OnlineODataProvider, offline: OfflineODataProvider, mode: ODataWorkingMode = .mixed) {
        self.online = online
        self.offline = offline
        self.mode = mode
    }

    /// Changes the working mode for the requests that arrive from now on.
    public func setMode(_ mode: ODataWorkingMode) { self.mode = mode }

    /// Where a request for `url` goes in the current mode.
    public func destination(for url: String) async -> ODataDestination {
        await Self.destination(
            for: url, mode: mode, serviceRoot: online.serviceRoot, offlineSets: offline.definingQueryEntitySets())
    }

    /// The routing rule on its own: `url` (relative or absolute) is reduced to its resource
    /// path; in mixed mode its first segment, without key, cast or query, decides.
    public static func destination(
        for url: String, mode: ODataWorkingMode, serviceRoot: String, offlineSets: Set<String>
    ) -> ODataDestination {
        switch mode {
        case .online: return .online
        case .offline: return .offline
        case .mixed:
            guard let set = firstSegment(of: resourcePath(of: url, serviceRoot: serviceRoot)) else { return .online }
            return offlineSets.contains(set) ? .offline : .online
        }
    }

    /// `https://host/service/Customers('A')?$top=1` → `Customers('A')`: the path below the
    /// service root, without query or fragment, percent-decoded.
    public static func resourcePath(of url: String, serviceRoot: String) -> String {
        // An absolute URL outside the service root keeps its whole path.
        var path = Keys.relativeToRoot(url, serviceRoot: serviceRoot) ?? URL(string: url)?.path ?? url
        if let end = path.firstIndex(where: { $0 == "?" || $0 == "#" }) { path = String(path[..<end]) }
        while path.hasPrefix("/") { path.removeFirst() }
        return path.removingPercentEncoding ?? path
    }

    /// The name at the start of a resource path: `Customers('A')/Orders` → `Customers`.
    static func firstSegment(of path: String) -> String? {
        let name = path.prefix { $0 != "/" && $0 != "(" }
        return name.isEmpty ? nil : String(name)
    }

    /// Runs the request where the mode sends it.
    public func execute(
        method: String, url: String, headers: [String: String] = [:], body: [UInt8] = [],
        options: OfflineODataRequestOptions = OfflineODataRequestOptions()
    ) async throws -> ODataResponse {
        switch await destination(for: url) {
        case .online:
            return try await online.execute(method: method, url: url, headers: headers, body: body, options: options)
        case .offline:
            let path = Self.relativeURL(url, serviceRoot: online.serviceRoot)
            return try await offline.execute(method: method, url: path, headers: headers, body: body, options: options)
        }
    }

    /// Reads where the mode sends the URL.
    public func read(_ url: String) async throws -> QueryResult {
        switch await destination(for: url) {
        case .online: return try await online.read(url)
        case .offline: return try await offline.read(Self.relativeURL(url, serviceRoot: online.serviceRoot))
        }
    }

    /// The URL below the service root, query kept (the offline provider takes relative URLs).
    static func relativeURL(_ url: String, serviceRoot: String) -> String {
        Keys.relativeToRoot(url, serviceRoot: serviceRoot) ?? url
    }
}

extension OfflineODataProvider {
    /// The entity sets the defining queries download (resolved through the model while the
    /// store is open, and then kept until the queries change; without an open store, the first
    /// path segment of each query).
    public func definingQueryEntitySets() -> Set<String> {
        if let definingSetsCache { return definingSetsCache }
        guard let model = try? openStore().model else {
            return Set(
                definingQueries.compactMap {
                    ODataRouter.firstSegment(of: ODataRouter.resourcePath(of: $0.query, serviceRoot: ""))
                })
        }
        let sets = Set(definingQueries.compactMap { try? DefiningQueries.entitySet(of: $0.query, model: model) })
        definingSetsCache = sets
        return sets
    }
}
