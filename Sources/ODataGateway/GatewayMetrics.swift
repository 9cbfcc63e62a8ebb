public import CoreMetrics
import Foundation

/// What the gateway counts, through swift-metrics: backend requests by kind, refreshes and the
/// rows they changed or removed, pages answered from PostgreSQL, defining-query reads passed through to a
/// backend that tracks changes itself (AUTO), uploads with the repeats answered from
/// PostgreSQL and the requests found in doubt (and those resolved by reading the backend), and
/// refresh time. The
/// factory decides where they go (`oodata gateway` serves them in Prometheus's text format at
/// `/metrics`); with swift-metrics' default factory they go nowhere.
public struct GatewayMetrics: Sendable {
    let backendRequests: @Sendable (String) -> Counter
    let refreshes: Counter
    let skippedRefreshes: Counter
    let rowsChanged: Counter
    let rowsRemoved: Counter
    let fullPages: Counter
    let deltaPages: Counter
    let passedThrough: Counter
    let uploads: Counter
    let repeatsAnswered: Counter
    let inDoubt: Counter
    let inDoubtResolved: Counter
    let refreshTime: CoreMetrics.Timer
    let storeBuilds: Counter
    /// Repeats of a request ID recorded for another identity (answered 409, never forwarded).
    let foreignRepeats: Counter
    /// Paths refused before they left the gateway (dot segments, other hosts, …).
    let refusedPaths: Counter
    /// Rows written into scopes by write-through, and scopes made due because a change could not
    /// be written through.
    let writtenThrough: Counter
    let madeDue: Counter
    /// Refreshes the refresher ran off the request path.
    let backgroundRefreshes: Counter
    /// Requests answered 429 by throttling.
    let throttled: Counter

    /// Metrics made by `factory`.
    public init(factory: any MetricsFactory = MetricsSystem.factory) {
        let requests = [
            "refresh", "forward", "credentials", "metadata", "upload", "in-doubt", "etag", "write-through",
        ].reduce(
            into: [String: Counter]()
        ) {
            $0[$1] = Counter(
                label: "oodata_gateway_backend_requests_total", dimensions: [("kind", $1)], factory: factory)
        }
        let other = Counter(
            label: "oodata_gateway_backend_requests_total", dimensions: [("kind", "other")],
            factory: factory)
        backendRequests = { kind in requests[kind] ?? other }
        refreshes = Counter(label: "oodata_gateway_refreshes_total", factory: factory)
        skippedRefreshes = Counter(label: "oodata_gateway_refreshes_shared_total", factory: factory)
        rowsChanged = Counter(label: "oodata_gateway_rows_changed_total", factory: factory)
        rowsRemoved = Counter(label: "oodata_gateway_rows_removed_total", factory: factory)
        fullPages = Counter(label: "oodata_gateway_pages_total", dimensions: [("kind", "full")], factory: factory)
        deltaPages = Counter(label: "oodata_gateway_pages_total", dimensions: [("kind", "delta")], factory: factory)
        passedThrough = Counter(label: "oodata_gateway_passed_through_total", factory: factory)
        uploads = Counter(label: "oodata_gateway_uploads_total", factory: factory)
        repeatsAnswered = Counter(label: "oodata_gateway_repeats_answered_total", factory: factory)
        inDoubt = Counter(label: "oodata_gateway_in_doubt_total", factory: factory)
        inDoubtResolved = Counter(label: "oodata_gateway_in_doubt_resolved_total", factory: factory)
        storeBuilds = Counter(label: "oodata_gateway_store_builds_total", factory: factory)
        foreignRepeats = Counter(label: "oodata_gateway_foreign_repeats_total", factory: factory)
        refusedPaths = Counter(label: "oodata_gateway_refused_paths_total", factory: factory)
        writtenThrough = Counter(label: "oodata_gateway_rows_written_through_total", factory: factory)
        madeDue = Counter(label: "oodata_gateway_scopes_made_due_total", factory: factory)
        backgroundRefreshes = Counter(
            label: "oodata_gateway_background_refreshes_total", factory: factory)
        throttled = Counter(label: "oodata_gateway_throttled_total", factory: factory)
        refreshTime = CoreMetrics.Timer(
            label: "oodata_gateway_refresh_seconds", preferredDisplayUnit: .seconds,
            factory: factory)
    }
}
