extension Model {
    /// The key values a key predicate (`('A')`, `(K1='A',K2=2)`, `(K=@alias)`) gives for an
    /// entity of `entitySet`, converted to the key properties' types. Every key property must be
    /// given exactly; `input` is the URL the predicate came from, for the error.
    public func keyValues(_ parts: [KeyValue], ofEntitySet entitySet: String, aliases: [String: CommonExpression] = [:],
                          input: String = "") throws(BindingError) -> [String: PrimitiveValue] {
        guard let type = entityType(ofEntitySet: entitySet) else {
            throw BindingError(.invalidKey, "No entity set \(entitySet)", input: input, offset: 0)
        }
        return try keyValues(parts, of: type, aliases: aliases, input: input)
    }

    /// The key values of `parts` for an entity of `type`; see
    /// ``keyValues(_:ofEntitySet:aliases:input:)``. With `skipUnknownAliases`, a part whose value
    /// is an alias not in `aliases` is checked by name only and left out of the result.
    ///
    /// `implied` names key properties whose values a navigation's referential constraint supplies
    /// (`SalesOrders('SO0')/Items(10)`): they may be left out, and when one key property is
    /// left, its value may be given without its name.
    public func keyValues(_ parts: [KeyValue], of type: EntityType, aliases: [String: CommonExpression] = [:],
                          input: String = "", skipUnknownAliases: Bool = false,
                          implied: Set<String> = []) throws(BindingError) -> [String: PrimitiveValue] {
        let names = key(of: type).map(\.name)
        let open = names.filter { !implied.contains($0) }
        // The explanation is made only for an error (made every time, it was a tenth of binding a key).
        func fail(_ message: String, _ offset: Int = 0) -> BindingError {
            var keyText = "The key of \(type.qualifiedName) is \(names.joined(separator: ", "))"
            if !implied.isEmpty {
                let taken = names.filter { implied.contains($0) }.joined(separator: ", ")
                keyText += " (\(taken) taken from the navigation)"
            }
            return BindingError(.invalidKey, keyText + "; " + message, input: input, offset: offset)
        }
        guard !names.isEmpty else {
            throw BindingError(.invalidKey, "\(type.qualifiedName) has no key", input: input, offset: 0)
        }
        var values: [String: PrimitiveValue] = [:]
        var given: Set<String> = []
        for part in parts {
            guard let name = part.name ?? (names.count == 1 ? names[0] : open.count == 1 && parts.count == 1 ? open[0] : nil) else {
                throw fail("a compound key names each part (Name=value)", part.value.offset)
            }
            guard names.contains(name) else { throw fail("\(name) is not a key property", part.value.offset) }
            guard given.insert(name).inserted else { throw fail("\(name) is given twice", part.value.offset) }
            let typeName = property(name, ofStructuredType: type.qualifiedName)?.type.name ?? ""
            guard let primitive = PrimitiveType(rawValue: typeDefinition(typeName)?.underlyingType ?? typeName) else {
                throw fail("\(name) is not of a primitive type", part.value.offset)
            }
            var literal: Value?
            switch part.value.node {
            case .literal(let value): literal = value
            case .alias(let alias):
                if case .literal(let value)? = aliases[alias]?.node {
                    literal = value
                } else if skipUnknownAliases, aliases[alias] == nil {
                    continue
                }
            default: break
            }
            if case .null? = literal { throw fail("a key value may not be null (\(name))", part.value.offset) }
            guard let literal, case .primitive(let value)? = Literal.convertURLLiteral(literal, to: primitive) else {
                let shown = literal.map { Literal.format($0) } ?? "the value"
                throw fail("\(shown) is not an \(primitive.rawValue) for \(name)", part.value.offset)
            }
            values[name] = value
        }
        let absent = open.filter { !given.contains($0) }
        if let missing = absent.first {
            let offset = parts.last.map { $0.value.offset } ?? 0
            throw fail(absent.count == 1 ? "\(missing) is missing" : absent.joined(separator: ", ") + " are missing", offset)
        }
        return values
    }
}

extension Model {
    /// `Set(literal)`: the entity set and key of a path that is exactly an entity set of this
    /// model and a single-value key, read without the URL parser and path resolver (a tenth of
    /// an upload's client time went to them for such references). Nil when the path is anything
    /// else (a compound key, an alias, percent-encoding, a query, more segments, a set not
    /// found) or the key does not bind: the caller then takes the full parser, which decides.
    /// When it answers, it answers as the full parser and ``keyValues(_:ofEntitySet:aliases:input:)``
    /// would.
    public func simpleEntityKey(_ path: String) -> (entitySet: String, key: [String: PrimitiveValue])? {
        let bytes = Array(path.utf8)
        guard let open = bytes.firstIndex(of: UInt8(ascii: "(")), open > 0, bytes.last == UInt8(ascii: ")"),
            bytes.count - 1 > open + 1
        else { return nil }
        // The set: an identifier (letters, digits, `_`), not starting with a digit.
        for (index, byte) in bytes[..<open].enumerated() {
            let letter = (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F
            guard letter || (index > 0 && byte >= 0x30 && byte <= 0x39) else { return nil }
        }
        // The key: printable ASCII without what the full parser treats specially around a
        // literal (percent-encoding, separators, names, aliases, nested parentheses).
        let inner = Array(bytes[(open + 1)..<(bytes.count - 1)])
        for byte in inner {
            guard byte > 0x20, byte < 0x7F else { return nil }
            switch byte {
            case UInt8(ascii: "%"), UInt8(ascii: "/"), UInt8(ascii: "?"), UInt8(ascii: "#"), UInt8(ascii: "("),
                UInt8(ascii: ")"), UInt8(ascii: ","), UInt8(ascii: "="), UInt8(ascii: "@"), UInt8(ascii: "&"),
                UInt8(ascii: "$"), UInt8(ascii: "\""), UInt8(ascii: "["), UInt8(ascii: "{"):
                return nil
            default: continue
            }
        }
        let name = String(decoding: bytes[..<open], as: UTF8.self)
        guard let type = entityType(ofEntitySet: name), key(of: type).count == 1,
            let (literal, end) = Literal.scan(inner, 0, version: version.grammar), end == inner.count,
            let values = try? keyValues(
                [KeyValue(name: nil, value: CommonExpression(.literal(literal), at: 0))], of: type)
        else { return nil }
        return (name, values)
    }
}
