import Foundation

/// One operation of a history: its invocation joined with its completion (nil when its
/// process was killed before it completed).
struct Operation {
    var device: Int
    var n: Int
    var op: String
    var key: String?
    var value: String?
    var t0: Double
    var t1: Double?
    var ok: Bool?
    var error: String?
    var values: [String: String]?
    var contacts: [String]?
    var phase: String?
    var archived: [DeviceFinal.Archived]?
    var mismatches: [String]?

    var completed: Bool { t1 != nil && ok == true }
    var indeterminate: Bool { t1 == nil }
    var isWrite: Bool { ["create", "update", "delete", "contact", "shared"].contains(op) }
    var isUpload: Bool { op == "upload" || op == "drain" }
}

/// A checker's verdict, with its counts.
struct Verdict: Codable {
    var checker: String
    var passed: Bool
    var counts: [String: Int]
    var notes: [String]
    /// The counts that are violations (the others are for information).
    var violations: [String] = []

    /// Whether every violation counted is one of `known` (a failure known to happen today).
    func onlyKnown(_ known: Set<String>) -> Bool {
        !passed && violations.allSatisfy { (counts[$0] ?? 0) == 0 || known.contains($0) }
    }

    var line: String {
        let figures = counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        return "\(checker.padding(toLength: 16, withPad: " ", startingAt: 0)) \(passed ? "PASS" : "FAIL")  \(figures)"
    }
}

/// Everything the checkers read.
struct Observations {
    var devices: Int
    var operations: [Int: [Operation]]
    var finals: [Int: DeviceFinal]
    /// The backend read directly after the quiet phase.
    var partners: [String: String]
    var contacts: [String]
    /// The gateway's rows in PostgreSQL (nil when the gateway kept none: its backend's own
    /// delta links were passed through).
    var gatewayPartners: [String: String]?
    var gatewayContacts: [String]?
    var requests: [(at: Date, request: String)]
    var nemesis: [NemesisEvent]
    var kills: [Int: [Double]]
    /// Exits of devices and gateways that no fault caused: `name: status`.
    var crashes: [String]
    var refreshInterval: Double
    var liveness: Double
    var tracksOnGateway: Bool
    var originalPartners: [String: String]
    var plant: Plant?
    var quietStart: Double

    static let absent = "<absent>"

    static func join(_ events: [HistoryEvent]) -> [Operation] {
        var byNumber: [Int: Operation] = [:]
        for event in events {
            if event.type == "invoke" {
                byNumber[event.n] = Operation(
                    device: event.device, n: event.n, op: event.op, key: event.key, value: event.value, t0: event.time,
                    phase: event.phase, archived: event.archived)
            } else if var operation = byNumber[event.n] {
                operation.t1 = event.time
                operation.ok = event.ok
                operation.error = event.error
                operation.values = event.values
                operation.contacts = event.contacts
                operation.archived = operation.archived ?? event.archived
                operation.mismatches = event.mismatches
                byNumber[event.n] = operation
            }
        }
        return byNumber.values.sorted { $0.n < $1.n }
    }
}

/// The checkers over one run's observations.
struct Checkers {
    let o: Observations

    /// The ErrorArchive entry of each write of `device` (by its operation number).
    func archived(_ device: Int) -> [Int: DeviceFinal.Archived] {
        let operations = o.operations[device] ?? []
        let entries = (o.finals[device]?.archive ?? []) + operations.flatMap { $0.archived ?? [] }
        var result: [Int: DeviceFinal.Archived] = [:]
        for operation in operations where operation.isWrite {
            let entry = entries.first { entry in
                if operation.op == "delete", let key = operation.key {
                    return entry.method == "DELETE" && (entry.url ?? "").contains("'\(key)'")
                }
                guard let value = operation.value else { return false }
                return (entry.body ?? "").contains("\"\(value)\"")
            }
            if let entry { result[operation.n] = entry }
        }
        return result
    }

    /// When each write of `device` was acknowledged: the end of the first successful upload
    /// invoked after it completed.
    func acknowledged(_ device: Int) -> [Int: Double] {
        let operations = o.operations[device] ?? []
        let uploads = operations.filter { $0.isUpload && $0.completed }
        var result: [Int: Double] = [:]
        for write in operations where write.isWrite && write.completed {
            if let t1 = write.t1, let upload = uploads.first(where: { $0.t0 > t1 }) { result[write.n] = upload.t1 }
        }
        return result
    }

    /// When the first upload after each write of `device` started (its change reaches the
    /// backend no earlier).
    func firstSent(_ device: Int) -> [Int: Double] {
        let operations = o.operations[device] ?? []
        let uploads = operations.filter(\.isUpload)
        var result: [Int: Double] = [:]
        for write in operations where write.isWrite {
            let after = write.t1 ?? write.t0
            if let upload = uploads.first(where: { $0.t0 > after }) { result[write.n] = upload.t0 }
        }
        return result
    }

    func drained(_ device: Int) -> Bool { o.finals[device].map { $0.drained && $0.queued == 0 } ?? false }

    func contactCounts() -> [String: Int] {
        var counts: [String: Int] = [:]
        for contact in o.contacts {
            let name = contact.split(separator: " ", maxSplits: 1).dropFirst().first.map(String.init) ?? ""
            counts[name, default: 0] += 1
        }
        return counts
    }

    func lost() -> Verdict {
        var counts = [
            "writes": 0, "acked": 0, "archived": 0, "in-doubt": 0, "lost": 0, "applied-but-archived": 0,
            "undrained-devices": 0,
        ]
        var notes: [String] = []
        let contacts = contactCounts()
        var sharedAllowed: [String: Set<String>] = [:]
        for (key, value) in o.originalPartners where key.hasPrefix("BP") {
            sharedAllowed[key, default: []].insert(value)
        }
        for device in 0..<o.devices {
            let operations = o.operations[device] ?? []
            let archive = archived(device)
            let acks = acknowledged(device)
            let writes = operations.filter { $0.isWrite && ($0.completed || $0.indeterminate) }
            counts["writes", default: 0] += writes.filter(\.completed).count
            counts["acked", default: 0] += writes.filter { acks[$0.n] != nil && archive[$0.n] == nil }.count
            counts["archived", default: 0] += archive.count
            counts["in-doubt", default: 0] += archive.values.filter { $0.code == "RequestInDoubt" }.count
            for write in writes where write.op == "shared" {
                if archive[write.n] == nil || archive[write.n]?.code == "RequestInDoubt", let key = write.key,
                    let value = write.value
                {
                    sharedAllowed[key, default: []].insert(value)
                }
            }
            guard drained(device) else {
                counts["undrained-devices", default: 0] += 1
                continue
            }
            // Own partners: the backend holds the last change that was not refused.
            let byKey = Dictionary(grouping: writes.filter { ["create", "update", "delete"].contains($0.op) }) {
                $0.key ?? ""
            }
            for (key, list) in byKey {
                let ordered = list.sorted { $0.n < $1.n }
                let last = ordered.last { $0.completed && archive[$0.n] == nil }
                var allowed: Set<String> = []
                allowed.insert(
                    last.map { $0.op == "delete" ? Observations.absent : ($0.value ?? "") } ?? Observations.absent)
                for write in ordered where write.n > (last?.n ?? -1) {
                    if write.indeterminate || archive[write.n]?.code == "RequestInDoubt" {
                        allowed.insert(write.op == "delete" ? Observations.absent : (write.value ?? ""))
                    }
                }
                let actual = o.partners[key] ?? Observations.absent
                if !allowed.contains(actual) {
                    counts["lost", default: 0] += 1
                    if notes.count < 8 {
                        notes.append(
                            "device \(device) \(key): backend has \(actual), expected one of \(allowed.sorted())")
                    }
                }
            }
            // Contacts (server keys): each create there once, or archived.
            for write in writes where write.op == "contact" {
                let count = contacts[write.value ?? ""] ?? 0
                if let entry = archive[write.n] {
                    if entry.code != "RequestInDoubt" && count > 0 {
                        counts["applied-but-archived", default: 0] += 1
                        notes.append(
                            "device \(device) contact \(write.value ?? ""): archived (\(entry.code ?? "?")) "
                                + "but on the backend")
                    }
                } else if write.completed && count == 0 {
                    counts["lost", default: 0] += 1
                    if notes.count < 8 {
                        notes.append("device \(device) contact \(write.value ?? ""): not on the backend")
                    }
                }
            }
        }
        for (key, allowed) in sharedAllowed {
            let actual = o.partners[key] ?? Observations.absent
            if !allowed.contains(actual) {
                counts["lost", default: 0] += 1
                notes.append("shared \(key): backend has \(actual), which no device wrote")
            }
        }
        let passed = counts["lost"] == 0 && counts["applied-but-archived"] == 0
        return Verdict(
            checker: "lost", passed: passed, counts: counts, notes: notes,
            violations: ["lost", "applied-but-archived"])
    }

    func duplicated() -> Verdict {
        var duplicates = 0
        var notes: [String] = []
        let counts = contactCounts()
        for (name, count) in counts where name.hasPrefix("d") && name.contains(":") && count > 1 {
            duplicates += 1
            if notes.count < 8 { notes.append("contact \(name) is on the backend \(count) times") }
        }
        let checked = counts.keys.filter { $0.hasPrefix("d") && $0.contains(":") }.count
        return Verdict(
            checker: "duplicated", passed: duplicates == 0,
            counts: ["creates-checked": checked, "duplicated": duplicates],
            notes: notes, violations: ["duplicated"])
    }

    func readYourWrites() -> Verdict {
        var counts = [
            "reads": 0, "stale-after-ack": 0, "stale-before-ack": 0, "missing-contacts": 0,
            "false-conflicts": 0,
        ]
        var notes: [String] = []
        for device in 0..<o.devices {
            let operations = o.operations[device] ?? []
            let archive = archived(device)
            let acks = acknowledged(device)
            let writes = operations.filter { $0.isWrite && ["create", "update", "delete"].contains($0.op) }
            let byKey = Dictionary(grouping: writes) { $0.key ?? "" }
            // An own partner's change refused as a conflict: no one else writes it.
            for (n, entry) in archive where entry.status == 412 || entry.status == 424 {
                if writes.contains(where: { $0.n == n }) {
                    counts["false-conflicts", default: 0] += 1
                    if notes.count < 12 {
                        notes.append(
                            "device \(device) write \(n): \(entry.status ?? 0) \(entry.code ?? "") on its own entity")
                    }
                }
            }
            for read in operations where read.op == "read" && read.completed {
                counts["reads", default: 0] += 1
                guard let values = read.values else { continue }
                for (key, list) in byKey {
                    let before = list.filter { ($0.completed && ($0.t1 ?? 0) < read.t0) }.sorted { $0.n < $1.n }
                    guard let last = before.last else { continue }
                    // A refused change takes the backend's state back: not this checker's case.
                    if list.contains(where: { archive[$0.n] != nil && $0.t0 < read.t0 }) { continue }
                    var allowed: Set<String> = [last.op == "delete" ? Observations.absent : (last.value ?? "")]
                    for write in list where write.indeterminate && write.t0 < read.t0 {
                        allowed.insert(write.op == "delete" ? Observations.absent : (write.value ?? ""))
                    }
                    let actual = values[key] ?? Observations.absent
                    if !allowed.contains(actual) {
                        let acked = (acks[last.n] ?? .infinity) < read.t0
                        counts[acked ? "stale-after-ack" : "stale-before-ack", default: 0] += 1
                        if notes.count < 12 {
                            notes.append(
                                "device \(device) read \(read.n): \(key) = \(actual), "
                                    + "its last change \(allowed.sorted())"
                                    + (acked ? " (acknowledged)" : ""))
                        }
                    }
                }
                let seen = Set(read.contacts ?? [])
                for write in operations where write.op == "contact" && write.completed && (write.t1 ?? 0) < read.t0 {
                    if archive[write.n] == nil, let value = write.value, !seen.contains(value) {
                        counts["missing-contacts", default: 0] += 1
                        if notes.count < 12 {
                            notes.append("device \(device) read \(read.n): own contact \(value) missing")
                        }
                    }
                }
            }
        }
        let passed =
            counts["stale-after-ack"] == 0 && counts["stale-before-ack"] == 0
            && counts["missing-contacts"] == 0 && counts["false-conflicts"] == 0
        return Verdict(
            checker: "read-your-writes", passed: passed, counts: counts, notes: notes,
            violations: ["stale-after-ack", "stale-before-ack", "missing-contacts", "false-conflicts"])
    }

    func monotonic() -> Verdict {
        var violations = 0
        var pairs = 0
        var notes: [String] = []
        // Every written phone: who wrote it, when it was first sent and when acknowledged.
        var written: [String: (device: Int, n: Int, sent: Double, acked: Double, archived: Bool)] = [:]
        for device in 0..<o.devices {
            let archive = archived(device)
            let acks = acknowledged(device)
            let sent = firstSent(device)
            for write in o.operations[device] ?? [] where write.isWrite {
                if let value = write.value {
                    written[value] = (
                        device, write.n, sent[write.n] ?? .infinity, acks[write.n] ?? .infinity,
                        archive[write.n] != nil
                    )
                }
            }
        }
        for device in 0..<o.devices {
            let reads = (o.operations[device] ?? []).filter { $0.op == "read" && $0.completed }
            var last: [String: String] = [:]
            for read in reads {
                for (key, value) in read.values ?? [:] {
                    defer { last[key] = value }
                    guard let previous = last[key], previous != value else { continue }
                    pairs += 1
                    guard let older = written[value], let newer = written[previous] else {
                        // The original value after a written one that the backend took.
                        if written[value] == nil, let newer = written[previous], !newer.archived,
                            o.originalPartners[key] == value, newer.acked < read.t0
                        {
                            violations += 1
                            if notes.count < 8 {
                                notes.append(
                                    "device \(device) read \(read.n): \(key) back to its original value "
                                        + "after \(previous)"
                                )
                            }
                        }
                        continue
                    }
                    if older.archived || newer.archived { continue }
                    if older.device == newer.device && older.device == device {
                        if older.n < newer.n {
                            violations += 1
                            if notes.count < 8 {
                                notes.append(
                                    "device \(device) read \(read.n): \(key) went back from \(previous) to \(value)")
                            }
                        }
                    } else if older.acked < newer.sent {
                        violations += 1
                        if notes.count < 8 {
                            notes.append(
                                "device \(device) read \(read.n): \(key) went back from \(previous) to \(value), "
                                    + "which was acknowledged before \(previous) was sent")
                        }
                    }
                }
            }
        }
        return Verdict(
            checker: "monotonic", passed: violations == 0, counts: ["changes-seen": pairs, "went-back": violations],
            notes: notes, violations: ["went-back"])
    }

    func convergence() -> Verdict {
        var counts = [
            "devices-equal": 0, "devices-differing": 0, "missing-finals": 0, "gateway-differences": 0,
            "checksum-mismatches": 0, "unexpected-mismatches": 0,
        ]
        var notes: [String] = []
        let contacts = o.contacts.sorted()
        for device in 0..<o.devices {
            guard let final = o.finals[device] else {
                counts["missing-finals", default: 0] += 1
                continue
            }
            let found = (o.operations[device] ?? []).reduce(0) { $0 + ($1.mismatches?.count ?? 0) }
            let planted = o.plant == .diverge && device == 0 && final.planted != nil
            // The planted divergence must be found (once); any other mismatch is a store that
            // drifted from its gateway, or a checksum that is wrong: either is a failure.
            counts["checksum-mismatches", default: 0] += found
            if planted ? found != 1 : found > 0 {
                counts["unexpected-mismatches", default: 0] += planted ? 1 : found
                notes.append(
                    "device \(device): \(found) scope-checksum mismatches"
                        + (planted ? " (one planted)" : "") + ": "
                        + ((o.operations[device] ?? []).compactMap(\.mismatches).joined().first ?? ""))
            }
            let differences = Self.differences(final.partners, o.partners)
            if differences.isEmpty && final.contacts == contacts {
                counts["devices-equal", default: 0] += 1
            } else {
                counts["devices-differing", default: 0] += 1
                if notes.count < 8 {
                    notes.append(
                        "device \(device): " + differences.prefix(3).joined(separator: "; ")
                            + (final.contacts == contacts
                                ? ""
                                : " contacts differ (\(final.contacts.count) held, \(contacts.count) on the backend)"))
                }
            }
        }
        if let partners = o.gatewayPartners, let gatewayContacts = o.gatewayContacts {
            let differences = Self.differences(partners, o.partners)
            let names = contacts.map { String($0.split(separator: " ", maxSplits: 1).dropFirst().first ?? "") }.sorted()
            let contactDifference = gatewayContacts.sorted() != names
            counts["gateway-differences"] = differences.count + (contactDifference ? 1 : 0)
            if !differences.isEmpty { notes.append("gateway rows: " + differences.prefix(3).joined(separator: "; ")) }
            if contactDifference {
                notes.append("gateway contacts: \(gatewayContacts.count) rows, backend \(names.count)")
            }
        } else {
            notes.append("gateway rows not compared: the backend's own delta links were passed through")
        }
        var passed =
            counts["devices-differing"] == 0 && counts["missing-finals"] == 0
            && counts["gateway-differences"] == 0 && counts["unexpected-mismatches"] == 0
        if o.plant == .diverge {
            let planted = o.finals[0]?.planted != nil
            let detected = (o.operations[0] ?? []).contains { !($0.mismatches ?? []).isEmpty }
            notes.append(
                "planted divergence on device 0: \(planted ? "made" : "not made"), "
                    + "\(detected ? "detected by the scope checksum" : "not detected")")
            if !planted { passed = false }
        }
        return Verdict(
            checker: "convergence", passed: passed, counts: counts, notes: notes,
            violations: ["devices-differing", "missing-finals", "gateway-differences", "unexpected-mismatches"])
    }

    static func differences(_ held: [String: String], _ truth: [String: String]) -> [String] {
        var result: [String] = []
        for key in Set(held.keys).union(truth.keys).sorted() where held[key] != truth[key] {
            result.append("\(key): \(held[key] ?? "absent") vs backend \(truth[key] ?? "absent")")
        }
        return result
    }

    func liveness() -> Verdict {
        var counts = [
            "unanswered": 0, "undrained": 0, "missing-finals": 0, "slowest-ms": 0, "quiet-over-bound": 0,
            "crashes": o.crashes.count,
        ]
        var notes: [String] = o.crashes.map { "exited without a fault: \($0)" }
        for device in 0..<o.devices {
            let kills = o.kills[device] ?? []
            let operations = o.operations[device] ?? []
            for (position, operation) in operations.enumerated() {
                // Excused only by a kill of its process before the device's next operation.
                let next = position + 1 < operations.count ? operations[position + 1].t0 : .infinity
                if let t1 = operation.t1 {
                    counts["slowest-ms"] = max(counts["slowest-ms"] ?? 0, Int((t1 - operation.t0) * 1000))
                    if operation.phase == "quiet" && t1 - operation.t0 > o.liveness {
                        counts["quiet-over-bound", default: 0] += 1
                    }
                } else if !kills.contains(where: { $0 >= operation.t0 && $0 <= next }) {
                    counts["unanswered", default: 0] += 1
                    if notes.count < 8 {
                        notes.append("device \(device) \(operation.op) \(operation.n) never completed")
                    }
                }
            }
            if let final = o.finals[device] {
                if !(final.drained && final.queued == 0) {
                    counts["undrained", default: 0] += 1
                    notes.append(
                        "device \(device): \(final.queued) requests still queued after \(Int(final.drainSeconds)) s")
                }
            } else {
                counts["missing-finals", default: 0] += 1
                notes.append("device \(device) did not finish the quiet phase")
            }
        }
        let passed =
            counts["unanswered"] == 0 && counts["undrained"] == 0 && counts["missing-finals"] == 0
            && counts["quiet-over-bound"] == 0 && counts["crashes"] == 0
        return Verdict(
            checker: "liveness", passed: passed, counts: counts, notes: notes,
            violations: ["unanswered", "undrained", "missing-finals", "quiet-over-bound", "crashes"])
    }

    /// The backend's reads of each defining query's first page: a scope is read by one
    /// refresher at a time, at most once per refresh interval, whatever the number of devices.
    func singleRefresher() -> Verdict {
        guard o.tracksOnGateway else {
            return Verdict(
                checker: "single-refresher", passed: true, counts: [:],
                notes: ["not applicable: the backend's own delta links were passed through"])
        }
        var counts = ["refreshes": 0, "too-close": 0, "device-downloads": 0, "pairs-checked": 0, "pairs-excused": 0]
        var notes: [String] = []
        // A refresh cut off by a fault of the gateways, PostgreSQL or the backend's network is
        // read again by the next one: a pair whose first read falls inside such a fault.
        let cutting: Set<String> = [
            Fault.killGateway.rawValue, Fault.pauseGateway.rawValue, Fault.postgresFast.rawValue,
            Fault.postgresImmediate.rawValue, Fault.partitionBackend.rawValue,
        ]
        let disturbing = o.nemesis.filter { cutting.contains($0.fault) }
        for set in ["BusinessPartners", "Contacts"] {
            let times = o.requests.filter { entry in
                let request = entry.request
                guard request.hasPrefix("GET \(set)") else { return false }
                let rest = request.dropFirst("GET \(set)".count)
                guard rest.isEmpty || rest.hasPrefix("?") else { return false }
                return !["$skiptoken", "$skip=", "$filter", "$top=0", "$deltatoken", "$orderby"].contains {
                    request.contains($0)
                }
            }.map { $0.at.timeIntervalSince1970 }.sorted()
            counts["refreshes", default: 0] += times.count
            for (earlier, later) in zip(times, times.dropFirst()) {
                let excused = disturbing.contains { earlier >= $0.start - 2 && earlier <= $0.end + 2 }
                counts[excused ? "pairs-excused" : "pairs-checked", default: 0] += 1
                if !excused && later - earlier < o.refreshInterval / 2 {
                    counts["too-close", default: 0] += 1
                    if notes.count < 6 {
                        notes.append(
                            "\(set) read at \(String(format: "%.2f", earlier)) and again "
                                + "\(String(format: "%.2f", later - earlier)) s later"
                        )
                    }
                }
            }
            if let first = times.first, let last = times.last, last > first {
                let periods = (last - first) / o.refreshInterval
                notes.append("\(set): \(times.count) reads in \(Int(periods)) refresh periods")
            }
        }
        for device in 0..<o.devices {
            counts["device-downloads", default: 0] +=
                (o.operations[device] ?? []).filter { $0.op == "download" || $0.op == "final" }.count
        }
        // A run whose every pair was excused checked nothing.
        let passed = counts["too-close"] == 0 && (counts["pairs-checked"] ?? 0) > 0
        if (counts["pairs-checked"] ?? 0) == 0 { notes.append("no pair of reads outside the faults: nothing checked") }
        return Verdict(
            checker: "single-refresher", passed: passed, counts: counts, notes: notes,
            violations: ["too-close"])
    }

    func all() -> [Verdict] {
        [lost(), duplicated(), readYourWrites(), monotonic(), convergence(), liveness(), singleRefresher()]
    }
}
