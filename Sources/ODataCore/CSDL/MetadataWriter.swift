/// Writes a ``Model`` as CSDL XML: V4 (`edmx` 4.0) or V2 (EDMX 1.0, with navigation properties
/// turned back into associations and association sets). Annotations are not written.
public struct MetadataWriter: Sendable {
    public init() {}

    static func escape(_ s: String) -> String {
        var out = ""
        for c in s {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            default: out.append(c)
            }
        }
        return out
    }

    private func attributes(_ pairs: [(String, String?)]) -> String {
        pairs.compactMap { name, value in value.map { " \(name)=\"\(Self.escape($0))\"" } }.joined()
    }

    private func facets(_ f: Facets, nullable: Bool = true) -> [(String, String?)] {
        [("Nullable", f.nullable ? nil : "false"),
         ("MaxLength", f.maxLength.map { $0 == Int.max ? "max" : String($0) }),
         ("Precision", f.precision.map(String.init)),
         ("Scale", f.scaleIsFloating ? "floating" : f.scaleIsVariable ? "variable" : f.scale.map(String.init)),
         ("SRID", f.srid), ("DefaultValue", f.defaultValue)]
    }

    // MARK: V4

    /// CSDL XML 4.0 (`Version="4.01"` for a 4.01 model).
    public func v4(_ model: Model) -> String {
        var xml = #"<?xml version="1.0" encoding="utf-8"?>"# + "\n"
        let version = model.version == .v401 ? "4.01" : "4.0"
        xml += #"<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version=""#
        xml += version + #""><edmx:DataServices>"#
        for schema in model.schemas {
            xml += "<Schema\(attributes([("Namespace", schema.namespace)])) xmlns=\"http://docs.oasis-open.org/odata/ns/edm\">"
            for type in schema.enumTypes {
                xml += "<EnumType\(attributes([("Name", type.name), ("UnderlyingType", type.underlyingType.rawValue), ("IsFlags", type.isFlags ? "true" : nil)]))>"
                for member in type.members { xml += "<Member\(attributes([("Name", member.name), ("Value", String(member.value))]))/>" }
                xml += "</EnumType>"
            }
            for type in schema.typeDefinitions {
                xml += "<TypeDefinition\(attributes([("Name", type.name), ("UnderlyingType", type.underlyingType)] + facets(type.facets)))/>"
            }
            for type in schema.complexTypes {
                xml += "<ComplexType\(attributes([("Name", type.name), ("BaseType", type.baseType), ("Abstract", type.isAbstract ? "true" : nil), ("OpenType", type.isOpenType ? "true" : nil)]))>"
                xml += properties(type.properties) + navigation(type.navigationProperties)
                xml += "</ComplexType>"
            }
            for type in schema.entityTypes {
                xml += "<EntityType\(attributes([("Name", type.name), ("BaseType", type.baseType), ("Abstract", type.isAbstract ? "true" : nil), ("OpenType", type.isOpenType ? "true" : nil), ("HasStream", type.hasStream ? "true" : nil)]))>"
                if !type.key.isEmpty {
                    xml += "<Key>" + type.key.map { "<PropertyRef\(attributes([("Name", $0.name), ("Alias", $0.alias)]))/>" }.joined() + "</Key>"
                }
                xml += properties(type.properties) + navigation(type.navigationProperties)
                xml += "</EntityType>"
            }
            for op in schema.functions + schema.actions {
                let element = op.kind == .function ? "Function" : "Action"
                xml += "<\(element)\(attributes([("Name", op.name), ("IsBound", op.isBound ? "true" : nil), ("IsComposable", op.isComposable ? "true" : nil), ("EntitySetPath", op.entitySetPath)]))>"
                for parameter in op.parameters {
                    let tag = "<Parameter\(attributes([("Name", parameter.name), ("Type", parameter.type.description)] + facets(parameter.facets)))"
                    xml += parameter.mode == Parameter.optionalMode ? tag + "><Annotation Term=\"Org.OData.Core.V1.OptionalParameter\"/></Parameter>" : tag + "/>"
                }
                if let returnType = op.returnType {
                    xml += "<ReturnType\(attributes([("Type", returnType.description), ("Nullable", op.returnNullable ? nil : "false")]))/>"
                }
                xml += "</\(element)>"
            }
            if let container = schema.entityContainer {
                xml += "<EntityContainer\(attributes([("Name", container.name)]))>"
                for set in container.entitySets {
                    xml += "<EntitySet\(attributes([("Name", set.name), ("EntityType", set.entityType)]))>"
                    for binding in set.navigationPropertyBindings {
                        xml += "<NavigationPropertyBinding\(attributes([("Path", binding.path), ("Target", binding.target)]))/>"
                    }
                    xml += "</EntitySet>"
                }
                for singleton in container.singletons {
                    xml += "<Singleton\(attributes([("Name", singleton.name), ("Type", singleton.type)]))/>"
                }
                for item in container.functionImports {
                    xml += "<FunctionImport\(attributes([("Name", item.name), ("Function", item.function ?? "\(schema.namespace).\(item.name)"), ("EntitySet", item.entitySet), ("IncludeInServiceDocument", item.includeInServiceDocument ? "true" : nil)]))/>"
                }
                for item in container.actionImports {
                    xml += "<ActionImport\(attributes([("Name", item.name), ("Action", item.action), ("EntitySet", item.entitySet)]))/>"
                }
                xml += "</EntityContainer>"
            }
            xml += "</Schema>"
        }
        return xml + "</edmx:DataServices></edmx:Edmx>"
    }

    private func properties(_ properties: [Property]) -> String {
        properties.map { p in "<Property\(attributes([("Name", p.name), ("Type", p.type.description)] + facets(p.facets)))/>" }.joined()
    }

    private func navigation(_ navigation: [NavigationProperty]) -> String {
        navigation.map { nav in
            var xml = "<NavigationProperty\(attributes([("Name", nav.name), ("Type", nav.type.description), ("Nullable", nav.nullable || nav.type.isCollection ? nil : "false"), ("Partner", nav.partner), ("ContainsTarget", nav.containsTarget ? "true" : nil)]))>"
            for constraint in nav.referentialConstraints {
                xml += "<ReferentialConstraint\(attributes([("Property", constraint.property), ("ReferencedProperty", constraint.referencedProperty)]))/>"
            }
            if let onDelete = nav.onDelete { xml += "<OnDelete Action=\"\(onDelete.rawValue)\"/>" }
            return xml + "</NavigationProperty>"
        }.joined()
    }

    // MARK: V2

    /// One association: a navigation property and its partner (if any).
    struct AssociationPlan {
        var name: String
        var from: (type: String, nav: NavigationProperty)
        var to: (type: String, nav: NavigationProperty?)
    }

    /// EDMX 1.0 with DataServiceVersion 2.0 (3.0 for a V3 model): associations derived from
    /// navigation properties (a property and its partner share one), association sets from the
    /// bindings.
    public func v2(_ model: Model) -> String {
        var xml = #"<?xml version="1.0" encoding="utf-8"?>"# + "\n"
        xml += #"<edmx:Edmx xmlns:edmx="http://schemas.microsoft.com/ado/2007/06/edmx" Version="1.0">"#
        xml += #"<edmx:DataServices xmlns:m="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata""#
        xml += #" m:DataServiceVersion=""# + (model.version == .v3 ? "3.0" : "2.0") + #"">"#
        let plans = associationPlans(model)
        for schema in model.schemas {
            xml += "<Schema\(attributes([("Namespace", schema.namespace)])) xmlns=\"http://schemas.microsoft.com/ado/2008/09/edm\">"
            for type in schema.complexTypes {
                xml += "<ComplexType\(attributes([("Name", type.name)]))>" + v2Properties(model.allProperties(ofStructuredType: type.qualifiedName), model) + "</ComplexType>"
            }
            for type in schema.entityTypes {
                xml += "<EntityType\(attributes([("Name", type.name), ("BaseType", type.baseType), ("Abstract", type.isAbstract ? "true" : nil)]))\(type.hasStream ? " m:HasStream=\"true\"" : "")>"
                if !type.key.isEmpty {
                    xml += "<Key>" + type.key.map { "<PropertyRef\(attributes([("Name", $0.name)]))/>" }.joined() + "</Key>"
                }
                xml += v2Properties(type.properties, model)
                for nav in type.navigationProperties {
                    guard let plan = plans.first(where: { ($0.from.type == type.qualifiedName && $0.from.nav.name == nav.name) || ($0.to.type == type.qualifiedName && $0.to.nav?.name == nav.name) }) else { continue }
                    let isFrom = plan.from.type == type.qualifiedName && plan.from.nav.name == nav.name
                    xml += "<NavigationProperty\(attributes([("Name", nav.name), ("Relationship", "\(schema.namespace).\(plan.name)"), ("FromRole", isFrom ? "From" : "To"), ("ToRole", isFrom ? "To" : "From")]))/>"
                }
                xml += "</EntityType>"
            }
            for plan in plans where plan.from.type.hasPrefix(schema.namespace + ".") {
                let fromMultiplicity = plan.to.nav.map { $0.type.isCollection ? "*" : ($0.nullable ? "0..1" : "1") } ?? "*"
                let toMultiplicity = plan.from.nav.type.isCollection ? "*" : (plan.from.nav.nullable ? "0..1" : "1")
                xml += "<Association\(attributes([("Name", plan.name)]))>"
                xml += "<End\(attributes([("Role", "From"), ("Type", plan.from.type), ("Multiplicity", fromMultiplicity)]))>"
                if plan.from.nav.onDelete == .cascade { xml += "<OnDelete Action=\"Cascade\"/>" }
                xml += "</End>"
                xml += "<End\(attributes([("Role", "To"), ("Type", plan.from.nav.type.name), ("Multiplicity", toMultiplicity)]))>"
                if plan.to.nav?.onDelete == .cascade { xml += "<OnDelete Action=\"Cascade\"/>" }
                xml += "</End>"
                // The dependent is the side whose navigation property carries the constraint.
                if !plan.from.nav.referentialConstraints.isEmpty {
                    xml += constraint(principal: "To", dependent: "From", plan.from.nav.referentialConstraints)
                } else if let partner = plan.to.nav, !partner.referentialConstraints.isEmpty {
                    xml += constraint(principal: "From", dependent: "To", partner.referentialConstraints)
                }
                xml += "</Association>"
            }
            if let container = schema.entityContainer {
                xml += "<EntityContainer\(attributes([("Name", container.name)])) m:IsDefaultEntityContainer=\"true\">"
                for set in container.entitySets {
                    xml += "<EntitySet\(attributes([("Name", set.name), ("EntityType", set.entityType)]))/>"
                }
                for plan in plans {
                    guard let fromSet = container.entitySets.first(where: { $0.entityType == plan.from.type && $0.navigationPropertyBindings.contains { $0.path == plan.from.nav.name } }),
                          let binding = fromSet.navigationPropertyBindings.first(where: { $0.path == plan.from.nav.name }) else { continue }
                    xml += "<AssociationSet\(attributes([("Name", plan.name), ("Association", "\(schema.namespace).\(plan.name)")]))>"
                    xml += "<End\(attributes([("Role", "From"), ("EntitySet", fromSet.name)]))/><End\(attributes([("Role", "To"), ("EntitySet", binding.target)]))/>"
                    xml += "</AssociationSet>"
                }
                for item in container.functionImports {
                    let op = item.function.flatMap { model.functions($0).first }
                    let returnType = item.returnType ?? op?.returnType
                    xml += "<FunctionImport\(attributes([("Name", item.name), ("ReturnType", returnType?.description), ("EntitySet", item.entitySet)])) m:HttpMethod=\"GET\">"
                    for parameter in item.parameters.isEmpty ? (op?.parameters ?? []) : item.parameters {
                        xml += "<Parameter\(attributes([("Name", parameter.name), ("Type", parameter.type.description), ("Mode", "In")]))/>"
                    }
                    xml += "</FunctionImport>"
                }
                for item in container.actionImports {
                    let op = model.actions(item.action).first
                    xml += "<FunctionImport\(attributes([("Name", item.name), ("ReturnType", op?.returnType?.description), ("EntitySet", item.entitySet)])) m:HttpMethod=\"POST\">"
                    for parameter in op?.parameters ?? [] {
                        xml += "<Parameter\(attributes([("Name", parameter.name), ("Type", parameter.type.description), ("Mode", "In")]))/>"
                    }
                    xml += "</FunctionImport>"
                }
                xml += "</EntityContainer>"
            }
            xml += "</Schema>"
        }
        return xml + "</edmx:DataServices></edmx:Edmx>"
    }

    private func constraint(principal: String, dependent: String, _ constraints: [ReferentialConstraint]) -> String {
        "<ReferentialConstraint><Principal Role=\"\(principal)\">"
            + constraints.map { "<PropertyRef\(attributes([("Name", $0.referencedProperty)]))/>" }.joined()
            + "</Principal><Dependent Role=\"\(dependent)\">"
            + constraints.map { "<PropertyRef\(attributes([("Name", $0.property)]))/>" }.joined()
            + "</Dependent></ReferentialConstraint>"
    }

    /// V2 has no Date, TimeOfDay or Duration: they are written as DateTime and Time.
    private func v2Properties(_ properties: [Property], _ model: Model) -> String {
        properties.map { p in
            var type = p.type.name
            switch type {
            case "Edm.Date": type = "Edm.DateTime"
            case "Edm.TimeOfDay", "Edm.Duration": type = "Edm.Time"
            default:
                if model.enumType(type) != nil { type = "Edm.String" }
                if let definition = model.typeDefinition(type) { type = definition.underlyingType }
            }
            let written = p.type.isCollection ? "Collection(\(type))" : type
            return "<Property\(attributes([("Name", p.name), ("Type", written)] + facets(p.facets)))\(p.concurrencyFixed ? " ConcurrencyMode=\"Fixed\"" : "")/>"
        }.joined()
    }

    func associationPlans(_ model: Model) -> [AssociationPlan] {
        var plans: [AssociationPlan] = []
        var covered: Set<String> = []
        for schema in model.schemas {
            for type in schema.entityTypes {
                for nav in type.navigationProperties where !covered.contains("\(type.qualifiedName)/\(nav.name)") {
                    covered.insert("\(type.qualifiedName)/\(nav.name)")
                    var partner: NavigationProperty?
                    if let partnerName = nav.partner, let found = model.navigationProperty(partnerName, ofStructuredType: nav.type.name) {
                        partner = found
                        covered.insert("\(nav.type.name)/\(partnerName)")
                    }
                    plans.append(AssociationPlan(name: "\(type.name)_\(nav.name)", from: (type.qualifiedName, nav), to: (nav.type.name, partner)))
                }
            }
        }
        return plans
    }
}
