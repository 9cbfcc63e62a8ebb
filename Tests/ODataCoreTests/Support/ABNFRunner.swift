import Foundation
@testable import ODataCore

/// Classifies names from the `Constraints` block of the ABNF test file, the way the official
/// runner restricts rules such as `entitySetName` to listed names. It stands in for a model.
struct ConstraintLookup: NameLookup {
    let lists: [String: Set<String>]

    init(_ constraints: [String: [String]]) {
        lists = constraints.mapValues(Set.init)
    }

    private func has(_ rule: String, _ name: String) -> Bool { lists[rule]?.contains(name) ?? false }

    /// Rules the file lists no names for accept any name in the official runner.
    private func unconstrained(_ rule: String) -> Bool { lists[rule] == nil }

    func root(_ name: String) -> RootKind? {
        if has("entitySetName", name) { return .entitySet(type: nil) }
        if has("singletonEntity", name) { return .singleton(type: nil) }
        if has("entityColFunctionImport", name) { return .functionImport(returns: .entityCollection(type: nil)) }
        if has("entityFunctionImport", name) { return .functionImport(returns: .entity(type: nil)) }
        if has("complexColFunctionImport", name) { return .functionImport(returns: .complexCollection(type: nil)) }
        if has("complexFunctionImport", name) { return .functionImport(returns: .complex(type: nil)) }
        if has("primitiveColFunctionImport", name) { return .functionImport(returns: .primitiveCollection(type: nil)) }
        if has("primitiveFunctionImport", name) { return .functionImport(returns: .primitive(type: nil)) }
        if has("actionImport", name) { return .actionImport(returns: .none) }
        if unconstrained("primitiveFunctionImport") { return .functionImport(returns: .primitive(type: nil)) }
        return nil
    }

    func member(_ name: String, of type: String?) -> MemberKind? {
        if has("primitiveKeyProperty", name) || has("primitiveNonKeyProperty", name) { return .property(.primitive(type: nil)) }
        if has("primitiveColProperty", name) { return .property(.primitiveCollection(type: nil)) }
        if has("complexProperty", name) { return .property(.complex(type: nil)) }
        if has("complexColProperty", name) { return .property(.complexCollection(type: nil)) }
        if has("streamProperty", name) { return .property(.stream) }
        if has("entityNavigationProperty", name) { return .navigation(.entity(type: nil)) }
        if has("entityColNavigationProperty", name) { return .navigation(.entityCollection(type: nil)) }
        return nil
    }

    func qualified(_ name: String, on shape: ResourceShape) -> QualifiedKind? {
        let parts = name.split(separator: ".").map(String.init)
        // Unqualified names are allowed for the default namespace (4.01).
        guard parts.dropLast().allSatisfy({ has("namespacePart", $0) }), let last = parts.last else { return nil }
        if has("entityTypeName", last) { return .typeCast(type: name, isComplex: false) }
        if has("complexTypeName", last) { return .typeCast(type: name, isComplex: true) }
        for (rule, result) in [("entityColFunction", ResourceShape.entityCollection(type: nil)), ("entityFunction", .entity(type: nil)),
                               ("complexColFunction", .complexCollection(type: nil)), ("complexFunction", .complex(type: nil)),
                               ("primitiveColFunction", .primitiveCollection(type: nil)), ("primitiveFunction", .primitive(type: nil))]
        where has(rule, last) {
            return .function(returns: result, isComposable: true)
        }
        if has("action", last) { return .action(returns: .none) }
        return nil
    }

    func acceptsKeySegment(_ text: String, of type: String?) -> Bool {
        has("keyPathLiteral", text) || has("keyPathLiteral", text.replacingOccurrences(of: "/", with: "%2F"))
    }
}

/// Runs one ABNF test case through the parser entry point that covers its rule.
struct ABNFRunner {
    enum Outcome: Equatable {
        case accepted
        case rejected(at: Int)
        /// The rule is outside what the URL parser covers (headers, context URLs, …).
        case notCovered
    }

    let lookup: ConstraintLookup
    let parser = URLParser(version: .v401)

    /// Rules whose inputs are URL text parsed by `URLParser` entry points.
    static let notCovered: Set<String> = [
        "odataUri", "context", "header", "preference", "prefer", "request-id", "maxpagesizePreference",
        "includeAnnotationsPreference",
    ]

    func run(_ rule: String, _ input: String) -> Outcome {
        if Self.notCovered.contains(rule) { return .notCovered }
        do {
            try parse(rule, input)
            return .accepted
        } catch let error as SyntaxError {
            return .rejected(at: error.offset)
        } catch let error as BindingError {
            return .rejected(at: error.offset)
        } catch {
            return .rejected(at: 0)
        }
    }

    private func decoded(_ input: String) throws -> String {
        let raw = Array(input.utf8)
        return try DecodedText.decode(raw, 0..<raw.count, plusAsSpace: false, input: input).text
    }

    private func literal(_ input: String, _ type: PrimitiveType?) throws {
        _ = try Literal.parse(try decoded(input), version: .v401, as: type)
    }

    private func payload(_ input: String, _ type: PrimitiveType) throws {
        _ = try Literal.parsePayloadValue(input, as: type)
    }

    private func parse(_ rule: String, _ input: String) throws {
        switch rule {
        case "odataRelativeUri":
            let url = try parser.parse(input)
            try checkCustomNames(url.query, input)
            if !url.path.segments.isEmpty {
                _ = try PathResolver(lookup: lookup, aliases: url.query.aliases).resolve(url.path, input: input)
            }
        case "resourcePath":
            let path = try parser.parsePath(input)
            _ = try PathResolver(lookup: lookup).resolve(path, input: input)
        case "queryOptions", "filter", "expand", "select", "orderby", "search", "skiptoken", "deltatoken", "compute",
             "systemQueryOption", "customQueryOption":
            let raw = Array(input.utf8)
            let query = try parser.parseQuery(raw, 0..<raw.count, input: input)
            try checkCustomNames(query, input)
        case "anyExpr":
            // `any(…)` is the last step of a collection path; parse it after one.
            let text = "Items/" + (try decoded(input))
            var expressionParser = ExpressionParser(text, version: .v401)
            do {
                _ = try expressionParser.parseComplete()
            } catch {
                throw SyntaxError(error.code, error.message, input: input, offset: max(0, error.offset - 6))
            }
        case "commonExpr", "boolCommonExpr", "boolcommonExpr", "firstMemberExpr", "propertyPathExpr", "isofExpr", "notExpr":
            let text = try decoded(input)
            var expressionParser = ExpressionParser(text, version: .v401)
            _ = try expressionParser.parseComplete()
        case "searchExpr":
            let raw = Array(input.utf8)
            let text = try DecodedText.decode(raw, 0..<raw.count, plusAsSpace: false, input: input)
            _ = try SearchParser.parseComplete(text.text, encoded: text.encoded)
        case "orderBy":
            let raw = Array(input.utf8)
            _ = try parser.parseQuery(raw, 0..<raw.count, input: input)
        case "primitiveLiteral":
            try literal(input, nil)
        case "primitiveValue" where input.contains("'"):
            try literal(input, nil)
        case "primitiveValue":
            // A value in a request body: any primitive type's payload form.
            let types: [PrimitiveType] = [.boolean, .int64, .decimal, .double, .guid, .date, .dateTimeOffset, .timeOfDay, .duration,
                                          .geographyPoint, .binary]
            guard types.contains(where: { (try? Literal.parsePayloadValue(input, as: $0)) != nil }) else {
                throw SyntaxError(.invalidLiteral, "no primitive value", input: input, offset: firstNonBase64(input))
            }
        case "binaryLiteral": try literal(input, .binary)
        case "boolean": try literal(input, .boolean)
        case "booleanValue": try payload(input, .boolean)
        case "date": try literal(input, .date)
        case "dateValue": try payload(input, .date)
        case "dateTimeOffsetValue": try payload(input, .dateTimeOffset)
        case "dateTimeOffsetValueInUrl", "dateTimeOffsetLiteral": try literal(input, .dateTimeOffset)
        case "durationValue": try payload(input, .duration)
        case "durationLiteral": try literal(input, .duration)
        case "timeOfDayValue": try payload(input, .timeOfDay)
        case "timeOfDayLiteral": try literal(input, .timeOfDay)
        case "decimalValue": try payload(input, .decimal)
        case "decimalLiteral": try literal(input, .decimal)
        case "doubleValue": try payload(input, .double)
        case "doubleLiteral": try literal(input, .double)
        case "singleValue": try payload(input, .single)
        case "singleLiteral": try literal(input, .single)
        case "int16Value": try payload(input, .int16)
        case "int16Literal": try literal(input, .int16)
        case "int32Value": try payload(input, .int32)
        case "int32Literal": try literal(input, .int32)
        case "int64Value": try payload(input, .int64)
        case "int64Literal": try literal(input, .int64)
        case "byteValue": try payload(input, .byte)
        case "sbyteValue": try payload(input, .sbyte)
        case "sbyteLiteral": try literal(input, .sbyte)
        case "guid": try literal(input, .guid)
        case "stringLiteral": try literal(input, .string)
        case "stringInUrl":
            // A string in URL JSON: single- or double-quoted.
            let text = try decoded(input)
            var expressionParser = ExpressionParser(text, version: .v401)
            guard case .literal(.primitive(.string)) = try expressionParser.parseComplete().node else {
                throw SyntaxError(.invalidLiteral, "not a string", input: input, offset: 0)
            }
        case "null":
            guard try Literal.parse(try decoded(input)) == .null else { throw SyntaxError(.invalidLiteral, "not null", input: input, offset: 0) }
        case "enumLiteral":
            // Qualified (`Ns.Color'Red'`) or, in 4.01, just quoted members (`'Red,Blue'`).
            switch try Literal.parse(try decoded(input), version: .v401) {
            case .enumeration: break
            case .primitive(.string(let members)) where members.split(separator: ",").allSatisfy({ Literal.isEnumMember(String($0)) }): break
            default: throw SyntaxError(.invalidLiteral, "not an enum", input: input, offset: 0)
            }
        case "enumValue":
            // Payload form: members or numbers separated by commas, no percent-encoding.
            var offset = 0
            for part in input.split(separator: ",", omittingEmptySubsequences: false) {
                guard Literal.isEnumMember(String(part)) else { throw SyntaxError(.invalidLiteral, "bad member", input: input, offset: offset) }
                offset += part.utf8.count + 1
            }
        case "odataIdentifier":
            let b = Array(input.utf8)
            guard let first = b.first, isIdentifierStart(first), b.allSatisfy(isIdentifierByte) else {
                let bad = b.firstIndex { !isIdentifierByte($0) } ?? 0
                throw SyntaxError(.unexpectedCharacter, "not an identifier", input: input, offset: bad)
            }
        case "entitySetName":
            guard case .entitySet? = lookup.root(input) else { throw SyntaxError(.invalidPath, "unknown", input: input, offset: 0) }
        case "functionParameter":
            var expressionParser = ExpressionParser("f(" + (try decoded(input)) + ")", version: .v401)
            expressionParser.i = 1
            _ = try expressionParser.parseNamedArguments()
            guard expressionParser.atEnd else { throw SyntaxError(.unexpectedCharacter, "rest", input: input, offset: 0) }
        default:
            if rule.hasPrefix("geography") || rule.hasPrefix("geometry") {
                let kind = rule.hasPrefix("geography") ? "Edm.Geography" : "Edm.Geometry"
                let suffix = rule.dropFirst(rule.hasPrefix("geography") ? 9 : 8)
                let type = PrimitiveType(rawValue: kind + suffix) ?? .geography
                let value = try Literal.parse(try decoded(input), version: .v401)
                guard case .primitive(.spatial(let spatial)) = value, spatial.primitiveType == type else {
                    throw SyntaxError(.invalidLiteral, "wrong spatial kind", input: input, offset: 0)
                }
                return
            }
            throw UncoveredRule()
        }
    }

    struct UncoveredRule: Error {}

    /// The file constrains `customName`: only the listed custom options exist.
    private func checkCustomNames(_ query: QueryOptions, _ input: String) throws {
        guard let allowed = lookup.lists["customName"] else { return }
        for option in query.custom where !allowed.contains(option.name) {
            throw SyntaxError(.invalidQueryOption, "unknown custom option", input: input, offset: input.utf8.count)
        }
    }

    private func firstNonBase64(_ input: String) -> Int {
        input.utf8.firstIndex { !(isAlpha($0) || isDigit($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "=")) }
            .map { input.utf8.distance(from: input.utf8.startIndex, to: $0) } ?? 0
    }
}
