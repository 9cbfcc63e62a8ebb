import Foundation

/// One generated read request over `Items`, and the options the oracle applies itself.
public struct OracleCase: Sendable, CustomStringConvertible {
    /// `$filter` text, unencoded.
    public var filter: String
    /// `$orderby` items, unencoded; `ID` is always last, so the order is total.
    public var orderBy: [String]
    public var top: Int?
    public var skip: Int?
    public var select: [String]

    /// The request as the store is asked it, options percent-encoded.
    public var url: String {
        var options = ["$filter=" + Self.encode(filter), "$orderby=" + Self.encode(orderBy.joined(separator: ","))]
        if let top { options.append("$top=\(top)") }
        if let skip { options.append("$skip=\(skip)") }
        if !select.isEmpty { options.append("$select=" + select.joined(separator: ",")) }
        return "Items?" + options.joined(separator: "&")
    }

    public var description: String {
        var text = "$filter=\(filter)&$orderby=\(orderBy.joined(separator: ","))"
        if let top { text += "&$top=\(top)" }
        if let skip { text += "&$skip=\(skip)" }
        if !select.isEmpty { text += "&$select=\(select.joined(separator: ","))" }
        return text
    }

    static func encode(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)..<"\u{80}"))
        allowed.insert(charactersIn: "-._~(),:/$")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}

/// Generates typed OData expressions over ``OracleModel`` from a seed: every primitive type,
/// `cast`, `isof`, arithmetic, string and date functions, enums (by name, number and plain
/// string), null literals and lambdas over a primitive collection and a navigation.
public struct OracleGenerator {
    var random: SeededRandom
    /// V2's grammar and model (``OracleModel/metadataV2``): its literal forms, `substringof`,
    /// quoted type names; no enums, lambdas, `in`, `case` or `$count` in expressions.
    let legacy: Bool
    /// Lambda variables in scope: `t` (a tag string) and `l` (a line).
    var variables: Set<String> = []

    /// Starts the sequence of `seed`, for V4 requests or (`legacy`) V2 ones.
    public init(seed: UInt64, legacy: Bool = false) {
        random = SeededRandom(seed: seed)
        self.legacy = legacy
    }

    /// A type name as an argument of `cast`/`isof`: quoted in V2.
    func typeName(_ name: String) -> String { legacy ? "'\(name)'" : name }

    /// The next case.
    public mutating func next() -> OracleCase {
        variables = []
        let filter = boolean(3)
        var orderBy: [String] = []
        for _ in 0..<Int.random(in: 0...2, using: &random) {
            let keys =
                legacy
                ? ["S", "N", "I32", "I64", "D", "F", "M", "When", "At", "Span", "B", "U8", "G", "Addr/City"]
                : ["S", "N", "I32", "I64", "D", "F", "M", "Day", "At", "T", "Dur", "St", "B", "U8", "G", "Addr/City"]
            let key = random.pick(keys + [integer(1), string(1), legacy ? "B" : "I32 gt 5"])
            orderBy.append(key + (random.chance(50) ? " desc" : ""))
        }
        orderBy.append("ID")
        let top = random.chance(40) ? Int.random(in: 0...12, using: &random) : nil
        let skip = random.chance(30) ? Int.random(in: 0...8, using: &random) : nil
        let properties =
            legacy
            ? ["B", "U8", "I8", "I16", "I32", "I64", "F", "D", "M", "S", "G", "When", "At", "Span", "Bin", "Addr"]
            : [
                "B", "U8", "I8", "I16", "I32", "I64", "F", "D", "M", "S", "G", "Day", "At", "T", "Dur", "Bin", "St",
                "Col", "Addr", "Tags",
            ]
        let select = random.chance(40) ? properties.filter { _ in random.chance(25) } : []
        return OracleCase(filter: filter, orderBy: orderBy, top: top, skip: skip, select: select)
    }

    // MARK: Booleans

    mutating func boolean(_ depth: Int) -> String {
        if depth <= 0 { return simpleBoolean() }
        switch Int.random(in: 0..<10, using: &random) {
        case 0: return "(\(boolean(depth - 1)) and \(boolean(depth - 1)))"
        case 1: return "(\(boolean(depth - 1)) or \(boolean(depth - 1)))"
        case 2: return "not (\(boolean(depth - 1)))"
        case 3: return legacy ? comparison(depth - 1) : lambda(depth - 1)
        default: return comparison(depth - 1)
        }
    }

    mutating func simpleBoolean() -> String {
        if legacy {
            switch Int.random(in: 0..<7, using: &random) {
            case 0: return "B"
            case 1: return "B eq \(random.pick(["true", "false", "null"]))"
            case 2: return "isof('\(random.pick(["O.Special", "O.Item"]))')"
            case 3: return "\(random.pick(["S", "N", "I32", "M", "At", "Addr", "Addr/City", "When", "Span"])) eq null"
            case 4: return "\(random.pick(["S", "I64", "D", "G", "Bin"])) ne null"
            case 5: return "not B"
            default: return "Addr/City \(random.pick(["eq", "ne"])) Addr/Zip"
            }
        }
        switch Int.random(in: 0..<12, using: &random) {
        case 6: return "not B"
        case 7: return "Bin \(random.pick(["eq", "ne"])) binary'\(random.pick(OracleModel.binaries))'"
        case 8: return "\(random.pick(["S", "N", "Addr/City"])) in Tags"
        case 9: return "O.Special/Extra \(random.pick(["gt", "le", "eq", "ne"])) \(random.pick(["1", "3", "null"]))"
        case 10: return "Addr/City \(random.pick(["eq", "ne"])) Addr/Zip"
        case 11: return "totaloffsetminutes(At) \(random.pick(["eq", "gt", "lt"])) \(random.pick(["0", "120", "-60"]))"
        case 0: return "B"
        case 1: return "B eq \(random.pick(["true", "false", "null"]))"
        case 2: return "isof(\(random.pick(["O.Special", "O.Item"])))"
        case 3: return "\(random.pick(["S", "N", "I32", "M", "At", "Addr", "Addr/City", "St", "Dur"])) eq null"
        case 4: return "\(random.pick(["S", "I64", "D", "Day", "Col", "G", "Bin"])) ne null"
        default: return "Tags/any()"
        }
    }

    mutating func lambda(_ depth: Int) -> String {
        let kind = random.pick(["any", "all"])
        if random.chance(50) {
            variables.insert("t")
            defer { variables.remove("t") }
            return "Tags/\(kind)(t:\(random.chance(50) ? stringComparison(1) : "contains(t,\(stringLiteral()))"))"
        }
        variables.insert("l")
        defer { variables.remove("l") }
        let body: String
        switch Int.random(in: 0..<4, using: &random) {
        case 0, 1: body = "l/Qty \(random.pick(["gt", "le", "eq", "ne"])) \(integer(1))"
        case 2: body = "l/Qty \(random.pick(["gt", "le"])) $it/\(random.pick(["I32", "U8", "I16"]))"
        default: body = "\(random.pick(["startswith", "endswith", "contains"]))(l/Note,\(stringLiteral()))"
        }
        return "Lines/\(kind)(l:\(random.chance(20) ? "not (\(body))" : body))"
    }

    mutating func comparison(_ depth: Int) -> String {
        let op = random.pick(["eq", "ne", "gt", "ge", "lt", "le"])
        if legacy { return legacyComparison(depth, op) }
        switch Int.random(in: 0..<23, using: &random) {
        case 20:
            // A comparison as a value: two-valued there too.
            let truth = random.pick(["true", "false"])
            return "(\(integer(depth)) \(op) \(integer(depth))) \(random.pick(["eq", "ne"])) \(truth)"
        case 21:
            // Fractions and numbers past Int64 against integers.
            return "\(integer(depth)) \(op) \(random.pick(["1.5", "-0.5", "9223372036854775808", "1e20"]))"
        case 22: return "\(random.pick(["M", "cast(M,Edm.Double)"])) \(op) \(random.pick(["I32", "D", "I64"]))"
        case 16:
            let shift = random.pick(["duration'PT1H'", "duration'-P1D'", "duration'PT0.5S'"])
            if random.chance(30) {
                return "\(random.pick(["day", "hour"]))(At add \(shift)) \(op) \(random.pick(["1", "2", "9", "12"]))"
            }
            return "(At \(random.pick(["add", "sub"])) \(shift)) \(op) \(random.pick(OracleModel.instants))"
        case 17:
            let days = Int.random(in: 1...40, using: &random)
            return "(Day add duration'P\(days)D') \(op) \(random.pick(OracleModel.dates))"
        case 18:
            let divisor = random.pick(["2", "4", "-3"])
            return "(\(integer(depth)) divby \(divisor)) \(op) \(random.pick(["1.5", "0", "-2.5", "10"]))"
        case 19: return "fractionalseconds(\(random.pick(["T", "At"]))) \(op) \(random.pick(["0", "0.5", "0.789"]))"
        case 0, 1, 2: return "\(integer(depth)) \(op) \(integer(depth))"
        case 3, 4: return stringComparison(depth)
        case 5: return "\(double(depth)) \(op) \(double(depth))"
        case 6: return "M \(op) \(random.pick(["0", "1.5", "-2.25", "7", "12345678901234567890.123", "1e2"]))"
        case 7:
            return "\(random.pick(["Day", "date(At)"])) \(op) \(random.pick(OracleModel.dates + ["Day", "date(At)"]))"
        case 8: return "At \(op) \(random.pick(OracleModel.instants + ["mindatetime()", "maxdatetime()"]))"
        case 9: return "\(random.pick(["T", "time(At)"])) \(op) \(random.pick(OracleModel.times + ["T"]))"
        case 10:
            let literal = random.pick(OracleModel.durations)
            return "Dur \(op) \(random.chance(50) ? "duration'\(literal)'" : "'\(literal)'")"
        case 11:
            let member = random.pick(OracleModel.statuses)
            let number = Int.random(in: 0...2, using: &random)
            let right = random.pick(["O.Status'\(member)'", "'\(member)'", "O.Status'\(number)'"])
            return "St \(random.pick(["eq", "ne"])) \(right)"
        case 12:
            let member = random.pick(["Red", "Green", "Blue", "Red,Blue"])
            return random.chance(50) ? "Col has O.Color'\(member)'" : "Col has '\(member)'"
        case 13:
            switch Int.random(in: 0..<3, using: &random) {
            case 0: return "I32 in (\(random.pick(["1,2,3", "0", "-5,42,1000"])))"
            case 1: return "S in (\(stringLiteral()),\(stringLiteral()))"
            default: return "St in ('New','Closed')"
            }
        case 14: return "G \(random.pick(["eq", "ne"])) \(random.pick(OracleModel.guids))"
        default:
            return "\(random.pick(["contains", "startswith", "endswith"]))(\(string(depth)),\(string(depth)))"
        }
    }

    mutating func legacyComparison(_ depth: Int, _ op: String) -> String {
        switch Int.random(in: 0..<12, using: &random) {
        case 0, 1, 2: return "\(integer(depth)) \(op) \(integer(depth))"
        case 3, 4: return stringComparison(depth)
        case 5: return "\(double(depth)) \(op) \(double(depth))"
        case 6: return "M \(op) \(random.pick(["0M", "1.5M", "-2.25M", "7M", "123456789.123456M", "7"]))"
        case 7:
            let moment = "datetime'\(random.pick(OracleModel.dateTimes.map(\.literal)))'"
            guard random.chance(30) else { return "When \(op) \(moment)" }
            let shift = random.pick(["time'PT1H'", "time'P1D'", "time'PT0.5S'"])
            return "(When \(random.pick(["add", "sub"])) \(shift)) \(op) \(moment)"
        case 8: return "At \(op) datetimeoffset'\(random.pick(OracleModel.instants))'"
        case 9: return "Span \(op) time'\(random.pick(OracleModel.spans))'"
        case 10: return "G \(random.pick(["eq", "ne"])) guid'\(random.pick(OracleModel.guids))'"
        default:
            if random.chance(50) { return "substringof(\(string(depth)),\(string(depth)))" }
            return "\(random.pick(["startswith", "endswith"]))(\(string(depth)),\(string(depth)))"
        }
    }

    mutating func stringComparison(_ depth: Int) -> String {
        "\(string(depth)) \(random.pick(["eq", "ne", "gt", "ge", "lt", "le"])) \(string(depth))"
    }

    // MARK: Values

    mutating func integer(_ depth: Int) -> String {
        if depth <= 0 || random.chance(35) {
            if variables.contains("l") && random.chance(40) { return "l/Qty" }
            let properties = ["ID", "U8", "I8", "I16", "I32", "I64"] + (legacy ? [] : ["Lines/$count"])
            return random.chance(60)
                ? random.pick(properties)
                : random.pick(["0", "1", "2", "-3", "42", "255", "1000"] + (legacy ? ["7L", "-9000000000L"] : []))
        }
        if legacy { return legacyInteger(depth) }
        switch Int.random(in: 0..<15, using: &random) {
        case 0:
            return "Lines/$count($filter=Qty \(random.pick(["gt", "le", "eq"])) \(random.pick(["1", "3", "null"])))"
        case 1:
            return "case(\(boolean(0)):\(integer(depth - 1)),\(boolean(0)):\(integer(depth - 1)),true:\(integer(0)))"
        case 2: return "Lines/$count"
        case 3: return "\(random.pick(["year", "month", "day"]))(\(random.pick(["Day", "At"])))"
        case 4: return "\(random.pick(["hour", "minute", "second"]))(\(random.pick(["T", "At"])))"
        case 5: return "cast(\(random.pick(["S", "N", "Addr/City"])),Edm.\(random.pick(["Int32", "Int64", "Byte"])))"
        case 6: return "cast(\(integer(depth - 1)),Edm.\(random.pick(["Byte", "SByte", "Int16", "Int64"])))"
        case 7: return "cast(St,Edm.Int32)"
        default: return sharedInteger(depth)
        }
    }

    mutating func legacyInteger(_ depth: Int) -> String {
        switch Int.random(in: 0..<9, using: &random) {
        case 0:
            let part = random.pick(["year", "month", "day", "hour", "minute", "second"])
            return "\(part)(\(random.pick(["When", "At"])))"
        case 1: return "cast(\(random.pick(["S", "N", "Addr/City"])),'Edm.\(random.pick(["Int32", "Int64", "Byte"]))')"
        default: return sharedInteger(depth)
        }
    }

    /// Integer forms V2 and V4 share: arithmetic, `length`, `indexof`, negation.
    mutating func sharedInteger(_ depth: Int) -> String {
        switch Int.random(in: 0..<7, using: &random) {
        case 0: return "(\(integer(depth - 1)) add \(integer(depth - 1)))"
        case 1: return "(\(integer(depth - 1)) sub \(integer(depth - 1)))"
        case 2: return "(\(integer(depth - 1)) mul \(random.pick(["2", "-1", "10"])))"
        case 3: return "(\(integer(depth - 1)) \(random.pick(["div", "mod"])) \(random.pick(["2", "3", "-4", "7"])))"
        case 4: return "length(\(string(depth - 1)))"
        case 5: return "indexof(\(string(depth - 1)),\(stringLiteral()))"
        default: return "-(\(integer(depth - 1)))"
        }
    }

    mutating func double(_ depth: Int) -> String {
        if depth <= 0 || random.chance(40) {
            return random.chance(60)
                ? random.pick(["D", "F"]) : random.pick(["2.5", "-0.5", "0.1", "1e10", "3.3", "1e20", "-4.5e15"])
        }
        switch Int.random(in: 0..<7, using: &random) {
        case 6: return "(\(double(depth - 1)) mod \(random.pick(["2", "0.75", "-3"])))"
        case 0: return "(\(double(depth - 1)) add \(random.chance(50) ? double(depth - 1) : integer(depth - 1)))"
        case 1: return "(\(double(depth - 1)) mul \(random.pick(["2.0", "-1", "0.5"])))"
        case 2: return "\(random.pick(["round", "floor", "ceiling"]))(\(double(depth - 1)))"
        case 3: return "cast(\(integer(depth - 1)),\(typeName("Edm.Double")))"
        case 4: return "cast(\(random.pick(["S", "N"])),\(typeName("Edm.Double")))"
        default: return "cast(M,\(typeName("Edm.Double")))"
        }
    }

    mutating func string(_ depth: Int) -> String {
        if depth <= 0 || random.chance(35) {
            if variables.contains("t") && random.chance(50) { return "t" }
            if variables.contains("l") && random.chance(40) { return "l/Note" }
            return random.chance(60) ? random.pick(["S", "N", "Addr/City", "Addr/Zip"]) : stringLiteral()
        }
        switch Int.random(in: 0..<(legacy ? 6 : 10), using: &random) {
        case 4 where legacy: return "cast(\(integer(depth - 1)),'Edm.String')"
        case 5 where legacy: return "cast(\(random.pick(["G", "B"])),'Edm.String')"
        case 9: return "case(\(boolean(0)):\(string(depth - 1)),true:\(string(depth - 1)))"
        case 0: return "\(random.pick(["tolower", "toupper", "trim"]))(\(string(depth - 1)))"
        case 1: return "concat(\(string(depth - 1)),\(string(depth - 1)))"
        case 2: return "substring(\(string(depth - 1)),\(random.pick(["0", "1", "3", "20"])))"
        case 3:
            return "substring(\(string(depth - 1)),\(random.pick(["0", "2"])),\(random.pick(["0", "1", "4", "50"])))"
        case 4: return "cast(\(integer(depth - 1)),Edm.String)"
        case 5: return "cast(\(random.pick(["St", "Day", "G", "B"])),Edm.String)"
        case 6: return "cast(Col,Edm.String)"
        default: return stringLiteral()
        }
    }

    mutating func stringLiteral() -> String {
        let text = random.pick(OracleModel.strings + ["al", "ha", "Z", "e", " "])
        return "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
    }
}
