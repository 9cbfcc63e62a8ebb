import Foundation

/// The configuration in force, replaced whole by a reload.
final class ConfigurationBox: @unchecked Sendable {
    // `@unchecked Sendable`: `stored` is only touched under `lock`.
    private let lock = NSLock()
    private var stored: GatewayConfiguration

    init(_ configuration: GatewayConfiguration) { stored = configuration }

    var value: GatewayConfiguration { lock.withLock { stored } }

    func replace(_ configuration: GatewayConfiguration) { lock.withLock { stored = configuration } }

    /// Reloads one at a time (SIGHUP and the admin API may come together): each compares with,
    /// and replaces, what the one before it left. Recursive: a reload from the source reloads.
    private let reloading = NSRecursiveLock()
    func serialized<T>(_ body: () -> T) -> T { reloading.withLock(body) }
}

extension GatewayConfiguration {
    /// What makes it unusable, checked whole before a gateway starts or takes it on a reload:
    /// a JWT verification that cannot verify, admin access too weak, no backend.
    public func validate() throws(GatewayConfigurationError) {
        guard !backends.isEmpty else { throw .init(line: 0, message: "no backend is configured") }
        for backend in backends {
            for verification in backend.jwtVerification {
                if let problem = verification.problem {
                    throw .init(
                        line: 0, message: "JWT verification of \(verification.issuer) for \(backend.url): \(problem)")
                }
            }
        }
        if let admin, let problem = admin.problem { throw .init(line: 0, message: "[admin]: \(problem)") }
    }
}

/// What a reload did: which settings changed, or why it was refused.
public struct ReloadOutcome: Sendable, Codable, Equatable {
    /// Whether the new configuration is in force.
    public var applied: Bool
    /// The settings that differ from the one before (`backends`, `refreshInterval`, …).
    public var changed: [String]
    /// Why it was refused (the line and reason), nil when applied.
    public var error: String?
}

extension Gateway {
    /// Takes `new` in place of the configuration in force, after checking it whole; requests
    /// under way go on. Refused (the running one stays) when it is unusable, when it would
    /// leave a running admin API without credentials, or when it changes what only a restart
    /// changes (PostgreSQL's deadline).
    public func reload(_ new: GatewayConfiguration) -> ReloadOutcome {
        current.serialized { reloadSerialized(new) }
    }

    private func reloadSerialized(_ new: GatewayConfiguration) -> ReloadOutcome {
        let old = configuration
        do {
            try new.validate()
        } catch {
            logger.error("Configuration reload refused", metadata: ["error": "\(error)"])
            return ReloadOutcome(applied: false, changed: [], error: "\(error)")
        }
        if old.admin != nil, new.admin == nil {
            return ReloadOutcome(
                applied: false, changed: [],
                error: "the new configuration has no [admin] access, and the admin API runs: keep one, or restart")
        }
        if old.postgresTimeout != new.postgresTimeout {
            return ReloadOutcome(
                applied: false, changed: [], error: "postgresTimeout changes only with a restart")
        }
        let before = old.summary
        let after = new.summary
        var changed: [String] = []
        if before.backends != after.backends { changed.append("backends") }
        for (name, a, b) in [
            ("refreshInterval", before.refreshInterval, after.refreshInterval),
            ("tombstoneRetention", before.tombstoneRetention, after.tombstoneRetention),
            ("scopeRetention", before.scopeRetention, after.scopeRetention),
            ("requestRetention", before.requestRetention, after.requestRetention),
            ("inDoubtAfter", before.inDoubtAfter, after.inDoubtAfter),
            ("backendTimeout", before.backendTimeout, after.backendTimeout),
        ] where a != b {
            changed.append(name)
        }
        for (name, a, b) in [
            ("refresherKeeps", old.refresherKeeps, new.refresherKeeps),
            ("metadataCheckInterval", old.metadataCheckInterval, new.metadataCheckInterval),
        ] where a != b {
            changed.append(name)
        }
        if before.pageSize != after.pageSize { changed.append("pageSize") }
        if old.gatewayETags != new.gatewayETags { changed.append("gatewayETags") }
        if old.admin != new.admin { changed.append("admin") }
        // What the summary leaves out (secrets, per-query settings) is a change too.
        if !changed.contains("backends"),
            old.backends.count != new.backends.count
                || zip(old.backends, new.backends).contains(where: { a, b in
                    a.sharedAuthorization != b.sharedAuthorization || a.queryTracking != b.queryTracking
                        || a.queryRefreshInterval != b.queryRefreshInterval
                        || a.prepopulateInterval != b.prepopulateInterval
                        || a.jwtVerification.map(\.fingerprint) != b.jwtVerification.map(\.fingerprint)
                })
        {
            changed.append("backends")
        }
        current.replace(new)
        logger.notice("Configuration reloaded", metadata: ["changed": .string(changed.joined(separator: ", "))])
        return ReloadOutcome(applied: true, changed: changed, error: nil)
    }

    /// Reloads from the source the gateway was started with (its file and flags).
    public func reloadFromSource() -> ReloadOutcome {
        current.serialized { reloadFromSourceSerialized() }
    }

    private func reloadFromSourceSerialized() -> ReloadOutcome {
        guard let reloadSource else {
            return ReloadOutcome(
                applied: false, changed: [], error: "this gateway was started without a configuration source to reload")
        }
        do {
            return reload(try reloadSource())
        } catch {
            logger.error("Configuration reload refused", metadata: ["error": "\(error)"])
            return ReloadOutcome(applied: false, changed: [], error: "\(error)")
        }
    }
}

extension JWTVerification {
    /// Every setting of it, to tell two apart (secrets included; never shown).
    var fingerprint: [String?] { [issuer, audience, jwks, hmacSecret] }
}
