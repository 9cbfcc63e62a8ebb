import Foundation

/// An error the gateway answers with an OData error body.
public struct GatewayError: Error, Sendable, CustomStringConvertible {
    /// The HTTP status of the answer.
    public var status: Int
    /// The OData error code.
    public var code: String
    /// What is wrong and where.
    public var message: String

    /// An error with its status, code and message.
    public init(status: Int, code: String, _ message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}

/// How the gateway tracks a defining query's changes (SAP's `track_deltas`).
public enum DeltaTracking: String, Sendable, CaseIterable {
    /// Tracked by the gateway. (The backend's own delta links are not used yet: the same as
    /// `always`.)
    case auto = "AUTO"
    /// Tracked by the gateway, whatever the backend offers.
    case always = "ALWAYS"
    /// Not tracked: requests go to the backend, its delta links pass through.
    case never = "NEVER"
}

/// One backend behind the gateway.
public struct GatewayBackend: Sendable {
    /// Where the gateway serves it: "" for the root, otherwise `/NAME/`.
    public var name: String
    /// The backend's service root, ending in `/`.
    public var url: String
    /// How defining queries are tracked unless a query says otherwise.
    public var trackDeltas: DeltaTracking = .auto
    /// Defining queries (entity-set paths, or whole relative URLs) whose data is the same for
    /// every user: refreshed with the gateway's own credentials, once for all devices.
    public var sharedQueries: Set<String> = []
    /// Per defining query: `track_deltas` and `refresh_interval` when they differ from the backend's.
    public var queryTracking: [String: DeltaTracking] = [:]
    public var queryRefreshInterval: [String: Double] = [:]
    /// The `Authorization` header the gateway sends for shared data (nil: none).
    public var sharedAuthorization: String?

    /// A backend served at `name` ("" for the root).
    public init(name: String = "", url: String) {
        self.name = name
        self.url = url.hasSuffix("/") ? url : url + "/"
    }

    /// Whether `query` (a canonical relative URL) is shared data.
    func isShared(_ query: String) -> Bool {
        sharedQueries.contains(query) || sharedQueries.contains(Self.entitySetPath(query))
    }

    func tracking(_ query: String) -> DeltaTracking {
        queryTracking[query] ?? queryTracking[Self.entitySetPath(query)] ?? trackDeltas
    }

    func refreshInterval(_ query: String, default value: Double) -> Double {
        queryRefreshInterval[query] ?? queryRefreshInterval[Self.entitySetPath(query)] ?? value
    }

    static func entitySetPath(_ query: String) -> String {
        String(query.prefix { $0 != "?" && $0 != "(" && $0 != "/" })
    }
}

/// What a gateway serves and how (SPEC §13). Built from flags, or from an INI file shaped like
/// SAP's application configuration (see ``GatewayConfiguration/parse(ini:defaultBackend:)``).
public struct GatewayConfiguration: Sendable {
    /// The backends, each at its name.
    public var backends: [GatewayBackend]
    /// Seconds within which a device is answered from the last refresh without reading the
    /// backend; 0 refreshes at each request (requests that arrive together share one read).
    public var refreshInterval: Double = 0
    /// Seconds tombstones are kept; a delta token older than that gets 410.
    public var tombstoneRetention: Double = 7 * 24 * 3600
    /// Rows per page the gateway answers unless a device asks for fewer.
    public var pageSize = 1000
    /// Seconds a backend request may take.
    public var backendTimeout: Double = 120

    /// A configuration serving `backends`.
    public init(backends: [GatewayBackend]) {
        self.backends = backends
    }
}
