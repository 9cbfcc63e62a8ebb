import Foundation
import ODataCore

/// The Swift type that stands for a model type.
struct SwiftTypeInfo {
    enum Kind: Equatable {
        case primitive, enumeration, complex, entity, untyped
        case navigation
    }

    /// The Swift type of one value (`Swift.String`, `Address`).
    var element: String
    var kind: Kind
    /// `dateTime` or `time` where the Swift type stands for two Edm types.
    var hint: String?
    var isCollection: Bool
    /// The qualified name of the model type (for complex and entity types).
    var qualifiedName: String

    func full(optional: Bool) -> String {
        isCollection ? "[\(element)]" : (optional ? element + "?" : element)
    }
}

/// One stored property of a generated struct.
struct MemberPlan {
    enum Kind: Equatable {
        case primitive, enumeration, complex, untyped
        case navigation(target: String, many: Bool)
    }

    var modelName: String
    var swiftName: String
    /// The declared Swift type (`Swift.String?`, `[Order]?`).
    var swiftType: String
    /// The Swift type of one value.
    var element: String
    /// The type given to the reader (`as: …`).
    var readType: String
    var isOptional: Bool
    var isCollection: Bool
    var kind: Kind
    var edmHint: String?
    /// Stored in an `Indirect` box: the property's type can contain the owning type.
    var boxed: Bool
    var documentation: String
    /// The qualified name of a complex or entity type.
    var typeQualifiedName: String
}

/// Names and Swift types for every type of a model, decided once.
struct TypePlan {
    let model: Model
    /// Qualified name (or `container:` + qualified container name) → Swift type name.
    var typeNames: [String: String] = [:]
    var notes: [String] = []
    private var reachCache: [String: Set<String>] = [:]

    init(model: Model) {
        self.model = model
        var entries: [(qualified: String, namespace: String, name: String)] = []
        for schema in model.schemas {
            for type in schema.enumTypes { entries.append((type.qualifiedName, schema.namespace, type.name)) }
            for type in schema.typeDefinitions { entries.append((type.qualifiedName, schema.namespace, type.name)) }
            for type in schema.complexTypes { entries.append((type.qualifiedName, schema.namespace, type.name)) }
            for type in schema.entityTypes { entries.append((type.qualifiedName, schema.namespace, type.name)) }
        }
        for container in model.entityContainers {
            entries.append(("container:" + container.qualifiedName, container.namespace, container.name))
        }
        // A simple name used in two namespaces is qualified with its namespace everywhere.
        var counts: [String: Int] = [:]
        for entry in entries { counts[SwiftNames.type(entry.name), default: 0] += 1 }
        let wanted = entries.map { entry -> String in
            let simple = SwiftNames.type(entry.name)
            guard counts[simple, default: 0] > 1 else { return simple }
            return SwiftNames.type(entry.namespace.replacingOccurrences(of: ".", with: "_") + "_" + entry.name)
        }
        for (entry, name) in zip(entries, SwiftNames.unique(wanted)) where typeNames[entry.qualified] == nil {
            typeNames[entry.qualified] = name
        }
    }

    /// The Swift type for a model type reference; nil for `Edm.Stream`, which is not a value.
    func swiftType(_ reference: TypeReference, context: String) -> SwiftTypeInfo? {
        let name = reference.name
        let collection = reference.isCollection
        if let primitive = PrimitiveType(qualifiedName: name) {
            guard let (swift, hint) = Self.primitive(primitive) else { return nil }
            return SwiftTypeInfo(
                element: swift, kind: .primitive, hint: hint, isCollection: collection, qualifiedName: name)
        }
        if let definition = model.typeDefinition(name), let swift = typeNames[name] {
            let underlying = PrimitiveType(qualifiedName: definition.underlyingType).flatMap(Self.primitive)
            guard definition.underlyingType != "Edm.Stream" else { return nil }
            return SwiftTypeInfo(
                element: swift, kind: .primitive, hint: underlying?.1, isCollection: collection, qualifiedName: name)
        }
        if model.enumType(name) != nil, let swift = typeNames[name] {
            return SwiftTypeInfo(
                element: swift, kind: .enumeration, hint: nil, isCollection: collection, qualifiedName: name)
        }
        if model.complexType(name) != nil, let swift = typeNames[name] {
            return SwiftTypeInfo(
                element: swift, kind: .complex, hint: nil, isCollection: collection, qualifiedName: name)
        }
        if model.entityType(name) != nil, let swift = typeNames[name] {
            return SwiftTypeInfo(
                element: swift, kind: .entity, hint: nil, isCollection: collection, qualifiedName: name)
        }
        // Edm.Untyped, abstract types and types of documents that are only referenced.
        return SwiftTypeInfo(
            element: "ODataCore.Value", kind: .untyped, hint: nil, isCollection: collection, qualifiedName: name)
    }

    static func primitive(_ type: PrimitiveType) -> (String, String?)? {
        switch type {
        case .binary: ("Foundation.Data", nil)
        case .boolean: ("Swift.Bool", nil)
        case .byte: ("Swift.UInt8", nil)
        case .sbyte: ("Swift.Int8", nil)
        case .int16: ("Swift.Int16", nil)
        case .int32: ("Swift.Int32", nil)
        case .int64: ("Swift.Int64", nil)
        case .single: ("Swift.Float", nil)
        case .double: ("Swift.Double", nil)
        case .decimal: ("ODataCore.DecimalValue", nil)
        case .string: ("Swift.String", nil)
        case .guid: ("ODataCore.GuidValue", nil)
        case .date: ("ODataCore.DateValue", nil)
        case .timeOfDay: ("ODataCore.TimeOfDayValue", nil)
        case .dateTimeOffset: ("ODataCore.DateTimeOffsetValue", nil)
        case .duration: ("ODataCore.DurationValue", nil)
        case .dateTime: ("ODataCore.DateTimeOffsetValue", "dateTime")
        case .time: ("ODataCore.DurationValue", "time")
        case .stream: nil
        default: ("ODataCore.SpatialValue", nil)
        }
    }

    /// The stored properties of a structured type: its own and inherited structural
    /// properties, then (for entity types) navigation properties.
    mutating func members(of qualifiedName: String, isEntity: Bool) -> [MemberPlan] {
        var plans: [MemberPlan] = []
        var seen: Set<String> = []
        // Key properties are never optional, even where a V2 document leaves out Nullable="false".
        let keyNames = Set(
            model.entityType(qualifiedName).map { model.key(of: $0).map { String($0.name.split(separator: "/")[0]) } }
                ?? [])
        for property in model.allProperties(ofStructuredType: qualifiedName) where seen.insert(property.name).inserted {
            guard let type = swiftType(property.type, context: qualifiedName) else {
                notes.append("\(qualifiedName)/\(property.name): a stream property; read it as a media resource")
                continue
            }
            let kind: MemberPlan.Kind
            switch type.kind {
            case .primitive: kind = .primitive
            case .enumeration: kind = .enumeration
            case .complex: kind = .complex
            case .untyped, .entity, .navigation: kind = .untyped
            }
            let element = type.kind == .entity ? "ODataCore.Value" : type.element
            var info = type
            info.element = element
            let optional =
                !type.isCollection && property.nullable && type.kind != .untyped
                && !(keyNames.contains(property.name) && type.kind != .complex)
            let full = info.full(optional: optional)
            var documentation = property.type.description
            if let length = property.facets.maxLength { documentation += ", MaxLength \(length)" }
            if let precision = property.facets.precision { documentation += ", Precision \(precision)" }
            if let scale = property.facets.scale { documentation += ", Scale \(scale)" }
            documentation += property.nullable ? ", nullable" : ""
            plans.append(
                MemberPlan(
                    modelName: property.name, swiftName: SwiftNames.member(property.name), swiftType: full,
                    element: element,
                    readType: full, isOptional: optional, isCollection: type.isCollection, kind: kind,
                    edmHint: type.hint,
                    boxed: kind == .complex && !type.isCollection && reaches(type.qualifiedName, qualifiedName),
                    documentation: documentation, typeQualifiedName: type.qualifiedName))
        }
        if isEntity {
            for navigation in model.allNavigationProperties(ofStructuredType: qualifiedName)
            where seen.insert(navigation.name).inserted {
                guard model.entityType(navigation.type.name) != nil, let target = typeNames[navigation.type.name] else {
                    notes.append(
                        "\(qualifiedName)/\(navigation.name): its type \(navigation.type.name) is not in the model")
                    continue
                }
                let many = navigation.type.isCollection
                plans.append(
                    MemberPlan(
                        modelName: navigation.name, swiftName: SwiftNames.member(navigation.name),
                        swiftType: many ? "[\(target)]?" : "\(target)?", element: target,
                        readType: many ? "[\(target)]" : target,
                        isOptional: true, isCollection: false, kind: .navigation(target: target, many: many),
                        edmHint: nil,
                        boxed: !many && reaches(navigation.type.name, qualifiedName),
                        documentation: "navigation to \(navigation.type.description); nil unless expanded",
                        typeQualifiedName: navigation.type.name))
            }
        }
        var names = SwiftNames.unique(plans.map(\.swiftName))
        // A boxed property keeps its value in `_name`: no other property may be called that.
        let storage = Set(plans.indices.filter { plans[$0].boxed }.map { "_" + names[$0] })
        if !storage.isEmpty {
            var taken = Set(names).union(storage)
            for index in plans.indices where storage.contains(names[index]) {
                let renamed = SwiftNames.unique([names[index]], taken: taken)[0]
                taken.insert(renamed)
                names[index] = renamed
            }
        }
        for index in plans.indices { plans[index].swiftName = names[index] }
        return plans
    }

    /// Whether a value of `from` can contain a value of `to` without passing through an array:
    /// then a stored property of type `from` inside `to` needs a box.
    private mutating func reaches(_ from: String, _ to: String) -> Bool {
        reachable(from).contains(to)
    }

    private mutating func reachable(_ start: String) -> Set<String> {
        if let cached = reachCache[start] { return cached }
        var seen: Set<String> = [start]
        var stack = [start]
        while let current = stack.popLast() {
            for next in directSingleTargets(current) where seen.insert(next).inserted { stack.append(next) }
        }
        reachCache[start] = seen
        return seen
    }

    private func directSingleTargets(_ qualifiedName: String) -> [String] {
        var result: [String] = []
        for property in model.allProperties(ofStructuredType: qualifiedName)
        where !property.type.isCollection && model.complexType(property.type.name) != nil {
            result.append(property.type.name)
        }
        if model.entityType(qualifiedName) != nil {
            for navigation in model.allNavigationProperties(ofStructuredType: qualifiedName)
            where !navigation.type.isCollection && model.entityType(navigation.type.name) != nil {
                result.append(navigation.type.name)
            }
        }
        return result
    }

    /// A key property path (`ID`, or `Info/ID` for a key alias) as a Swift expression on the
    /// entity, with its Swift type.
    mutating func keyPath(
        _ path: String, in entity: String, members: [MemberPlan]
    ) -> (type: String, expression: String, hint: String?)? {
        let segments = path.split(separator: "/").map(String.init)
        guard let first = segments.first, let head = members.first(where: { $0.modelName == first }) else { return nil }
        var expression = head.swiftName
        var optional = head.isOptional
        var current = head
        for segment in segments.dropFirst() {
            guard current.kind == .complex, !current.isCollection else { return nil }
            let inner = self.members(of: current.typeQualifiedName, isEntity: false)
            guard let next = inner.first(where: { $0.modelName == segment }) else { return nil }
            expression += (current.isOptional ? "?." : ".") + next.swiftName
            optional = optional || next.isOptional
            current = next
        }
        guard current.kind == .primitive || current.kind == .enumeration, !current.isCollection else { return nil }
        return (optional ? current.element + "?" : current.element, expression, current.edmHint)
    }
}
