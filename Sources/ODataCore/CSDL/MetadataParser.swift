public import Foundation

/// Reads CSDL XML `$metadata` documents, V4 (4.0 and 4.01) and V2/V3 (EDMX 1.0), into one
/// ``Model``.
///
/// Every mode rejects malformed XML, unknown types and broken references (a navigation
/// property, key, base type, association or binding that points nowhere). Strict mode
/// additionally enforces CSDL rules that the XML schema states: one `Key` per entity type,
/// navigation properties typed with entity types, well-formed annotation targets, unique names.
public struct MetadataParser: Sendable {
    /// Options for parsing.
    public struct Options: Sendable {
        /// Enforce CSDL schema rules as well (see ``MetadataParser``).
        public var strict: Bool
        /// Creates a value from its parts.
        public init(strict: Bool = false) { self.strict = strict }
    }

    public var options: Options

    /// Creates a value from its parts.
    public init(options: Options = Options()) { self.options = options }

    /// Parses a document.
    public func parse(_ data: Data) throws(MetadataError) -> Model {
        let root = try XMLTreeBuilder.parse(data)
        var reader = CSDLReader(strict: options.strict)
        return try reader.read(root)
    }

    /// Parses a document given as text.
    public func parse(_ text: String) throws(MetadataError) -> Model {
        try parse(Data(text.utf8))
    }
}

enum CSDLNamespace {
    static let edmxV4 = "http://docs.oasis-open.org/odata/ns/edmx"
    static let edmV4 = "http://docs.oasis-open.org/odata/ns/edm"
    static let edmxV1 = "http://schemas.microsoft.com/ado/2007/06/edmx"
    static let metadataV2 = "http://schemas.microsoft.com/ado/2007/08/dataservices/metadata"
    static let sap = "http://www.sap.com/Protocols/SAPData"
}

/// The work of one parse: first a structural pass over the XML, then alias resolution,
/// V2 association resolution and reference checks.
struct CSDLReader {
    let strict: Bool
    private var version: ODataVersion = .v4
    private var aliases: [String: String] = [:]
    private var localNamespaces: Set<String> = []
    private var externalNamespaces: Set<String> = []
    /// Positions of elements, for errors found after the structural pass.
    private var positions: [String: XMLNode] = [:]

    init(strict: Bool) { self.strict = strict }

    private func error(_ code: MetadataError.Code, _ message: String, _ node: XMLNode) -> MetadataError {
        MetadataError(code, message, line: node.line, column: node.column, elementPath: node.path)
    }

    private func required(_ node: XMLNode, _ name: String) throws(MetadataError) -> String {
        guard let value = node[name], !value.isEmpty else {
            throw error(.missingAttribute, "\(node.localName) needs a \(name) attribute", node)
        }
        return value
    }

    mutating func read(_ root: XMLNode) throws(MetadataError) -> Model {
        guard root.localName == "Edmx" else {
            throw error(.notMetadata, "The root element is \(root.localName), not edmx:Edmx", root)
        }
        if strict, root.namespaceURI != CSDLNamespace.edmxV4, root.namespaceURI != CSDLNamespace.edmxV1 {
            throw error(.notMetadata, "edmx:Edmx is in an unknown namespace \(root.namespaceURI ?? "(none)")", root)
        }
        let edmxVersion = root["Version"] ?? ""
        guard let dataServices = root.child(named: "DataServices") else {
            throw error(.notMetadata, "edmx:Edmx has no edmx:DataServices", root)
        }
        switch edmxVersion {
        case "4.0": version = .v4
        case "4.01": version = .v401
        case "1.0", "2.0", "3.0":
            let dsv = dataServices.attribute("DataServiceVersion", namespace: CSDLNamespace.metadataV2)
                ?? dataServices.attributes.first { $0.localName == "DataServiceVersion" }?.value ?? "2.0"
            version = dsv.hasPrefix("3") ? .v3 : .v2
        default:
            throw error(.invalidAttribute, "Unknown edmx:Edmx Version '\(edmxVersion)'", root)
        }

        var references: [Reference] = []
        for ref in root.children(named: "Reference") {
            let uri = try required(ref, "Uri")
            var includes: [Reference.Include] = []
            for include in ref.children(named: "Include") {
                let namespace = try required(include, "Namespace")
                includes.append(.init(namespace: namespace, alias: include["Alias"]))
                externalNamespaces.insert(namespace)
                if let alias = include["Alias"] { aliases[alias] = namespace }
            }
            references.append(Reference(uri: uri, includes: includes))
        }
        let schemaNodes = dataServices.children(named: "Schema")
        if schemaNodes.isEmpty, strict {
            throw error(.notMetadata, "edmx:DataServices holds no Schema", dataServices)
        }
        for node in schemaNodes {
            let namespace = try required(node, "Namespace")
            localNamespaces.insert(namespace)
            if let alias = node["Alias"] { aliases[alias] = namespace }
            for using in node.children(named: "Using") {
                if let ns = using["Namespace"], let alias = using["Alias"] { aliases[alias] = ns }
            }
        }
        for node in schemaNodes {
            for child in node.children where ["EntityType", "ComplexType", "EnumType", "TypeDefinition"].contains(child.localName) {
                if let name = child["Name"], let namespace = node["Namespace"] { simpleNames[name, default: []].append(namespace) }
            }
        }
        var schemas: [Schema] = []
        for node in schemaNodes {
            schemas.append(try readSchema(node))
        }
        var model = Model(version: version, schemas: schemas, references: references)
        if version.isLegacy {
            try resolveAssociations(&model)
        }
        try check(model)
        model.warnings = warnings.map(\.description)
        return model
    }

    // MARK: Names

    /// Replaces an alias prefix with its namespace: `self.Customer` → `Ns.Customer`.
    private func qualify(_ name: String) -> String {
        guard let dot = name.lastIndex(of: ".") else { return name }
        let prefix = String(name[..<dot])
        if let namespace = aliases[prefix] { return namespace + name[dot...] }
        return name
    }

    /// Some V2 producers write type names without their namespace. Resolve such a name to the
    /// only schema type with that simple name (or the current schema), with a warning.
    private mutating func qualifyUnqualified(_ name: String, _ node: XMLNode) throws(MetadataError) -> String {
        if let dot = name.lastIndex(of: ".") {
            // A prefix that is neither a namespace nor an alias of this document (an
            // undeclared `Self.` alias, say): resolve by the unique simple name.
            let prefix = String(name[..<dot])
            let simple = String(name[name.index(after: dot)...])
            guard prefix != "Edm", !localNamespaces.contains(prefix), !externalNamespaces.contains(prefix),
                  let candidates = simpleNames[simple], candidates.count == 1 else { return name }
            try report(error(.invalidAttribute, "Type name '\(name)' uses an undeclared namespace or alias; read as \(candidates[0]).\(simple)", node))
            return candidates[0] + "." + simple
        }
        guard !currentNamespace.isEmpty || simpleNames[name] != nil else { return name }
        let candidates = simpleNames[name] ?? []
        let namespace = candidates.count == 1 ? candidates[0] : currentNamespace
        try report(error(.invalidAttribute, "Type name '\(name)' is not namespace-qualified; read as \(namespace).\(name)", node))
        return namespace + "." + name
    }

    private mutating func typeReference(_ text: String, _ node: XMLNode) throws(MetadataError) -> TypeReference {
        guard var reference = TypeReference(parsing: text) else {
            throw error(.invalidAttribute, "'\(text)' is not a type name", node)
        }
        reference.name = qualify(reference.name)
        reference.name = try qualifyUnqualified(reference.name, node)
        return reference
    }

    private func facets(_ node: XMLNode) throws(MetadataError) -> Facets {
        var facets = Facets()
        if let nullable = node["Nullable"] {
            guard nullable == "true" || nullable == "false" else {
                throw error(.invalidAttribute, "Nullable must be true or false, not '\(nullable)'", node)
            }
            facets.nullable = nullable == "true"
        }
        if let maxLength = node["MaxLength"] {
            if maxLength.lowercased() == "max" {
                facets.maxLength = Int.max
            } else if let value = Int(maxLength), value >= 0 {
                facets.maxLength = value
            } else {
                throw error(.invalidAttribute, "MaxLength '\(maxLength)' is not a number or max", node)
            }
        }
        if let precision = node["Precision"] {
            guard let value = Int(precision), value >= 0 else {
                throw error(.invalidAttribute, "Precision '\(precision)' is not a number", node)
            }
            facets.precision = value
        }
        if let scale = node["Scale"] {
            if scale == "variable" || scale == "floating" {
                facets.scaleIsVariable = true
                facets.scaleIsFloating = scale == "floating"
            } else if let value = Int(scale), value >= 0 {
                facets.scale = value
            } else {
                throw error(.invalidAttribute, "Scale '\(scale)' is not a number, variable or floating", node)
            }
        }
        facets.srid = node["SRID"]
        if let unicode = node["Unicode"] { facets.unicode = unicode == "true" }
        facets.defaultValue = node["DefaultValue"]
        return facets
    }

    // MARK: Schema

    private mutating func readSchema(_ node: XMLNode) throws(MetadataError) -> Schema {
        let namespace = try required(node, "Namespace")
        currentNamespace = namespace
        defer { currentNamespace = "" }
        var schema = Schema(namespace: namespace, alias: node["Alias"])
        var names: Set<String> = []
        for child in node.children {
            if let name = child["Name"], ["EntityType", "ComplexType", "EnumType", "TypeDefinition", "Term", "EntityContainer", "Association"].contains(child.localName) {
                if strict && !names.insert(name).inserted {
                    throw error(.duplicateName, "The name \(name) is declared twice in schema \(namespace)", child)
                }
            }
            switch child.localName {
            case "EntityType": schema.entityTypes.append(try readEntityType(child, namespace: namespace, schema: &schema))
            case "ComplexType": schema.complexTypes.append(try readComplexType(child, namespace: namespace, schema: &schema))
            case "EnumType": schema.enumTypes.append(try readEnumType(child, namespace: namespace, schema: &schema))
            case "TypeDefinition":
                let name = try required(child, "Name")
                let underlying = qualify(try required(child, "UnderlyingType"))
                schema.typeDefinitions.append(TypeDefinition(namespace: namespace, name: name, underlyingType: underlying, facets: try facets(child)))
                positions["type:\(namespace).\(name)"] = child
                try readInlineAnnotations(child, target: "\(namespace).\(name)", into: &schema)
            case "Term":
                let name = try required(child, "Name")
                var term = Term(namespace: namespace, name: name, type: try typeReference(try required(child, "Type"), child))
                term.appliesTo = (child["AppliesTo"] ?? "").split(separator: " ").map(String.init)
                term.baseTerm = child["BaseTerm"].map(qualify)
                term.defaultValue = child["DefaultValue"]
                positions["term:\(namespace).\(name)"] = child
                schema.terms.append(term)
                try readInlineAnnotations(child, target: "\(namespace).\(name)", into: &schema)
            case "Function", "Action":
                let op = try readOperation(child, namespace: namespace, schema: &schema)
                if op.kind == .function { schema.functions.append(op) } else { schema.actions.append(op) }
            case "EntityContainer":
                schema.entityContainer = try readContainer(child, namespace: namespace, schema: &schema)
            case "Association":
                schema.associations.append(try readAssociation(child, namespace: namespace))
            case "Annotations":
                let target = try required(child, "Target")
                if strict { try checkAnnotationTarget(target, child) }
                let qualifier = child["Qualifier"]
                for annotation in child.children where annotation.localName == "Annotation" || annotation.localName == "ValueAnnotation" {
                    var read = try readAnnotation(annotation, target: qualifyTarget(target), into: &schema)
                    if read.qualifier == nil { read.qualifier = qualifier }
                    schema.annotations.append(read)
                }
            case "Annotation", "ValueAnnotation":
                schema.annotations.append(try readAnnotation(child, target: namespace, into: &schema))
            default:
                break
            }
        }
        try readSAPAttributes(node, target: namespace, into: &schema)
        return schema
    }

    private func qualifyTarget(_ target: String) -> String {
        // Qualify the leading name and the types inside an operation's parameter list.
        var result = ""
        var token = ""
        for character in target {
            if character == "/" || character == "(" || character == ")" || character == "," {
                result += qualify(token) + String(character)
                token = ""
            } else {
                token.append(character)
            }
        }
        return result + qualify(token)
    }

    private func checkAnnotationTarget(_ target: String, _ node: XMLNode) throws(MetadataError) {
        // QualifiedName [ "(" [ TypeName *( "," TypeName ) ] ")" ] *( "/" segment )
        var head = Substring(target)
        var rest = Substring("")
        if let slash = target.firstIndex(of: "/"), target.firstIndex(of: "(").map({ $0 > slash }) ?? true {
            head = target[..<slash]
            rest = target[target.index(after: slash)...]
        } else if let close = Self.matchingClose(target) {
            head = target[...close]
            let after = target[target.index(after: close)...]
            if let first = after.first {
                guard first == "/" else {
                    throw error(.schemaViolation, "Annotation target '\(target)' is malformed after the parameter list", node)
                }
                rest = after.dropFirst()
            }
        }
        func isQualified(_ text: Substring) -> Bool {
            let parts = text.split(separator: ".", omittingEmptySubsequences: false)
            return parts.count >= 2 && parts.allSatisfy { isIdentifier($0) }
        }
        if let open = head.firstIndex(of: "(") {
            guard head.hasSuffix(")"), isQualified(head[..<open]) else {
                throw error(.schemaViolation, "Annotation target '\(target)' has a malformed operation name", node)
            }
            let inner = head[head.index(after: open)..<head.index(before: head.endIndex)]
            if !inner.isEmpty {
                for parameter in inner.split(separator: ",", omittingEmptySubsequences: false) {
                    var typeName = parameter
                    if typeName.hasPrefix("Collection(") && typeName.hasSuffix(")") {
                        typeName = typeName.dropFirst("Collection(".count).dropLast()
                    }
                    guard isQualified(typeName) else {
                        throw error(.schemaViolation, "Annotation target '\(target)' has an empty or malformed parameter type '\(parameter)'", node)
                    }
                }
            }
        } else {
            guard isQualified(head) else {
                throw error(.schemaViolation, "Annotation target '\(target)' does not start with a qualified name", node)
            }
        }
        if !rest.isEmpty {
            for segment in rest.split(separator: "/", omittingEmptySubsequences: false) {
                var name = segment
                if name.hasPrefix("@") { name = name.dropFirst() }
                if let hash = name.firstIndex(of: "#") { name = name[..<hash] }
                guard !name.isEmpty, name.split(separator: ".", omittingEmptySubsequences: false).allSatisfy({ isIdentifier($0) || $0 == "$ReturnType" }) else {
                    throw error(.schemaViolation, "Annotation target '\(target)' has a malformed path segment '\(segment)'", node)
                }
            }
        }
    }

    /// Whether a `Parameter` element carries `Core.OptionalParameter` (4.01: the caller may
    /// leave it out, nullable or not), by the usual alias or the full namespace.
    static func isOptionalParameter(_ parameter: XMLNode) -> Bool {
        parameter.children.contains { child in
            guard child.localName == "Annotation", let term = child["Term"] else { return false }
            return term == "Core.OptionalParameter" || term == "Org.OData.Core.V1.OptionalParameter"
        }
    }

    /// The index of the parenthesis closing the first `(` in `text`.
    private static func matchingClose(_ text: String) -> String.Index? {
        var depth = 0
        var index = text.startIndex
        while index < text.endIndex {
            if text[index] == "(" { depth += 1 }
            if text[index] == ")" {
                depth -= 1
                if depth == 0 { return index }
            }
            index = text.index(after: index)
        }
        return nil
    }

    private func isIdentifier(_ text: Substring) -> Bool {
        guard let first = text.unicodeScalars.first, first == "_" || first.properties.isAlphabetic else { return false }
        return text.unicodeScalars.allSatisfy { $0 == "_" || $0.properties.isAlphabetic || $0.properties.numericType != nil }
    }

    // MARK: Types

    private mutating func readStructuralMembers(_ node: XMLNode, owner: String, schema: inout Schema)
        throws(MetadataError) -> (properties: [Property], navigation: [NavigationProperty]) {
        var properties: [Property] = []
        var navigation: [NavigationProperty] = []
        var names: Set<String> = []
        for child in node.children {
            switch child.localName {
            case "Property":
                let name = try required(child, "Name")
                if strict && !names.insert(name).inserted {
                    throw error(.duplicateName, "Property \(name) is declared twice", child)
                }
                var property = Property(name: name, type: try typeReference(try required(child, "Type"), child), facets: try facets(child))
                property.concurrencyFixed = child["ConcurrencyMode"] == "Fixed"
                positions["property:\(owner)/\(name)"] = child
                properties.append(property)
                try readInlineAnnotations(child, target: "\(owner)/\(name)", into: &schema)
                try readSAPAttributes(child, target: "\(owner)/\(name)", into: &schema)
            case "NavigationProperty":
                let name = try required(child, "Name")
                if strict && !names.insert(name).inserted {
                    throw error(.duplicateName, "Navigation property \(name) is declared twice", child)
                }
                var nav: NavigationProperty
                if let typeText = child["Type"] {
                    nav = NavigationProperty(name: name, type: try typeReference(typeText, child))
                    if let nullable = child["Nullable"] { nav.nullable = nullable != "false" }
                    nav.partner = child["Partner"]
                    nav.containsTarget = child["ContainsTarget"] == "true"
                    for constraint in child.children(named: "ReferentialConstraint") {
                        nav.referentialConstraints.append(ReferentialConstraint(
                            property: try required(constraint, "Property"),
                            referencedProperty: try required(constraint, "ReferencedProperty")))
                    }
                    if let onDelete = child.child(named: "OnDelete") {
                        let action = try required(onDelete, "Action")
                        guard let value = OnDeleteAction(rawValue: action) else {
                            throw error(.invalidAttribute, "Unknown OnDelete action '\(action)'", onDelete)
                        }
                        nav.onDelete = value
                    }
                } else if let relationship = child["Relationship"] {
                    // V2: resolved against the association after all schemas are read.
                    nav = NavigationProperty(name: name, type: TypeReference(name: ""))
                    nav.relationship = qualify(relationship)
                    nav.fromRole = try required(child, "FromRole")
                    nav.toRole = try required(child, "ToRole")
                } else {
                    try report(error(.missingAttribute, "NavigationProperty needs a Type (V4) or a Relationship (V2); it was left out", child))
                    continue
                }
                positions["navigation:\(owner)/\(name)"] = child
                navigation.append(nav)
                try readInlineAnnotations(child, target: "\(owner)/\(name)", into: &schema)
                try readSAPAttributes(child, target: "\(owner)/\(name)", into: &schema)
            default:
                break
            }
        }
        return (properties, navigation)
    }

    private mutating func readEntityType(_ node: XMLNode, namespace: String, schema: inout Schema) throws(MetadataError) -> EntityType {
        let name = try required(node, "Name")
        var type = EntityType(namespace: namespace, name: name)
        if let base = node["BaseType"] { type.baseType = try qualifyUnqualified(qualify(base), node) }
        type.isAbstract = node["Abstract"] == "true"
        type.isOpenType = node["OpenType"] == "true"
        type.hasStream = node["HasStream"] == "true" || node.attribute("HasStream", namespace: CSDLNamespace.metadataV2) == "true"
        let keys = node.children(named: "Key")
        if strict && keys.count > 1 {
            throw error(.schemaViolation, "Entity type \(name) declares \(keys.count) Key elements; at most one is allowed", keys[1])
        }
        for key in keys {
            for ref in key.children(named: "PropertyRef") {
                type.key.append(PropertyRef(name: try required(ref, "Name"), alias: ref["Alias"]))
            }
        }
        positions["type:\(type.qualifiedName)"] = node
        let members = try readStructuralMembers(node, owner: type.qualifiedName, schema: &schema)
        type.properties = members.properties
        type.navigationProperties = members.navigation
        try readInlineAnnotations(node, target: type.qualifiedName, into: &schema)
        try readSAPAttributes(node, target: type.qualifiedName, into: &schema)
        return type
    }

    private mutating func readComplexType(_ node: XMLNode, namespace: String, schema: inout Schema) throws(MetadataError) -> ComplexType {
        let name = try required(node, "Name")
        var type = ComplexType(namespace: namespace, name: name)
        if let base = node["BaseType"] { type.baseType = try qualifyUnqualified(qualify(base), node) }
        type.isAbstract = node["Abstract"] == "true"
        type.isOpenType = node["OpenType"] == "true"
        positions["type:\(type.qualifiedName)"] = node
        let members = try readStructuralMembers(node, owner: type.qualifiedName, schema: &schema)
        type.properties = members.properties
        type.navigationProperties = members.navigation
        try readInlineAnnotations(node, target: type.qualifiedName, into: &schema)
        try readSAPAttributes(node, target: type.qualifiedName, into: &schema)
        return type
    }

    private mutating func readEnumType(_ node: XMLNode, namespace: String, schema: inout Schema) throws(MetadataError) -> EnumType {
        let name = try required(node, "Name")
        var type = EnumType(namespace: namespace, name: name)
        if let underlying = node["UnderlyingType"] {
            guard let primitive = PrimitiveType(qualifiedName: qualify(underlying)), primitive.isIntegral else {
                throw error(.invalidAttribute, "Enum underlying type must be Edm.Byte, SByte, Int16, Int32 or Int64, not \(underlying)", node)
            }
            type.underlyingType = primitive
        }
        type.isFlags = node["IsFlags"] == "true"
        var next: Int64 = type.isFlags ? 1 : 0
        for member in node.children(named: "Member") {
            let memberName = try required(member, "Name")
            var value = next
            if let text = member["Value"] {
                guard let parsed = Int64(text) else {
                    throw error(.invalidAttribute, "Enum member value '\(text)' is not an integer", member)
                }
                value = parsed
            }
            type.members.append(.init(name: memberName, value: value))
            next = value &+ 1
            try readInlineAnnotations(member, target: "\(namespace).\(name)/\(memberName)", into: &schema)
        }
        positions["type:\(type.qualifiedName)"] = node
        try readInlineAnnotations(node, target: type.qualifiedName, into: &schema)
        return type
    }

    private mutating func readOperation(_ node: XMLNode, namespace: String, schema: inout Schema) throws(MetadataError) -> Operation {
        let name = try required(node, "Name")
        var op = Operation(kind: node.localName == "Function" ? .function : .action, namespace: namespace, name: name)
        op.isBound = node["IsBound"] == "true"
        op.isComposable = node["IsComposable"] == "true"
        op.entitySetPath = node["EntitySetPath"]
        for parameter in node.children(named: "Parameter") {
            var p = Parameter(name: try required(parameter, "Name"), type: try typeReference(try required(parameter, "Type"), parameter), facets: try facets(parameter))
            p.mode = parameter["Mode"] ?? (Self.isOptionalParameter(parameter) ? Parameter.optionalMode : nil)
            op.parameters.append(p)
        }
        if let returnType = node.child(named: "ReturnType") {
            op.returnType = try typeReference(try required(returnType, "Type"), returnType)
            op.returnNullable = returnType["Nullable"] != "false"
        } else if let returnType = node["ReturnType"] {
            op.returnType = try typeReference(returnType, node)
        }
        if op.kind == .function && op.returnType == nil && strict {
            throw error(.schemaViolation, "Function \(name) has no ReturnType", node)
        }
        if op.isBound && op.parameters.isEmpty {
            throw error(.schemaViolation, "Bound operation \(name) has no binding parameter", node)
        }
        positions["operation:\(op.qualifiedName)"] = node
        let signature = op.parameters.map(\.type.description).joined(separator: ",")
        try readInlineAnnotations(node, target: "\(op.qualifiedName)(\(op.isBound ? signature : ""))", into: &schema)
        return op
    }

    private mutating func readContainer(_ node: XMLNode, namespace: String, schema: inout Schema) throws(MetadataError) -> EntityContainer {
        let name = try required(node, "Name")
        var container = EntityContainer(namespace: namespace, name: name)
        container.extends = node["Extends"].map(qualify)
        if let isDefault = node.attribute("IsDefaultEntityContainer", namespace: CSDLNamespace.metadataV2) {
            container.isDefault = isDefault == "true"
        }
        let containerTarget = "\(namespace).\(name)"
        for child in node.children {
            switch child.localName {
            case "EntitySet":
                let setName = try required(child, "Name")
                var set = EntitySet(name: setName, entityType: try qualifyUnqualified(qualify(try required(child, "EntityType")), child))
                set.includeInServiceDocument = child["IncludeInServiceDocument"] != "false"
                for binding in child.children(named: "NavigationPropertyBinding") {
                    set.navigationPropertyBindings.append(.init(path: try required(binding, "Path"), target: try required(binding, "Target")))
                }
                positions["set:\(setName)"] = child
                container.entitySets.append(set)
                try readInlineAnnotations(child, target: "\(containerTarget)/\(setName)", into: &schema)
                try readSAPAttributes(child, target: "\(containerTarget)/\(setName)", into: &schema)
            case "Singleton":
                let singletonName = try required(child, "Name")
                var singleton = Singleton(name: singletonName, type: try qualifyUnqualified(qualify(try required(child, "Type")), child))
                for binding in child.children(named: "NavigationPropertyBinding") {
                    singleton.navigationPropertyBindings.append(.init(path: try required(binding, "Path"), target: try required(binding, "Target")))
                }
                positions["singleton:\(singletonName)"] = child
                container.singletons.append(singleton)
                try readInlineAnnotations(child, target: "\(containerTarget)/\(singletonName)", into: &schema)
            case "FunctionImport":
                let importName = try required(child, "Name")
                var item = FunctionImport(name: importName)
                item.entitySet = child["EntitySet"]
                if version.isLegacy {
                    item.httpMethod = child.attribute("HttpMethod", namespace: CSDLNamespace.metadataV2) ?? child["HttpMethod"]
                    if let returnType = child["ReturnType"] {
                        item.returnType = try typeReference(returnType, child)
                    } else if let returnType = child.child(named: "ReturnType"), let type = returnType["Type"] {
                        item.returnType = try typeReference(type, returnType)
                    }
                    for parameter in child.children(named: "Parameter") {
                        var p = Parameter(name: try required(parameter, "Name"), type: try typeReference(try required(parameter, "Type"), parameter), facets: try facets(parameter))
                        p.mode = parameter["Mode"] ?? (Self.isOptionalParameter(parameter) ? Parameter.optionalMode : nil)
                        item.parameters.append(p)
                    }
                } else {
                    item.function = qualify(try required(child, "Function"))
                    item.includeInServiceDocument = child["IncludeInServiceDocument"] == "true"
                }
                positions["functionImport:\(importName)"] = child
                container.functionImports.append(item)
                try readInlineAnnotations(child, target: "\(containerTarget)/\(importName)", into: &schema)
                try readSAPAttributes(child, target: "\(containerTarget)/\(importName)", into: &schema)
            case "ActionImport":
                let importName = try required(child, "Name")
                var item = ActionImport(name: importName, action: qualify(try required(child, "Action")))
                item.entitySet = child["EntitySet"]
                positions["actionImport:\(importName)"] = child
                container.actionImports.append(item)
                try readInlineAnnotations(child, target: "\(containerTarget)/\(importName)", into: &schema)
            case "AssociationSet":
                positions["associationSet:\(containerTarget)/\(try required(child, "Name"))"] = child
            default:
                break
            }
        }
        positions["container:\(containerTarget)"] = node
        containerNodes[containerTarget] = node
        try readInlineAnnotations(node, target: containerTarget, into: &schema)
        try readSAPAttributes(node, target: containerTarget, into: &schema)
        return container
    }

    private var containerNodes: [String: XMLNode] = [:]
    private var warnings: [MetadataError] = []
    /// Simple type name → namespaces that declare it.
    private var simpleNames: [String: [String]] = [:]
    private var currentNamespace = ""

    /// In strict mode a problem is an error; otherwise it is recorded as a warning and the
    /// element is kept (or dropped, where the model cannot hold it).
    private mutating func report(_ problem: MetadataError) throws(MetadataError) {
        if strict { throw problem }
        warnings.append(problem)
    }

    private mutating func readAssociation(_ node: XMLNode, namespace: String) throws(MetadataError) -> Association {
        let name = try required(node, "Name")
        var ends: [Association.End] = []
        for end in node.children(named: "End") {
            var item = Association.End(role: try required(end, "Role"), type: try qualifyUnqualified(qualify(try required(end, "Type")), end), multiplicity: try required(end, "Multiplicity"))
            guard ["1", "0..1", "*"].contains(item.multiplicity) else {
                throw error(.invalidAttribute, "Multiplicity must be 1, 0..1 or *, not '\(item.multiplicity)'", end)
            }
            if let onDelete = end.child(named: "OnDelete"), let action = onDelete["Action"] {
                item.onDelete = OnDeleteAction(rawValue: action) ?? OnDeleteAction.none
            }
            ends.append(item)
        }
        guard ends.count == 2 else {
            throw error(.schemaViolation, "Association \(name) must have two End elements, not \(ends.count)", node)
        }
        var association = Association(namespace: namespace, name: name, ends: ends)
        if let constraint = node.child(named: "ReferentialConstraint") {
            guard let principal = constraint.child(named: "Principal"), let dependent = constraint.child(named: "Dependent") else {
                throw error(.schemaViolation, "ReferentialConstraint needs Principal and Dependent", constraint)
            }
            association.principalRole = try required(principal, "Role")
            association.dependentRole = try required(dependent, "Role")
            let principalRefs = principal.children(named: "PropertyRef")
            let dependentRefs = dependent.children(named: "PropertyRef")
            guard principalRefs.count == dependentRefs.count else {
                throw error(.schemaViolation, "Principal and Dependent name different numbers of properties", constraint)
            }
            for (p, d) in zip(principalRefs, dependentRefs) {
                association.constraints.append(ReferentialConstraint(property: try required(d, "Name"), referencedProperty: try required(p, "Name")))
            }
        }
        positions["association:\(association.qualifiedName)"] = node
        return association
    }

    // MARK: Annotations

    private func readInlineAnnotations(_ node: XMLNode, target: String, into schema: inout Schema) throws(MetadataError) {
        for child in node.children where child.localName == "Annotation" || child.localName == "ValueAnnotation" {
            schema.annotations.append(try readAnnotation(child, target: target, into: &schema))
        }
    }

    private func readSAPAttributes(_ node: XMLNode, target: String, into schema: inout Schema) throws(MetadataError) {
        for attribute in node.attributes where attribute.namespaceURI == CSDLNamespace.sap {
            schema.annotations.append(Annotation(term: "sap:" + attribute.localName, target: target,
                                                 value: .constant(kind: "String", value: attribute.value)))
        }
    }

    private static let constantKinds: Set<String> = [
        "Binary", "Bool", "Date", "DateTimeOffset", "Decimal", "Duration", "EnumMember", "Float", "Guid", "Int", "String", "TimeOfDay",
        "DateTime", "Time",
    ]
    private static let pathKinds: Set<String> = [
        "Path", "PropertyPath", "NavigationPropertyPath", "AnnotationPath", "ModelElementPath", "AnyPropertyPath",
    ]

    private func readAnnotation(_ node: XMLNode, target: String, into schema: inout Schema) throws(MetadataError) -> Annotation {
        let term = qualify(try required(node, "Term"))
        var annotation = Annotation(term: term, qualifier: node["Qualifier"], target: target, value: nil)
        annotation.value = try attributeValue(node)
        if annotation.value == nil, let child = node.children.first(where: { $0.localName != "Annotation" }) {
            annotation.value = try expression(child)
        }
        // Annotations on this annotation.
        try readInlineAnnotations(node, target: target + "/@" + term, into: &schema)
        return annotation
    }

    private func attributeValue(_ node: XMLNode) throws(MetadataError) -> AnnotationValue? {
        for attribute in node.attributes where attribute.namespaceURI == nil {
            if Self.constantKinds.contains(attribute.localName) {
                return .constant(kind: attribute.localName, value: attribute.value)
            }
            if Self.pathKinds.contains(attribute.localName) {
                return .path(kind: attribute.localName, value: attribute.value)
            }
        }
        return nil
    }

    private func expression(_ node: XMLNode) throws(MetadataError) -> AnnotationValue {
        let name = node.localName
        if Self.constantKinds.contains(name) { return .constant(kind: name, value: node.text.trimmingCharacters(in: .whitespacesAndNewlines)) }
        if Self.pathKinds.contains(name) { return .path(kind: name, value: node.text.trimmingCharacters(in: .whitespacesAndNewlines)) }
        switch name {
        case "Collection":
            var items: [AnnotationValue] = []
            for child in node.children where child.localName != "Annotation" { items.append(try expression(child)) }
            return .collection(items)
        case "Record":
            var properties: [AnnotationValue.PropertyValue] = []
            for child in node.children(named: "PropertyValue") {
                let property = try required(child, "Property")
                var value = try attributeValue(child)
                if value == nil, let inner = child.children.first(where: { $0.localName != "Annotation" }) {
                    value = try expression(inner)
                }
                properties.append(.init(property: property, value: value))
            }
            return .record(type: node["Type"].map(qualify), properties: properties)
        case "Null":
            return .expression(name: "Null", attributes: [:], operands: [])
        default:
            var attributes: [String: String] = [:]
            for attribute in node.attributes where attribute.namespaceURI == nil { attributes[attribute.localName] = attribute.value }
            var operands: [AnnotationValue] = []
            if let inline = try attributeValue(node), name != "LabeledElement" || node.children.isEmpty { operands.append(inline) }
            for child in node.children where child.localName != "Annotation" { operands.append(try expression(child)) }
            return .expression(name: name, attributes: attributes, operands: operands)
        }
    }

    // MARK: V2 associations

    private func resolveAssociations(_ model: inout Model) throws(MetadataError) {
        var associations: [String: Association] = [:]
        for schema in model.schemas {
            for association in schema.associations { associations[association.qualifiedName] = association }
        }
        for s in model.schemas.indices {
            for t in model.schemas[s].entityTypes.indices {
                let owner = model.schemas[s].entityTypes[t].qualifiedName
                for n in model.schemas[s].entityTypes[t].navigationProperties.indices {
                    var nav = model.schemas[s].entityTypes[t].navigationProperties[n]
                    guard let relationship = nav.relationship else { continue }
                    let node = positions["navigation:\(owner)/\(nav.name)"]
                    guard let association = associations[relationship] else {
                        throw positioned(.brokenReference, "Navigation property \(nav.name) refers to unknown association \(relationship)", node)
                    }
                    guard let to = association.ends.first(where: { $0.role == nav.toRole }),
                          let from = association.ends.first(where: { $0.role == nav.fromRole }) else {
                        throw positioned(.brokenReference, "Navigation property \(nav.name) names a role that association \(relationship) does not have", node)
                    }
                    nav.type = TypeReference(name: to.type, isCollection: to.multiplicity == "*")
                    nav.nullable = to.multiplicity != "1"
                    if association.dependentRole == from.role {
                        nav.referentialConstraints = association.constraints
                    }
                    if let onDelete = from.onDelete { nav.onDelete = onDelete }
                    // The partner is the navigation property of the other end that uses the same
                    // association in the opposite direction.
                    if let target = model.entityType(to.type) {
                        let candidates = model.entityTypeChain(target).flatMap(\.navigationProperties)
                        nav.partner = candidates.first { $0.relationship == relationship && $0.fromRole == nav.toRole && $0.toRole == nav.fromRole }?.name
                    }
                    model.schemas[s].entityTypes[t].navigationProperties[n] = nav
                }
            }
        }
        model.rebuildIndex()
        // Association sets become navigation property bindings.
        for s in model.schemas.indices {
            guard let container = model.schemas[s].entityContainer else { continue }
            let containerTarget = container.qualifiedName
            guard let containerNode = containerNodes[containerTarget] else { continue }
            for setNode in containerNode.children(named: "AssociationSet") {
                let assocName = qualify(try required(setNode, "Association"))
                guard let association = associations[assocName] else {
                    throw error(.brokenReference, "AssociationSet refers to unknown association \(assocName)", setNode)
                }
                var ends: [(role: String, set: String)] = []
                for end in setNode.children(named: "End") {
                    ends.append((role: end["Role"] ?? "", set: try required(end, "EntitySet")))
                }
                guard ends.count == 2 else {
                    throw error(.schemaViolation, "AssociationSet needs two End elements", setNode)
                }
                // Roles may be omitted; then they follow the association's order.
                for i in 0..<2 where ends[i].role.isEmpty { ends[i].role = association.ends[i].role }
                for (from, to) in [(ends[0], ends[1]), (ends[1], ends[0])] {
                    guard let setIndex = model.schemas[s].entityContainer?.entitySets.firstIndex(where: { $0.name == from.set }) else {
                        throw error(.brokenReference, "AssociationSet end refers to unknown entity set \(from.set)", setNode)
                    }
                    guard model.schemas[s].entityContainer?.entitySets.contains(where: { $0.name == to.set }) == true else {
                        throw error(.brokenReference, "AssociationSet end refers to unknown entity set \(to.set)", setNode)
                    }
                    guard association.ends.contains(where: { $0.role == from.role }) else {
                        throw error(.brokenReference, "AssociationSet end names role \(from.role), which association \(assocName) does not have", setNode)
                    }
                    guard let setType = model.schemas[s].entityContainer?.entitySets[setIndex].entityType else { continue }
                    for type in allEntityTypes(model) where model.isType(type.qualifiedName, derivedFrom: setType) {
                        for nav in type.navigationProperties where nav.relationship == assocName && nav.fromRole == from.role {
                            let path = type.qualifiedName == setType ? nav.name : "\(type.qualifiedName)/\(nav.name)"
                            let binding = NavigationPropertyBinding(path: path, target: to.set)
                            if model.schemas[s].entityContainer?.entitySets[setIndex].navigationPropertyBindings.contains(binding) == false {
                                model.schemas[s].entityContainer?.entitySets[setIndex].navigationPropertyBindings.append(binding)
                            }
                        }
                    }
                }
            }
        }
        model.rebuildIndex()
    }

    private func allEntityTypes(_ model: Model) -> [EntityType] { model.schemas.flatMap(\.entityTypes) }

    private func positioned(_ code: MetadataError.Code, _ message: String, _ node: XMLNode?) -> MetadataError {
        MetadataError(code, message, line: node?.line ?? 0, column: node?.column ?? 0, elementPath: node?.path ?? "")
    }

    // MARK: Reference checks

    /// Whether a qualified type name is known: primitive, defined here, or in a namespace
    /// that a reference includes (whose document is not loaded).
    private func isKnownType(_ name: String, _ model: Model) -> Bool {
        if model.typeKind(name) != nil { return true }
        guard let dot = name.lastIndex(of: ".") else { return false }
        let namespace = String(name[..<dot])
        return externalNamespaces.contains(namespace)
    }

    private mutating func check(_ model: Model) throws(MetadataError) {
        for schema in model.schemas {
            for type in schema.entityTypes {
                let node = positions["type:\(type.qualifiedName)"]
                if let base = type.baseType, model.entityType(base) == nil, !isExternal(base) {
                    throw positioned(.unknownType, "Entity type \(type.name) derives from unknown entity type \(base)", node)
                }
                try checkMembers(owner: type.qualifiedName, properties: type.properties, navigation: type.navigationProperties, model)
                let chain = model.entityTypeChain(type)
                if chain.count > 1, chain.dropFirst().contains(where: { $0.qualifiedName == type.qualifiedName }) {
                    throw positioned(.schemaViolation, "Entity type \(type.name) inherits from itself", node)
                }
                // A non-abstract entity type needs a key, its own or its base type's (CSDL 4.01
                // §8.3). A base type outside this document may carry it.
                if strict, !type.isAbstract, model.key(of: type).isEmpty,
                   !chain.contains(where: { $0.baseType.map(isExternal) ?? false }) {
                    throw positioned(.schemaViolation, "Entity type \(type.name) has no key: a non-abstract entity type "
                                     + "needs one, declared on it or on a base type", node)
                }
                for ref in type.key {
                    if resolvePropertyPath(ref.name, in: type.qualifiedName, model) == nil {
                        try report(positioned(.brokenReference, "Key property \(ref.name) is not a property of \(type.name)", node))
                    }
                    if ref.name.contains("/") && ref.alias == nil && strict {
                        throw positioned(.schemaViolation, "Key property path \(ref.name) needs an Alias", node)
                    }
                }
            }
            for type in schema.complexTypes {
                if let base = type.baseType, model.complexType(base) == nil, !isExternal(base) {
                    throw positioned(.unknownType, "Complex type \(type.name) derives from unknown complex type \(base)", positions["type:\(type.qualifiedName)"])
                }
                try checkMembers(owner: type.qualifiedName, properties: type.properties, navigation: type.navigationProperties, model)
            }
            for definition in schema.typeDefinitions where PrimitiveType(qualifiedName: definition.underlyingType) == nil {
                throw positioned(.unknownType, "Type definition \(definition.name) has non-primitive underlying type \(definition.underlyingType)",
                                 positions["type:\(definition.qualifiedName)"])
            }
            for op in schema.functions + schema.actions {
                let node = positions["operation:\(op.qualifiedName)"]
                for parameter in op.parameters where !isKnownType(parameter.type.name, model) {
                    throw positioned(.unknownType, "Parameter \(parameter.name) of \(op.name) has unknown type \(parameter.type.name)", node)
                }
                if let returnType = op.returnType, !isKnownType(returnType.name, model) {
                    throw positioned(.unknownType, "\(op.name) returns unknown type \(returnType.name)", node)
                }
            }
            for term in schema.terms where !isKnownType(term.type.name, model) {
                // Vocabulary types often come from documents that are not referenced; a term
                // does not shape data, so this is only reported.
                try report(positioned(.unknownType, "Term \(term.name) has unknown type \(term.type.name)", positions["term:\(term.qualifiedName)"]))
            }
            if let container = schema.entityContainer {
                try checkContainer(container, model)
            }
        }
    }

    private func isExternal(_ name: String) -> Bool {
        guard let dot = name.lastIndex(of: ".") else { return false }
        return externalNamespaces.contains(String(name[..<dot]))
    }

    private func resolvePropertyPath(_ path: String, in typeName: String, _ model: Model) -> Property? {
        var current = typeName
        var found: Property?
        for segment in path.split(separator: "/") {
            guard let property = model.property(String(segment), ofStructuredType: current) else { return nil }
            found = property
            current = property.type.name
        }
        return found
    }

    private mutating func checkMembers(owner: String, properties: [Property], navigation: [NavigationProperty], _ model: Model) throws(MetadataError) {
        for property in properties where !isKnownType(property.type.name, model) {
            throw positioned(.unknownType, "Property \(property.name) has unknown type \(property.type.name)", positions["property:\(owner)/\(property.name)"])
        }
        for nav in navigation {
            let node = positions["navigation:\(owner)/\(nav.name)"]
            if model.entityType(nav.type.name) == nil {
                if let kind = model.typeKind(nav.type.name) {
                    if strict || kind != .abstract {
                        throw positioned(.schemaViolation, "Navigation property \(nav.name) must have an entity type, not \(nav.type.name)", node)
                    }
                } else if !isExternal(nav.type.name) {
                    throw positioned(.unknownType, "Navigation property \(nav.name) has unknown type \(nav.type.name)", node)
                }
                continue
            }
            if let partner = nav.partner, !model.version.isLegacy {
                // A partner may be a path through a complex property (`Address/Owner`); check plain names.
                if !partner.contains("/"), model.navigationProperty(partner, ofStructuredType: nav.type.name) == nil {
                    try report(positioned(.brokenReference, "Partner \(partner) of \(nav.name) is not a navigation property of \(nav.type.name)", node))
                }
            }
            for constraint in nav.referentialConstraints {
                if resolvePropertyPath(constraint.property, in: owner, model) == nil {
                    try report(positioned(.brokenReference, "Referential constraint property \(constraint.property) is not a property of \(owner)", node))
                }
                if resolvePropertyPath(constraint.referencedProperty, in: nav.type.name, model) == nil {
                    try report(positioned(.brokenReference, "Referenced property \(constraint.referencedProperty) is not a property of \(nav.type.name)", node))
                }
            }
        }
    }

    private mutating func checkContainer(_ container: EntityContainer, _ model: Model) throws(MetadataError) {
        for set in container.entitySets {
            let node = positions["set:\(set.name)"]
            if model.entityType(set.entityType) == nil && !isExternal(set.entityType) {
                throw positioned(.unknownType, "Entity set \(set.name) has unknown entity type \(set.entityType)", node)
            }
            for binding in set.navigationPropertyBindings where !binding.target.contains("/") && !binding.target.contains(".") {
                if model.entitySet(binding.target) == nil && model.singleton(binding.target) == nil {
                    try report(positioned(.brokenReference, "Binding \(binding.path) of \(set.name) targets unknown entity set \(binding.target)", node))
                }
            }
        }
        for singleton in container.singletons where model.entityType(singleton.type) == nil && !isExternal(singleton.type) {
            throw positioned(.unknownType, "Singleton \(singleton.name) has unknown entity type \(singleton.type)", positions["singleton:\(singleton.name)"])
        }
        for item in container.functionImports {
            let node = positions["functionImport:\(item.name)"]
            if let function = item.function, model.functions(function).isEmpty, !isExternal(function) {
                throw positioned(.brokenReference, "Function import \(item.name) refers to unknown function \(function)", node)
            }
            if let returnType = item.returnType, !isKnownType(returnType.name, model) {
                throw positioned(.unknownType, "Function import \(item.name) returns unknown type \(returnType.name)", node)
            }
            if let set = item.entitySet, !set.contains("/"), model.entitySet(set) == nil {
                throw positioned(.brokenReference, "Function import \(item.name) refers to unknown entity set \(set)", node)
            }
        }
        for item in container.actionImports where model.actions(item.action).isEmpty && !isExternal(item.action) {
            throw positioned(.brokenReference, "Action import \(item.name) refers to unknown action \(item.action)", positions["actionImport:\(item.name)"])
        }
    }
}
