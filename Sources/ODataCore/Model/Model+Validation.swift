extension Model {
    /// Checks the values of an entity written (created, updated or deep-inserted) as
    /// `entityType` against the model, so that nothing a client sends is dropped or stored in a
    /// form the model forbids. OData 4.01 Part 1 §11.4.2: a service fails a request whose values
    /// it cannot persist.
    ///
    /// Refused, with the place named (`Contacts[0].Name`):
    /// - a property or navigation property the type does not declare, unless the type is open
    ///   (then an undeclared property is a dynamic property; an undeclared navigation property is
    ///   still refused);
    /// - an `@odata.type` that is not the declared type or derived from it;
    /// - a null in a property that is not nullable;
    /// - a string or binary value longer than its `MaxLength`;
    /// - a decimal with more digits than its `Precision` and `Scale` allow.
    ///
    /// Complex values, collections and nested (deep insert) entities are checked the same way.
    public func checkWritable(_ entity: Entity, as entityType: String) throws(PayloadError) {
        try checkStructured(typeName: entity.typeName, properties: entity.properties, navigation: entity.navigation,
                            declared: entityType, path: "")
    }

    /// Checks that an update's body does not change the key of the entity it addresses: a key
    /// value in the body must equal the URL's (a different one would be dropped, or move the
    /// entity). `key` holds the URL's key values by property name.
    public func checkKeyUnchanged(_ entity: Entity, key: [String: PrimitiveValue]) throws(PayloadError) {
        for (name, value) in key.sorted(by: { $0.key < $1.key }) {
            guard let given = entity[name], given != .primitive(value) else { continue }
            if case .primitive(let primitive) = given, case .primitive(let converted)? = Literal.convert(.primitive(primitive), to: value.type),
               converted == value { continue }
            // A V2 `datetime'…'` key (no offset) and the same instant written with `Z` or an
            // offset in the body (`2020-01-01T01:00:00+01:00`) are one key.
            if case .primitive(let primitive) = given, let written = Self.instant(primitive), let keyed = Self.instant(value),
               written.seconds == keyed.seconds, written.picoseconds == keyed.picoseconds { continue }
            throw PayloadError(.unexpectedValue, "\(name) is part of the key (\(Literal.format(.primitive(value)))) and cannot change "
                               + "to \(Literal.format(given))", offset: -1, path: name)
        }
    }

    /// The instant of a date-time value (no offset read as UTC); nil for other values.
    private static func instant(_ value: PrimitiveValue) -> (seconds: Int64, picoseconds: Int64)? {
        switch value {
        case .dateTime(let time), .dateTimeOffset(let time): return time.instant
        default: return nil
        }
    }

    private func checkStructured(typeName: String?, properties: [NamedValue], navigation: [NavigationValue],
                                 declared: String, path: String) throws(PayloadError) {
        func fail(_ message: String, _ at: String) -> PayloadError {
            PayloadError(.unexpectedValue, message, offset: -1, path: at)
        }
        func place(_ name: String) -> String { path.isEmpty ? name : path + "." + name }
        var type = declared
        if let given = typeName, given != declared {
            guard entityType(given) != nil || complexType(given) != nil else {
                throw fail("\(given) is not a type of the service", path.isEmpty ? "@odata.type" : path)
            }
            guard isType(given, derivedFrom: declared) else {
                throw fail("\(given) is not \(declared) or derived from it", path.isEmpty ? "@odata.type" : path)
            }
            type = given
        }
        let open = isOpen(type)
        for property in properties {
            let at = place(property.name)
            guard let declaredProperty = self.property(property.name, ofStructuredType: type) else {
                if open { continue }
                if navigationProperty(property.name, ofStructuredType: type) != nil { continue }
                throw fail("\(type) has no property \(property.name)", at)
            }
            // A null key means "the service makes one" on create; a changed key is refused by
            // `checkKeyUnchanged` on update.
            if property.value == .null, isKeyProperty(property.name, of: type) { continue }
            try checkValue(property.value, declaredProperty.type, declaredProperty.facets, at: at)
        }
        for nav in navigation {
            let at = place(nav.name)
            guard let declaredNav = navigationProperty(nav.name, ofStructuredType: type) else {
                throw fail("\(type) has no navigation property \(nav.name)", at)
            }
            switch nav.inline {
            case .entity(let nested?)?:
                try checkStructured(typeName: nested.typeName, properties: nested.properties,
                                    navigation: nested.navigation, declared: declaredNav.type.name, path: at)
            case .collection(let nested)?:
                for (index, item) in nested.entities.enumerated() {
                    try checkStructured(typeName: item.typeName, properties: item.properties,
                                        navigation: item.navigation, declared: declaredNav.type.name,
                                        path: at + "[\(index)]")
                }
            default: break
            }
        }
    }

    private func isKeyProperty(_ name: String, of type: String) -> Bool {
        guard let entity = entityType(type) else { return false }
        return key(of: entity).contains { $0.name == name }
    }

    /// Whether a structured type, or one of its base types, is open (takes dynamic properties).
    public func isOpen(_ type: String) -> Bool {
        if let entity = entityType(type) { return entityTypeChain(entity).contains { $0.isOpenType } }
        if let complex = complexType(type) { return complexTypeChain(complex).contains { $0.isOpenType } }
        return false
    }

    private func checkValue(_ value: Value, _ type: TypeReference, _ facets: Facets, at path: String) throws(PayloadError) {
        func fail(_ message: String) -> PayloadError { PayloadError(.wrongType, message, offset: -1, path: path) }
        switch value {
        case .null:
            guard facets.nullable || type.isCollection else { throw fail("\(path) may not be null") }
        case .collection(let items):
            let element = TypeReference(name: type.name, isCollection: false)
            var elementFacets = facets
            elementFacets.nullable = true
            for (index, item) in items.enumerated() {
                try checkValue(item, element, elementFacets, at: path + "[\(index)]")
            }
        case .complex(let structured):
            try checkStructured(typeName: structured.typeName, properties: structured.properties, navigation: [],
                                declared: type.name, path: path)
        case .primitive(let primitive):
            try checkFacets(primitive, facets, fail)
        case .enumeration(let member):
            guard let enumType = enumType(type.name) else { return }
            for name in member.members where Int64(name) == nil && !enumType.members.contains(where: { $0.name == name }) {
                throw fail("\(enumType.qualifiedName) has no member \(name)")
            }
        case .entity:
            break
        }
    }

    private func checkFacets(_ value: PrimitiveValue, _ facets: Facets,
                             _ fail: (String) -> PayloadError) throws(PayloadError) {
        switch value {
        case .string(let text):
            if let maxLength = facets.maxLength, maxLength != Int.max {
                // Cheap bound first: a string has at least as many UTF-8 bytes as characters.
                if text.utf8.count > maxLength, text.unicodeScalars.count > maxLength {
                    throw fail("The text has \(text.unicodeScalars.count) characters; MaxLength is \(maxLength)")
                }
            }
        case .binary(let data):
            if let maxLength = facets.maxLength, maxLength != Int.max, data.count > maxLength {
                throw fail("The value has \(data.count) bytes; MaxLength is \(maxLength)")
            }
        case .decimal(let decimal):
            guard let precision = facets.precision, !decimal.isZero else { return }
            let bytes = Array(decimal.digits.utf8)
            var digits = bytes.count
            var exponent = decimal.exponent
            // Trailing zeros written after the point do not count.
            while digits > 1, exponent < 0, bytes[digits - 1] == UInt8(ascii: "0") {
                digits -= 1
                exponent += 1
            }
            let integerDigits = max(0, digits + exponent)
            let fractionDigits = max(0, -exponent)
            if facets.scaleIsFloating {
                // Significant digits only: the exponent floats (1.5E+100 and 1500 have two).
                var significant = digits
                while significant > 1, bytes[significant - 1] == UInt8(ascii: "0") { significant -= 1 }
                guard significant <= precision else {
                    throw fail("\(decimal) has \(significant) significant digits; Precision is \(precision) (Scale floating)")
                }
                return
            }
            if facets.scaleIsVariable {
                guard integerDigits + fractionDigits <= precision else {
                    throw fail("\(decimal) has more than \(precision) digits (Precision \(precision))")
                }
                return
            }
            let scale = facets.scale ?? 0
            guard fractionDigits <= scale else {
                throw fail("\(decimal) has \(fractionDigits) digits after the point; Scale is \(scale)")
            }
            guard integerDigits <= precision - scale else {
                throw fail("\(decimal) has \(integerDigits) digits before the point; Precision \(precision) and "
                           + "Scale \(scale) allow \(max(0, precision - scale))")
            }
        default:
            break
        }
    }
}
