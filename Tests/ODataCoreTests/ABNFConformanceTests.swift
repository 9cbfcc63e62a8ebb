import Foundation
import Testing
@testable import ODataCore

/// Runs the official OASIS ABNF test cases through our parser and compares accept/reject.
/// The report is docs/conformance.md; the test fails when the parser's results differ from
/// what that file records (run with ODATA_UPDATE_CONFORMANCE=1 to rewrite it).
@Suite struct ABNFConformanceTests {
    struct Result {
        var testCase: ABNFTestSuite.TestCase
        var outcome: ABNFRunner.Outcome
        var agrees: Bool {
            switch outcome {
            case .accepted: testCase.failAt == nil
            case .rejected: testCase.failAt != nil
            case .notCovered: true
            }
        }
        var positionAgrees: Bool {
            if case .rejected(let at) = outcome, let expected = testCase.failAt { return at == expected }
            return agrees
        }
    }

    static func runAll() throws -> (ABNFTestSuite, [Result]) {
        let text = try String(contentsOf: Conformance.url("abnf/odata-abnf-testcases.yaml"), encoding: .utf8)
        let suite = ABNFTestSuite(text: text)
        let runner = ABNFRunner(lookup: ConstraintLookup(suite.constraints))
        let results = suite.cases.map { testCase in
            var outcome = runner.run(testCase.rule, testCase.input)
            if outcome == .rejected(at: 0), ABNFRunner.notCovered.contains(testCase.rule) { outcome = .notCovered }
            return Result(testCase: testCase, outcome: outcome)
        }
        return (suite, results)
    }

    @Test func suiteIsReadCompletely() throws {
        let (suite, _) = try Self.runAll()
        // The file holds 840 test cases; the reader must see every one.
        #expect(suite.cases.count == 840)
        #expect(suite.constraints["entitySetName"]?.contains("Customers") == true)
        let tab = suite.cases.first { $0.input.contains("\t") }
        #expect(tab?.input == "$orderby=Name\tasc")
    }

    @Test func agreementMatchesTheRecordedReport() throws {
        let (_, results) = try Self.runAll()
        let report = Self.report(results)
        // The test owns the part of docs/conformance.md between the ABNF markers.
        let path = Conformance.repositoryRoot.appendingPathComponent("docs/conformance.md")
        let begin = "<!-- abnf:begin -->\n", end = "<!-- abnf:end -->"
        var document = (try? String(contentsOf: path, encoding: .utf8)) ?? ""
        let recorded: String
        if let start = document.range(of: begin), let stop = document.range(of: end, range: start.upperBound..<document.endIndex) {
            recorded = String(document[start.upperBound..<stop.lowerBound])
            if ProcessInfo.processInfo.environment["ODATA_UPDATE_CONFORMANCE"] == "1" {
                document.replaceSubrange(start.upperBound..<stop.lowerBound, with: report)
                try document.write(to: path, atomically: true, encoding: .utf8)
            }
        } else {
            recorded = ""
            if ProcessInfo.processInfo.environment["ODATA_UPDATE_CONFORMANCE"] == "1" {
                document = begin + report + end + "\n" + document
                try document.write(to: path, atomically: true, encoding: .utf8)
            }
        }
        #expect(recorded == report || ProcessInfo.processInfo.environment["ODATA_UPDATE_CONFORMANCE"] == "1",
                "docs/conformance.md is out of date; rerun with ODATA_UPDATE_CONFORMANCE=1")
    }

    @Test func coveredRulesAgreeAlmostEverywhere() throws {
        let (_, results) = try Self.runAll()
        let covered = results.filter { $0.outcome != .notCovered }
        let agreeing = covered.filter(\.agrees)
        // Every disagreement is listed with its reason in docs/conformance.md; this bound keeps
        // regressions from slipping in.
        #expect(covered.count > 700)
        #expect(Double(agreeing.count) / Double(covered.count) >= 0.97)
    }

    static func report(_ results: [Result]) -> String {
        var byRule: [String: [Result]] = [:]
        for result in results { byRule[result.testCase.rule, default: []].append(result) }
        let covered = results.filter { $0.outcome != .notCovered }
        let agreeing = covered.filter(\.agrees).count
        let positions = covered.filter { $0.testCase.failAt != nil && $0.positionAgrees }.count
        let negatives = covered.filter { $0.testCase.failAt != nil }.count
        var lines: [String] = []
        lines.append("## OASIS ABNF conformance (URLs)")
        lines.append("")
        lines.append("The official OData ABNF test cases (`../shared/odata-conformance/abnf/odata-abnf-testcases.yaml`,")
        lines.append("\(results.count) cases) run through ODataCore's URL parser in `ABNFConformanceTests`. Each case names an ABNF")
        lines.append("rule; the test calls the parser entry point for that rule (`URLParser.parse`, `parsePath` with")
        lines.append("`PathResolver`, `parseQuery`, the expression parser, `Literal.parse` or `Literal.parsePayloadValue`).")
        lines.append("The file's `Constraints` (which names are entity sets, properties, functions …) stand in for a model")
        lines.append("through a `NameLookup`. This section is generated by the test; it fails when the parser's results change.")
        lines.append("")
        lines.append("**Accept/reject agreement: \(agreeing) of \(covered.count) covered cases (\(percent(agreeing, covered.count))).**")
        lines.append("Of the \(negatives) covered negative cases, \(positions) fail at exactly the expected position.")
        lines.append("")
        lines.append("| rule | cases | agree | agreement |")
        lines.append("|---|---:|---:|---:|")
        for rule in byRule.keys.sorted() {
            let rows = byRule[rule] ?? []
            if rows.allSatisfy({ $0.outcome == .notCovered }) {
                lines.append("| `\(rule)` | \(rows.count) | – | not covered |")
            } else {
                let ok = rows.filter(\.agrees).count
                lines.append("| `\(rule)` | \(rows.count) | \(ok) | \(percent(ok, rows.count)) |")
            }
        }
        lines.append("")
        lines.append("Rules marked *not covered* are outside the URL parser: absolute URIs with scheme and host,")
        lines.append("context URLs, HTTP headers and preferences. They belong to the payload and protocol layers.")
        lines.append("")
        lines.append("### Disagreements")
        lines.append("")
        let disagreements = covered.filter { !$0.agrees }
        if disagreements.isEmpty {
            lines.append("None.")
        } else {
            lines.append("| rule | input | expected | ours | reason |")
            lines.append("|---|---|---|---|---|")
            for result in disagreements {
                let expected = result.testCase.failAt.map { "fail at \($0)" } ?? "accept"
                let ours: String
                switch result.outcome {
                case .accepted: ours = "accept"
                case .rejected(let at): ours = "fail at \(at)"
                case .notCovered: ours = "–"
                }
                let input = result.testCase.input.replacingOccurrences(of: "|", with: "\\|").replacingOccurrences(of: "\n", with: "\\n")
                    .replacingOccurrences(of: "\r", with: "\\r").replacingOccurrences(of: "\t", with: "\\t")
                lines.append("| `\(result.testCase.rule)` | `\(input)` | \(expected) | \(ours) | \(reason(for: result)) |")
            }
        }
        lines.append("")
        return lines.joined(separator: "\n")
    }

    static func percent(_ a: Int, _ b: Int) -> String {
        b == 0 ? "–" : String(format: "%.1f%%", Double(a) * 100 / Double(b))
    }

    /// Reasons for known disagreements, keyed by rule and input.
    static let reasons: [String: String] = [
        "decimalValue -INF": "Deliberate: `DecimalValue` is exact and has no infinities or NaN; 4.01 allows them only for `Scale=floating`, which the store cannot order exactly.",
        "decimalValue INF": "Deliberate: as above.",
        "decimalValue NaN": "Deliberate: as above.",
        "sbyteLiteral %2B128": "Deliberate: the ABNF checks only the digit count; +128 is outside Edm.SByte (-128…127), so we reject it.",
        "queryOptions $format=json&$Format=atom&$format=xml&$format=text/html": "Deliberate: OData Part 2 §5 forbids repeating a system query option (names compare case-insensitively); the grammar alone cannot say so.",
        "queryOptions $format=JSON&$format=Atom&$format=XML&$format=text/html": "Deliberate: as above.",
    ]

    static func reason(for result: Result) -> String {
        reasons[result.testCase.rule + " " + result.testCase.input] ?? "not yet analysed"
    }
}
