extension Value: CustomStringConvertible {
    /// The value as a person reads it: primitives and enums as URL literals (`412`, `'text'`,
    /// `2024-05-01`, `Sales.OrderStatus'New'`), structured values as `Type(Name: value, …)`,
    /// collections as `[…]`.
    public var description: String {
        switch self {
        case .null, .primitive, .enumeration:
            return Literal.format(self)
        case .complex(let structured), .entity(let structured):
            let members = structured.properties.map { "\($0.name): \($0.value)" }.joined(separator: ", ")
            return (structured.typeName ?? "") + "(" + members + ")"
        case .collection(let items):
            return "[" + items.map(\.description).joined(separator: ", ") + "]"
        }
    }

    /// An integer of any Edm integer type, as `Int64`; nil for other values and null.
    public var int64Value: Int64? {
        guard case .primitive(let p) = self else { return nil }
        switch p {
        case .byte(let v): return Int64(v)
        case .sbyte(let v): return Int64(v)
        case .int16(let v): return Int64(v)
        case .int32(let v): return Int64(v)
        case .int64(let v): return v
        default: return nil
        }
    }

    /// A string's text; nil for other values and null.
    public var stringValue: String? {
        guard case .primitive(.string(let text)) = self else { return nil }
        return text
    }

    /// A Boolean; nil for other values and null.
    public var boolValue: Bool? {
        guard case .primitive(.boolean(let flag)) = self else { return nil }
        return flag
    }

    /// A number of any Edm numeric type as `Double` (decimals rounded); nil otherwise.
    public var doubleValue: Double? {
        guard case .primitive(let p) = self else { return nil }
        return p.doubleValue
    }

    /// An integer or decimal, exactly; nil otherwise.
    public var decimalValue: DecimalValue? {
        guard case .primitive(let p) = self else { return nil }
        return p.decimalValue
    }
}

extension Entity: CustomStringConvertible {
    /// The entity as a person reads it: `Sales.SalesOrder(OrderID: 'SO1', GrossAmount: 7014.8)`,
    /// then each expanded navigation (`Items: [2 entities]`).
    public var description: String {
        var members = properties.map { "\($0.name): \($0.value)" }
        for nav in navigation {
            switch nav.inline {
            case .entity(let related?)?: members.append("\(nav.name): \(related)")
            case .entity(nil)?: members.append("\(nav.name): null")
            case .collection(let related)?: members.append("\(nav.name): [\(related.entities.count) entities]")
            case nil: if let count = nav.count { members.append("\(nav.name)/$count: \(count)") }
            }
        }
        return (typeName ?? "") + "(" + members.joined(separator: ", ") + ")"
    }

    /// An integer property (any Edm integer type) as `Int64`: `failure.int64("RequestID")`.
    /// Nil when the property is absent, null or not an integer.
    public func int64(_ name: String) -> Int64? { self[name]?.int64Value }

    /// A string property's text; nil when it is absent, null or not a string.
    public func string(_ name: String) -> String? { self[name]?.stringValue }

    /// A Boolean property; nil when it is absent, null or not a Boolean.
    public func bool(_ name: String) -> Bool? { self[name]?.boolValue }

    /// A numeric property as `Double`; nil when it is absent, null or not a number.
    public func double(_ name: String) -> Double? { self[name]?.doubleValue }

    /// An integer or decimal property, exactly; nil when it is absent, null or neither.
    public func decimal(_ name: String) -> DecimalValue? { self[name]?.decimalValue }
}
