import Foundation
import ODataCore
import OfflineOData

extension Controller {
    var v4Root: String { backendRoot.replacingOccurrences(of: "/odata/v2/", with: "/odata/v4/") }

    /// Every row of `set` on the backend, read directly (V4, following next links). Its reads
    /// carry `$orderby`, which the gateways' refreshes do not: the single-refresher checker
    /// leaves them out.
    func backendRows(_ set: String) async throws -> [JSONValue] {
        var headers = HTTPHeaders()
        headers["Accept"] = "application/json"
        var rows: [JSONValue] = []
        var next: String? = v4Root + set
        while let url = next {
            let answer = try await transport.send(
                TransportRequest(method: "GET", url: url, headers: headers), timeout: 30)
            guard answer.status == 200 else { throw JepsenFailure("GET \(url): \(answer.status)") }
            let json = try JSONValue.parse(answer.body)
            rows += json["value"]?.arrayValue ?? []
            next = json["@odata.nextLink"]?.stringValue.map { $0.hasPrefix("http") ? $0 : v4Root + $0 }
        }
        return rows
    }

    static func text(_ value: JSONValue?) -> String {
        switch value {
        case .number(let text)?, .string(let text)?: return text
        default: return ""
        }
    }

    func backendPartners() async throws -> [String: String] {
        var result: [String: String] = [:]
        for row in try await backendRows("BusinessPartners?$orderby=PartnerID") {
            result[Self.text(row["PartnerID"])] = Self.text(row["Phone"])
        }
        return result
    }

    /// Reads the results, runs every checker, prints one line each; true when all passed.
    func check() async throws -> Bool {
        var operations: [Int: [Operation]] = [:]
        var finals: [Int: DeviceFinal] = [:]
        var kills: [Int: [Double]] = [:]
        for index in devices.indices {
            operations[index] = Observations.join(
                try readLines(HistoryEvent.self, path: folder + "/history-\(index).jsonl"))
            if let data = FileManager.default.contents(atPath: folder + "/final-\(index).json") {
                finals[index] = try? JSONDecoder().decode(DeviceFinal.self, from: data)
            }
            kills[index] = devices[index].kills
        }
        let partners = try await backendPartners()
        let contacts = try await backendRows("Contacts?$orderby=ContactID").map {
            "\(Self.text($0["ContactID"])) \(Self.text($0["LastName"]))"
        }
        let tracks = run.backend == "plain"
        var gatewayPartners: [String: String]?
        var gatewayContacts: [String]?
        if tracks {
            // The scopes' rows (one backend, one anonymous user: one scope per query).
            let select =
                "SELECT r.payload FROM oodata_row r JOIN oodata_scope s ON s.id = r.scope_id "
                + "WHERE r.payload IS NOT NULL AND s.query = "
            func payloads(_ sql: String) throws -> [JSONValue] {
                try postgres.column(sql).map { line in
                    do {
                        return try JSONValue.parse(Array(line.utf8))
                    } catch {
                        throw JepsenFailure("a row of the gateway's is not JSON: \(line.prefix(200))")
                    }
                }
            }
            var rows: [String: String] = [:]
            for row in try payloads(select + "'BusinessPartners'") {
                rows[Self.text(row["PartnerID"])] = Self.text(row["Phone"])
            }
            gatewayPartners = rows
            gatewayContacts = try payloads(select + "'Contacts'").map { Self.text($0["LastName"]) }
        }
        let requests = await backend.service.journal.timedRequests()
        let lines = requests.map {
            String(format: "%.3f ", $0.at.timeIntervalSince1970)
                + ($0.request.split(separator: "\n").first.map(String.init) ?? "")
        }
        try? (lines.joined(separator: "\n") + "\n").write(
            toFile: folder + "/backend-requests.txt", atomically: false, encoding: .utf8)
        let observations = Observations(
            devices: devices.count, operations: operations, finals: finals, partners: partners, contacts: contacts,
            gatewayPartners: gatewayPartners, gatewayContacts: gatewayContacts,
            requests: requests, nemesis: nemesis, kills: kills, crashes: crashes,
            refreshInterval: run.refreshInterval, liveness: run.liveness, tracksOnGateway: tracks,
            originalPartners: original, plant: run.plant, quietStart: until)
        var verdicts = Checkers(o: observations).all()
        if run.everyFault {
            let missing = faults.filter { fault in !nemesis.contains { $0.fault == fault.rawValue } }
            verdicts.append(
                Verdict(
                    checker: "every-fault", passed: missing.isEmpty,
                    counts: ["applied": nemesis.count, "kinds-missing": missing.count],
                    notes: missing.isEmpty ? [] : ["never applied: " + missing.map(\.rawValue).joined(separator: ", ")])
            )
        }
        let all = operations.values.flatMap { $0 }
        let byKind = Dictionary(grouping: all, by: \.op).mapValues(\.count)
        say(
            "\(all.count) operations ("
                + byKind.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }
                .joined(separator: ", ") + "), \(nemesis.count) faults ("
                + Dictionary(grouping: nemesis, by: \.fault).mapValues(\.count).sorted { $0.key < $1.key }
                .map { "\($0.key) \($0.value)" }.joined(separator: ", ") + "), relay connections \(relay.connections())"
        )
        // `checker=count+count,…`: failures of these counts only are known (today's gateway).
        var known: [String: Set<String>] = [:]
        for entry in (run.known ?? "").split(separator: ",") {
            let parts = entry.split(separator: "=", maxSplits: 1).map(String.init)
            known[parts[0], default: []].formUnion(
                parts.count > 1 ? parts[1].split(separator: "+").map(String.init) : [])
        }
        func isKnown(_ verdict: Verdict) -> Bool { known[verdict.checker].map { verdict.onlyKnown($0) } ?? false }
        for verdict in verdicts {
            var line = verdict.line
            if let counts = known[verdict.checker] {
                if verdict.passed {
                    line += "  (listed as known to fail, and passed)"
                } else if isKnown(verdict) {
                    line += "  (KNOWN on today's gateway: \(counts.sorted().joined(separator: ", ")))"
                } else {
                    line += "  (fails beyond what is known: \(counts.sorted().joined(separator: ", ")))"
                }
            }
            print(line)
            for note in verdict.notes { print("    " + note) }
        }
        let summary: [String: Any] = [
            "seed": run.seed, "devices": run.devices, "gateways": run.gateways, "minutes": run.minutes,
            "backend": run.backend, "odata": run.odata, "plant": run.plant?.rawValue ?? "", "operations": all.count,
            "faults": nemesis.count,
            "verdicts": verdicts.map {
                ["checker": $0.checker, "passed": $0.passed, "counts": $0.counts] as [String: Any]
            },
        ]
        if let data = try? JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys]) {
            try? data.write(to: URL(fileURLWithPath: folder + "/results.json"))
            if let results = run.results {
                if !FileManager.default.fileExists(atPath: results) {
                    _ = FileManager.default.createFile(atPath: results, contents: nil)
                }
                if let handle = FileHandle(forWritingAtPath: results) {
                    handle.seekToEndOfFile()
                    handle.write(data + Data("\n".utf8))
                    handle.closeFile()
                }
            }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        if let data = try? encoder.encode(nemesis) {
            try? data.write(to: URL(fileURLWithPath: folder + "/nemesis.json"))
        }
        return verdicts.allSatisfy { $0.passed || isKnown($0) }
    }
}
