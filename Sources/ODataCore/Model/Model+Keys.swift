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
        var keyText = "The key of \(type.qualifiedName) is \(names.joined(separator: ", "))"
        if !implied.isEmpty {
            keyText += " (\(names.filter { implied.contains($0) }.joined(separator: ", ")) taken from the navigation)"
        }
        func fail(_ message: String, _ offset: Int = 0) -> BindingError {
            BindingError(.invalidKey, keyText + "; " + message, input: input, offset: offset)
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
