import Foundation

/// The OASIS ABNF test cases, read from their YAML file with a reader for exactly the subset
/// of YAML that file uses (block maps and lists, plain, single- and double-quoted scalars that
/// may span lines). The file holds a literal tab, which general YAML loaders reject.
struct ABNFTestSuite {
    struct TestCase {
        var name: String
        var rule: String
        var input: String
        /// Where parsing must fail; nil when the input is valid.
        var failAt: Int?
    }

    var constraints: [String: [String]] = [:]
    var cases: [TestCase] = []

    init(text: String) {
        let lines = text.replacingOccurrences(of: "\r\n", with: "\n").components(separatedBy: "\n")
        var section = ""
        var constraintKey: String?
        var current: [String: String] = [:]
        var index = 0
        func flush() {
            if let rule = current["Rule"], let input = current["Input"] {
                cases.append(TestCase(name: current["Name"] ?? "", rule: rule, input: input, failAt: current["FailAt"].flatMap { Int($0) }))
            }
            current = [:]
        }
        while index < lines.count {
            let line = lines[index]
            index += 1
            if line.hasPrefix("#") || line.trimmingCharacters(in: .whitespaces).isEmpty { continue }
            if !line.hasPrefix(" ") {
                section = String(line.dropLast(line.hasSuffix(":") ? 1 : 0))
                continue
            }
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            var indent = line.prefix { $0 == " " }.count
            if trimmed.hasPrefix("- ") { indent += 2 }
            if section == "Constraints" {
                if indent == 2, trimmed.hasSuffix(":") || trimmed.hasSuffix(": []") {
                    let key = trimmed.components(separatedBy: ":")[0]
                    constraintKey = key
                    constraints[key] = []
                } else if trimmed.hasPrefix("- "), let key = constraintKey {
                    constraints[key, default: []].append(Self.scalar(String(trimmed.dropFirst(2)), continuation: []))
                }
                continue
            }
            guard section == "TestCases" else { continue }
            var body = trimmed
            if body.hasPrefix("- ") {
                flush()
                body = String(body.dropFirst(2))
            }
            guard let colon = body.range(of: ": ") ?? (body.hasSuffix(":") ? body.range(of: ":", options: .backwards) : nil) else { continue }
            let key = String(body[..<colon.lowerBound])
            var value = String(body[colon.upperBound...])
            if key == "Expect" {
                // A list of strings follows; skip it.
                while index < lines.count, lines[index].trimmingCharacters(in: .whitespaces).hasPrefix("- "),
                      lines[index].prefix(while: { $0 == " " }).count > indent {
                    index += 1
                }
                continue
            }
            // Collect continuation lines of a multi-line scalar (more indented, not a new key).
            var continuation: [String] = []
            if let quote = value.first, quote == "\"" || quote == "'" {
                while !Self.isClosed(value, continuation, quote: quote), index < lines.count {
                    continuation.append(lines[index])
                    index += 1
                }
                value = Self.scalar(value, continuation: continuation)
            } else {
                // A plain scalar continues on following lines that are indented deeper.
                while index < lines.count, !lines[index].trimmingCharacters(in: .whitespaces).isEmpty,
                      lines[index].prefix(while: { $0 == " " }).count > indent {
                    let more = lines[index].trimmingCharacters(in: .whitespaces)
                    value = value.isEmpty ? more : value + " " + more
                    index += 1
                }
                if let quote = value.first, quote == "\"" || quote == "'", value.count > 1, value.last == quote {
                    value = Self.scalar(value, continuation: [])
                }
            }
            current[key] = value
        }
        flush()
    }

    private static func isClosed(_ first: String, _ more: [String], quote: Character) -> Bool {
        let all = ([first] + more).joined(separator: "\n")
        var chars = Array(all.dropFirst())
        var i = 0
        while i < chars.count {
            if quote == "\"" && chars[i] == "\\" {
                i += 2
                continue
            }
            if chars[i] == quote {
                if quote == "'" && i + 1 < chars.count && chars[i + 1] == "'" {
                    i += 2
                    continue
                }
                chars = []
                return true
            }
            i += 1
        }
        return false
    }

    /// Folds a possibly multi-line scalar and resolves its quoting.
    static func scalar(_ first: String, continuation: [String]) -> String {
        guard let quote = first.first, quote == "\"" || quote == "'" else {
            return first.replacingOccurrences(of: "\t", with: "\t")
        }
        // Fold lines: a line break between text becomes a space; empty lines become newlines.
        var folded = String(first.dropFirst())
        var pendingBreaks = 0
        for line in continuation {
            let stripped = line.trimmingCharacters(in: .whitespaces)
            if stripped.isEmpty {
                pendingBreaks += 1
                continue
            }
            while folded.hasSuffix(" ") { folded.removeLast() }
            folded += pendingBreaks > 0 ? String(repeating: "\n", count: pendingBreaks) : " "
            pendingBreaks = 0
            folded += stripped
        }
        guard folded.hasSuffix(String(quote)) else { return folded }
        folded.removeLast()
        if quote == "'" { return folded.replacingOccurrences(of: "''", with: "'") }
        var out = ""
        var iterator = folded.makeIterator()
        while let c = iterator.next() {
            guard c == "\\", let next = iterator.next() else {
                out.append(c)
                continue
            }
            switch next {
            case "n": out.append("\n")
            case "r": out.append("\r")
            case "t": out.append("\t")
            case "\"": out.append("\"")
            case "\\": out.append("\\")
            case " ": out.append(" ")
            case "/": out.append("/")
            default:
                out.append("\\")
                out.append(next)
            }
        }
        return out
    }
}
