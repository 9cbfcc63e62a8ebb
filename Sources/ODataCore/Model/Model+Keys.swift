extension Model {
    /// The key values a key predicate (`('A')`, `(K1='A',K2=2)`, `(K=@alias)`) gives for an
    /// entity of `entitySet`, converted to the key properties' types. Every key property must be
    /// given exactly; `input` is the URL the predicate came from, for the error.
    public func keyValues(_ parts: [KeyValue], ofEntitySet entitySet: String, aliases: [String: CommonExpression] = [:],
                          input: String = "") throws(BindingError) -> [String: PrimitiveValue] {
        func fail(_ message: String, _ offset: Int = 0) -> BindingError { BindingError(.invalidKey, message, input: input, offset: offset) }
        guard let type = entityType(ofEntitySet: entitySet) else { throw fail("No entity set \(entitySet)") }
        let names = key(of: type).map(\.name)
        var values: [String: PrimitiveValue] = [:]
        for part in parts {
            guard let name = part.name ?? (names.count == 1 ? names[0] : nil), names.contains(name) else {
                throw fail("The key does not fit \(entitySet): its key is \(names.joined(separator: ", "))", part.value.offset)
            }
            guard values[name] == nil else { throw fail("\(entitySet): the key property \(name) is given twice", part.value.offset) }
            let typeName = property(name, ofStructuredType: type.qualifiedName)?.type.name ?? ""
            guard let primitive = PrimitiveType(rawValue: typeDefinition(typeName)?.underlyingType ?? typeName) else {
                throw fail("\(entitySet): the key property \(name) is not of a primitive type", part.value.offset)
            }
            var literal: Value?
            switch part.value.node {
            case .literal(let value): literal = value
            case .alias(let alias): if case .literal(let value)? = aliases[alias]?.node { literal = value }
            default: break
            }
            guard let literal, case .primitive(let value)? = Literal.convert(literal, to: primitive) else {
                throw fail("The key value for \(name) is not a \(primitive.rawValue)", part.value.offset)
            }
            values[name] = value
        }
        guard values.count == names.count else { throw fail("\(entitySet) needs the key \(names.joined(separator: ", "))") }
        return values
    }
}
