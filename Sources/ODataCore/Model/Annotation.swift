/// A vocabulary annotation, kept as term, target and value.
///
/// `sap:` attributes of V2 documents are annotations too: their term is `sap:<attribute>` and
/// their value a string constant.
public struct Annotation: Sendable, Hashable, Codable {
    /// Qualified term name (aliases resolved), e.g. `Org.OData.Core.V1.Description`.
    public var term: String
    public var qualifier: String?
    /// The annotated model element, e.g. `Ns.Customer/Name` or `Ns.Container/Customers`.
    public var target: String
    public var value: AnnotationValue?
    /// Creates a value from its parts.
    public init(term: String, qualifier: String? = nil, target: String, value: AnnotationValue?) {
        self.term = term
        self.qualifier = qualifier
        self.target = target
        self.value = value
    }
}

/// The value of an annotation: a constant, a path, a collection, a record, or a dynamic
/// expression kept as its element name with operands.
public indirect enum AnnotationValue: Sendable, Hashable, Codable {
    /// A constant expression: `kind` is the CSDL element/attribute name (`String`, `Bool`,
    /// `Int`, `Decimal`, `EnumMember`, …) and `value` its text.
    case constant(kind: String, value: String)
    /// A path expression: `kind` is `Path`, `PropertyPath`, `NavigationPropertyPath`,
    /// `AnnotationPath` or `ModelElementPath`.
    case path(kind: String, value: String)
    case collection([AnnotationValue])
    case record(type: String?, properties: [PropertyValue])
    /// A dynamic expression (`If`, `Eq`, `Apply`, `LabeledElement`, `UrlRef`, `Cast`, …).
    case expression(name: String, attributes: [String: String], operands: [AnnotationValue])

    /// One property value of a record.
    public struct PropertyValue: Sendable, Hashable, Codable {
        public var property: String
        public var value: AnnotationValue?
        /// Creates a value from its parts.
        public init(property: String, value: AnnotationValue?) {
            self.property = property
            self.value = value
        }
    }
}
