import Foundation

/// A request rate and the burst allowed above it: `10/s`, `600/min,burst=50` (SAP's
/// throttling policy names a number of requests per period; the burst defaults to the rate
/// of one second, at least 1).
public struct ThrottleRate: Sendable, Equatable, CustomStringConvertible {
    /// Requests per second, on average.
    public var perSecond: Double
    /// Requests that may come at once after a quiet time.
    public var burst: Double

    /// A rate of `perSecond` with `burst` (default: a second's worth, at least 1).
    public init(perSecond: Double, burst: Double? = nil) {
        self.perSecond = perSecond
        self.burst = burst ?? max(1, perSecond.rounded(.up))
    }

    /// Reads `N/s`, `N/min` or `N/h`, optionally followed by `,burst=M`.
    public init(parsing text: String) throws(GatewayConfigurationError) {
        let parts = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        guard let first = parts.first else { throw .init(line: 0, message: "give N/s, N/min or N/h") }
        let rate = first.split(separator: "/").map { $0.trimmingCharacters(in: .whitespaces) }
        let periods: [String: Double] = ["s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600]
        guard rate.count == 2, let count = Double(rate[0]), count > 0, count.isFinite,
            let period = periods[rate[1].lowercased()]
        else { throw .init(line: 0, message: "give a number of requests per period: N/s, N/min or N/h") }
        var burst: Double?
        for part in parts.dropFirst() {
            guard part.lowercased().hasPrefix("burst="), let value = Double(part.dropFirst(6)), value >= 1,
                value.isFinite
            else { throw .init(line: 0, message: "'\(part)' is not burst=N (N at least 1)") }
            burst = value
        }
        self.init(perSecond: count / period, burst: burst)
    }

    public var description: String {
        let rate = perSecond >= 1 ? "\(Self.number(perSecond))/s" : "\(Self.number(perSecond * 60))/min"
        return rate + ",burst=\(Self.number(burst))"
    }

    static func number(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}

/// Token buckets, one per key (a device or a user), on this instance: each request takes a
/// token; a bucket refills at its rate up to its burst. An empty bucket answers how long until
/// the next token. Buckets idle long enough to be full again are dropped.
actor ThrottleBuckets {
    private struct Bucket {
        var tokens: Double
        var at: ContinuousClock.Instant
        /// How long this bucket takes to fill from empty (its own rate's, capped at a day).
        var fills: Duration
    }

    private var buckets: [String: Bucket] = [:]
    private var sweptAt = ContinuousClock.now
    /// The most keys kept; beyond that, the full buckets go first (a full bucket is as if new).
    static let limit = 100_000

    /// Takes a token of `key`'s bucket: nil when one was there, or the seconds until one is.
    func take(_ key: String, rate: ThrottleRate, now: ContinuousClock.Instant = .now) -> Double? {
        var bucket =
            buckets[key] ?? Bucket(tokens: rate.burst, at: now, fills: .milliseconds(Int64(Self.fillTime(rate) * 1000)))
        let elapsed =
            Double((now - bucket.at).components.seconds)
            + Double((now - bucket.at).components.attoseconds) / 1e18
        bucket.tokens = min(rate.burst, bucket.tokens + max(0, elapsed) * rate.perSecond)
        bucket.at = now
        if bucket.tokens >= 1 {
            bucket.tokens -= 1
            buckets[key] = bucket
            sweep(now: now)
            return nil
        }
        buckets[key] = bucket
        return (1 - bucket.tokens) / rate.perSecond
    }

    /// Gives back a token taken for a request another limit refused.
    func giveBack(_ key: String, rate: ThrottleRate) {
        guard var bucket = buckets[key] else { return }
        bucket.tokens = min(rate.burst, bucket.tokens + 1)
        buckets[key] = bucket
    }

    /// Seconds `rate` takes to fill a bucket from empty, at most a day.
    static func fillTime(_ rate: ThrottleRate) -> Double { min(rate.burst / rate.perSecond, 86_400) }

    private func sweep(now: ContinuousClock.Instant) {
        guard buckets.count > Self.limit || now - sweptAt > .seconds(60) else { return }
        sweptAt = now
        buckets = buckets.filter { now - $0.value.at < $0.value.fills }
        // Still over the limit (many keys in use at once, as from made-up credentials): some go,
        // which gives them a full burst again, rather than a sweep at every request.
        if buckets.count > Self.limit {
            var kept = 0
            buckets = buckets.filter { _ in
                kept += 1
                return kept <= Self.limit * 3 / 4
            }
        }
    }

    /// The number of buckets kept (for tests).
    var count: Int { buckets.count }
}
