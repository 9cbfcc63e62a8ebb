/// How model names become Swift identifiers, deterministically: the same model always gives
/// the same names, whatever order the generator asks in.
///
/// - Types keep their name with the first letter uppercased (`customer` → `Customer`);
///   members get lower camel case (`CustomerID` → `customerID`, `URL` → `url`,
///   `ID` → `id`).
/// - A character that cannot appear in an identifier becomes `_`; a leading digit gets a `_`
///   before it.
/// - A Swift keyword, or a name the generated code reserves, gets a trailing `_`
///   (`class` → `class_`, `prefix` → `prefix_`).
/// - Two names that come out the same get `_2`, `_3`… in declaration order.
enum SwiftNames {
    /// Swift keywords and names that cannot be declared as members without backticks.
    static let keywords: Set<String> = [
        "associatedtype", "class", "deinit", "enum", "extension", "fileprivate", "func", "import", "init",
        "inout", "internal", "let", "open", "operator", "private", "precedencegroup", "protocol", "public",
        "rethrows", "static", "struct", "subscript", "typealias", "var", "break", "case", "catch", "continue",
        "default", "defer", "do", "else", "fallthrough", "for", "guard", "if", "in", "repeat", "return",
        "throw", "switch", "where", "while", "Any", "as", "await", "false", "is", "nil", "self", "Self",
        "super", "throws", "true", "try", "Type", "Protocol", "async", "some", "any", "consume", "copy",
        "borrowing", "consuming", "package", "_", "each", "actor", "macro", "nonisolated", "isolated",
        "discard", "sending", "then",
    ]

    /// Members every generated structure declares itself, and members of its `Fields`.
    static let reservedMembers: Set<String> = [
        "odataTypeName", "defaultEntitySetName", "key", "odataETag", "write", "entity", "odataValue",
        "prefix", "description", "hashValue", "hash", "odataMembers", "rawValue", "allCases",
    ]

    /// Type names the generated code uses unqualified, or that would hide a module.
    /// Names of the standard library and Foundation are escaped too: a generated `String` would
    /// hide Swift's in the app's own code.
    static let reservedTypes: Set<String> = [
        "Key", "Fields", "Operations", "Swift", "Foundation", "ODataCore", "Self", "Type", "Protocol", "Any",
        "String", "Int", "Int8", "Int16", "Int32", "Int64", "UInt", "UInt8", "UInt16", "UInt32", "UInt64",
        "Double", "Float", "Bool", "Character", "Error", "Result", "Optional", "Array", "Dictionary", "Set",
        "Never", "Void", "Sequence", "Collection", "Equatable", "Hashable", "Sendable", "Codable", "Data",
        "Date", "URL", "UUID", "Decimal", "Task", "Actor", "AnyObject", "Identifiable",
    ]

    /// The identifier characters of `name`, `_` for the others, `_` before a leading digit.
    static func sanitized(_ name: String) -> String {
        var result = ""
        for scalar in name.unicodeScalars {
            let isASCIILetter = (scalar >= "a" && scalar <= "z") || (scalar >= "A" && scalar <= "Z")
            let isDigit = scalar >= "0" && scalar <= "9"
            if isASCIILetter || isDigit || scalar == "_" || (scalar.value > 0x7F && scalar.properties.isAlphabetic) {
                result.unicodeScalars.append(scalar)
            } else {
                result += "_"
            }
        }
        if result.isEmpty { return "_" }
        if let first = result.unicodeScalars.first, first >= "0" && first <= "9" { result = "_" + result }
        return result
    }

    /// `CustomerID` → `customerID`, `URLPath` → `urlPath`, `ID` → `id`; underscores between
    /// words go, as in SAP's proxies: `to_Items` → `toItems`, `my-name` → `myName`. Leading
    /// underscores stay.
    static func lowerCamel(_ name: String) -> String {
        let clean = sanitized(name)
        let leading = clean.prefix { $0 == "_" }
        let words = clean.dropFirst(leading.count).split(separator: "_")
        guard let first = words.first else { return clean }
        var result = String(leading) + lowerCamelWord(String(first))
        for word in words.dropFirst() {
            guard let initial = word.first else { continue }
            // A word that starts with a digit keeps its underscore: `a_1` stays apart from `a1`.
            result += initial.isNumber ? "_" + word : initial.uppercased() + word.dropFirst()
        }
        return result
    }

    /// One word with its leading capitals lowered.
    private static func lowerCamelWord(_ clean: String) -> String {
        let scalars = Array(clean.unicodeScalars)
        var upperRun = 0
        while upperRun < scalars.count, scalars[upperRun].properties.isUppercase { upperRun += 1 }
        guard upperRun > 0 else { return clean }
        // Keep the last capital of a run that starts a new word: `URLPath` → `url` + `Path`.
        var lowered = upperRun
        if upperRun > 1, upperRun < scalars.count, scalars[upperRun].properties.isLowercase { lowered -= 1 }
        var result = String(String.UnicodeScalarView(scalars[0..<lowered])).lowercased()
        result.unicodeScalars.append(contentsOf: scalars[lowered...])
        return result
    }

    /// `customer` → `Customer`.
    static func upperCamel(_ name: String) -> String {
        let clean = sanitized(name)
        guard let first = clean.first else { return clean }
        if first == "_" { return clean }
        return first.uppercased() + clean.dropFirst()
    }

    /// A member name: lower camel case, escaped when it is a keyword or reserved.
    static func member(_ name: String) -> String {
        let camel = lowerCamel(name)
        return keywords.contains(camel) || reservedMembers.contains(camel) ? camel + "_" : camel
    }

    /// An enum case name: lower camel case, escaped when it is a keyword.
    static func enumCase(_ name: String) -> String {
        let camel = lowerCamel(name)
        return keywords.contains(camel)
            || ["allCases", "rawValue", "odataTypeName", "odataMembers", "odataMemberTable"].contains(camel)
            ? camel + "_" : camel
    }

    /// A type name: upper camel case, escaped when reserved.
    static func type(_ name: String) -> String {
        let camel = upperCamel(name)
        return keywords.contains(camel) || reservedTypes.contains(camel) ? camel + "_" : camel
    }

    /// `names` made unique in order: the second `name` is `name_2`, and so on.
    static func unique(_ names: [String], taken: Set<String> = []) -> [String] {
        var used = taken
        var result: [String] = []
        result.reserveCapacity(names.count)
        for name in names {
            var candidate = name
            var counter = 2
            while used.contains(candidate) {
                candidate = name + "_\(counter)"
                counter += 1
            }
            used.insert(candidate)
            result.append(candidate)
        }
        return result
    }

    /// A Swift string literal of `text`.
    static func stringLiteral(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": result += "\\\\"
            case "\"": result += "\\\""
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    result += "\\u{" + String(scalar.value, radix: 16) + "}"
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result + "\""
    }

    /// Text for a `///` comment: one line, no control characters.
    static func comment(_ text: String) -> String {
        String(text.unicodeScalars.map { $0.value < 0x20 ? " " : Character($0) })
    }
}
