/// One difference between two versions of a service's model (SPEC §14), named so that a person
/// can tell what changed: `Property Sales.Product/Price retyped from Edm.Decimal to Edm.String`.
public struct ModelChange: Sendable, Hashable, CustomStringConvertible {
    /// What a change means for an offline store of the older model.
    public enum Kind: String, Sendable, Hashable {
        /// The store takes it in place (new sets, types, nullable properties, navigation
        /// properties, operations).
        case additive
        /// The store's tables or rows no longer fit (a property removed or retyped, a key changed,
        /// a set removed, a non-nullable property added, a property's nullability changed, a
        /// length, precision or scale lowered, an enumeration's values changed, a navigation
        /// property's constraints changed).
        case breaking
        /// Nothing kept in a store changes (an operation removed): online calls to it fail.
        case neutral
    }

    public var kind: Kind
    /// What changed, in a sentence.
    public var what: String
    /// The qualified name of what it touches: an entity set (`Products`; `Container/Products`
    /// when the model has several containers), a type (`Sales.Product`), or a member of the type
    /// that declares it (`Sales.Product/Price`: derived types and the sets holding them are
    /// touched too).
    public var subject: String

    /// A change of `kind` to `subject`.
    public init(_ kind: Kind, _ subject: String, _ what: String) {
        self.kind = kind
        self.subject = subject
        self.what = what
    }

    public var description: String { "\(kind.rawValue): \(what)" }
}

extension Model {
    /// How this model differs from `old`: each change with its kind, in a stable order (entity
    /// sets and singletons, then types by qualified name, then operations). Empty when the two
    /// describe the same service shape; annotations and documentation are not compared.
    public func changes(since old: Model) -> [ModelChange] {
        var changes: [ModelChange] = []
        changes += Self.containerChanges(old: old, new: self)
        changes += Self.structuredChanges(
            old: Dictionary(old.allEntityTypes.map { ($0.qualifiedName, $0.shape) }, uniquingKeysWith: { a, _ in a }),
            new: Dictionary(allEntityTypes.map { ($0.qualifiedName, $0.shape) }, uniquingKeysWith: { a, _ in a }),
            what: "EntityType")
        changes += Self.structuredChanges(
            old: Dictionary(old.allComplexTypes.map { ($0.qualifiedName, $0.shape) }, uniquingKeysWith: { a, _ in a }),
            new: Dictionary(allComplexTypes.map { ($0.qualifiedName, $0.shape) }, uniquingKeysWith: { a, _ in a }),
            what: "ComplexType")
        changes += Self.enumChanges(old: old, new: self)
        changes += Self.operationChanges(old: old, new: self)
        return changes
    }

    var allEntityTypes: [EntityType] { schemas.flatMap(\.entityTypes) }
    var allComplexTypes: [ComplexType] { schemas.flatMap(\.complexTypes) }

    /// Entity sets, singletons and operation imports of every container, by name.
    static func containerChanges(old: Model, new: Model) -> [ModelChange] {
        var changes: [ModelChange] = []
        // By name; with several containers (V2 allows them), by container and name.
        let qualify = old.entityContainers.count > 1 || new.entityContainers.count > 1
        func named(_ container: EntityContainer, _ name: String) -> String {
            qualify ? container.name + "/" + name : name
        }
        func sets(_ model: Model) -> [String: String] {
            Dictionary(
                model.entityContainers.flatMap { container in
                    container.entitySets.map { (named(container, $0.name), $0.entityType) }
                }, uniquingKeysWith: { a, _ in a })
        }
        func singletons(_ model: Model) -> [String: String] {
            Dictionary(
                model.entityContainers.flatMap { container in
                    container.singletons.map { (named(container, $0.name), $0.type) }
                }, uniquingKeysWith: { a, _ in a })
        }
        for (kind, before, after) in [
            ("EntitySet", sets(old), sets(new)), ("Singleton", singletons(old), singletons(new)),
        ] {
            for name in before.keys.sorted() {
                guard let type = after[name] else {
                    changes.append(ModelChange(.breaking, name, "\(kind) \(name) removed"))
                    continue
                }
                if let was = before[name], was != type {
                    changes.append(ModelChange(.breaking, name, "\(kind) \(name) now holds \(type), not \(was)"))
                }
            }
            for name in after.keys.sorted() where before[name] == nil {
                changes.append(ModelChange(.additive, name, "\(kind) \(name) added"))
            }
        }
        return changes
    }

    /// What matters of an entity or complex type for a store.
    struct Shape {
        var key: [String]
        var baseType: String?
        var isOpen: Bool
        var properties: [String: Property]
        var navigation: [String: Navigation]
    }

    /// What of a navigation property decides how a store keeps it: its target, and its
    /// constraints and partner (a foreign key, or a link table).
    struct Navigation: Equatable, CustomStringConvertible {
        var type: TypeReference
        var constraints: [ReferentialConstraint]
        var partner: String?
        var description: String { type.description }
    }

    static func structuredChanges(old: [String: Shape], new: [String: Shape], what kind: String) -> [ModelChange] {
        var changes: [ModelChange] = []
        for name in old.keys.sorted() where new[name] == nil {
            changes.append(ModelChange(.breaking, name, "\(kind) \(name) removed"))
        }
        for name in new.keys.sorted() {
            guard let after = new[name] else { continue }
            guard let before = old[name] else {
                changes.append(ModelChange(.additive, name, "\(kind) \(name) added"))
                continue
            }
            if before.key != after.key {
                changes.append(
                    ModelChange(
                        .breaking, name,
                        "Key of \(name) changed from (\(before.key.joined(separator: ", "))) to "
                            + "(\(after.key.joined(separator: ", ")))"))
            }
            if before.isOpen != after.isOpen {
                changes.append(
                    ModelChange(.breaking, name, "\(name) \(after.isOpen ? "became" : "is no longer") an open type"))
            }
            if before.baseType != after.baseType {
                changes.append(
                    ModelChange(
                        .breaking, name,
                        "Base type of \(name) changed from \(before.baseType ?? "none") to \(after.baseType ?? "none")")
                )
            }
            for property in before.properties.keys.sorted() {
                let subject = name + "/" + property
                guard let was = before.properties[property] else { continue }
                guard let now = after.properties[property] else {
                    changes.append(ModelChange(.breaking, subject, "Property \(subject) removed"))
                    continue
                }
                if was.type != now.type {
                    changes.append(
                        ModelChange(.breaking, subject, "Property \(subject) retyped from \(was.type) to \(now.type)"))
                }
                // Either way a store's column changes (NOT NULL cannot be added or dropped in place).
                if was.nullable != now.nullable {
                    changes.append(
                        ModelChange(
                            .breaking, subject, "Property \(subject) made \(now.nullable ? "nullable" : "non-nullable")"
                        ))
                }
                if let precision = now.facets.precision, precision < (was.facets.precision ?? Int.max) {
                    changes.append(ModelChange(.breaking, subject, "Precision of \(subject) lowered to \(precision)"))
                }
                if let scale = now.facets.scale, scale < (was.facets.scale ?? Int.max) {
                    changes.append(ModelChange(.breaking, subject, "Scale of \(subject) lowered to \(scale)"))
                }
                if let limit = now.facets.maxLength, limit < (was.facets.maxLength ?? Int.max) {
                    changes.append(
                        ModelChange(
                            .breaking, subject,
                            "Property \(subject) limited to \(limit) characters"
                                + (was.facets.maxLength.map { " (was \($0))" } ?? "")))
                }
            }
            for property in after.properties.keys.sorted() where before.properties[property] == nil {
                let subject = name + "/" + property
                let nullable = after.properties[property]?.nullable ?? true
                changes.append(
                    nullable
                        ? ModelChange(.additive, subject, "Property \(subject) added")
                        : ModelChange(.breaking, subject, "Non-nullable property \(subject) added"))
            }
            for navigation in before.navigation.keys.sorted() {
                let subject = name + "/" + navigation
                guard let was = before.navigation[navigation] else { continue }
                guard let now = after.navigation[navigation] else {
                    changes.append(ModelChange(.breaking, subject, "Navigation property \(subject) removed"))
                    continue
                }
                if was.type != now.type {
                    changes.append(
                        ModelChange(
                            .breaking, subject, "Navigation property \(subject) now leads to \(now), not \(was)"))
                } else if was != now {
                    changes.append(
                        ModelChange(
                            .breaking, subject, "Navigation property \(subject) changed its constraints or partner"))
                }
            }
            for navigation in after.navigation.keys.sorted() where before.navigation[navigation] == nil {
                let subject = name + "/" + navigation
                changes.append(ModelChange(.additive, subject, "Navigation property \(subject) added"))
            }
        }
        return changes
    }

    /// Enumeration members, by value (a store keeps an enumeration as its member's number):
    /// a member removed, or whose value changed, is breaking; so are a changed underlying type
    /// and `IsFlags`; type definitions whose underlying type changed too.
    static func enumChanges(old: Model, new: Model) -> [ModelChange] {
        func enums(_ model: Model) -> [String: EnumType] {
            Dictionary(
                model.schemas.flatMap(\.enumTypes).map { ($0.qualifiedName, $0) }, uniquingKeysWith: { a, _ in a })
        }
        let before = enums(old)
        let after = enums(new)
        var changes: [ModelChange] = []
        for name in before.keys.sorted() {
            guard let was = before[name], let now = after[name] else {
                changes.append(ModelChange(.breaking, name, "EnumType \(name) removed"))
                continue
            }
            if was.underlyingType != now.underlyingType || was.isFlags != now.isFlags {
                changes.append(ModelChange(.breaking, name, "EnumType \(name) changed its underlying type or flags"))
            }
            let values = Dictionary(now.members.map { ($0.name, $0.value) }, uniquingKeysWith: { a, _ in a })
            let known = Set(was.members.map(\.name))
            for member in was.members {
                let subject = name + "/" + member.name
                guard let value = values[member.name] else {
                    changes.append(ModelChange(.breaking, subject, "Member \(member.name) of \(name) removed"))
                    continue
                }
                if value != member.value {
                    changes.append(
                        ModelChange(
                            .breaking, subject,
                            "Member \(member.name) of \(name) now has the value \(value), not \(member.value)"))
                }
            }
            for member in now.members where !known.contains(member.name) {
                changes.append(
                    ModelChange(.additive, name + "/" + member.name, "Member \(member.name) of \(name) added"))
            }
        }
        for name in after.keys.sorted() where before[name] == nil {
            changes.append(ModelChange(.additive, name, "EnumType \(name) added"))
        }
        func definitions(_ model: Model) -> [String: String] {
            Dictionary(
                model.schemas.flatMap(\.typeDefinitions).map { ($0.qualifiedName, $0.underlyingType) },
                uniquingKeysWith: { a, _ in a })
        }
        let definedBefore = definitions(old)
        let definedAfter = definitions(new)
        for name in definedBefore.keys.sorted() {
            guard let was = definedBefore[name], let now = definedAfter[name] else {
                changes.append(ModelChange(.breaking, name, "TypeDefinition \(name) removed"))
                continue
            }
            if was != now {
                changes.append(ModelChange(.breaking, name, "TypeDefinition \(name) now stands for \(now), not \(was)"))
            }
        }
        for name in definedAfter.keys.sorted() where definedBefore[name] == nil {
            changes.append(ModelChange(.additive, name, "TypeDefinition \(name) added"))
        }
        return changes
    }

    /// Functions, actions and their imports, by qualified name.
    static func operationChanges(old: Model, new: Model) -> [ModelChange] {
        func names(_ model: Model) -> Set<String> {
            var result = Set(model.schemas.flatMap { $0.functions + $0.actions }.map { $0.namespace + "." + $0.name })
            for container in model.entityContainers {
                result.formUnion(container.functionImports.map { container.name + "/" + $0.name })
                result.formUnion(container.actionImports.map { container.name + "/" + $0.name })
            }
            return result
        }
        let before = names(old)
        let after = names(new)
        return before.subtracting(after).sorted().map {
            ModelChange(.neutral, $0, "Operation \($0) removed")
        } + after.subtracting(before).sorted().map { ModelChange(.additive, $0, "Operation \($0) added") }
    }
}

extension NavigationProperty {
    var shape: Model.Navigation {
        Model.Navigation(type: type, constraints: referentialConstraints, partner: partner)
    }
}

extension EntityType {
    /// Members are those it declares: a change of a base type shows under the base type.
    var shape: Model.Shape {
        Model.Shape(
            key: key.map(\.keyName), baseType: baseType, isOpen: isOpenType,
            properties: Dictionary(properties.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a }),
            navigation: Dictionary(navigationProperties.map { ($0.name, $0.shape) }, uniquingKeysWith: { a, _ in a }))
    }
}

extension ComplexType {
    var shape: Model.Shape {
        Model.Shape(
            key: [], baseType: baseType, isOpen: isOpenType,
            properties: Dictionary(properties.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a }),
            navigation: Dictionary(navigationProperties.map { ($0.name, $0.shape) }, uniquingKeysWith: { a, _ in a }))
    }
}
