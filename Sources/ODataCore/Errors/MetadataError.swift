/// An error in a `$metadata` document: malformed XML, a missing attribute, an unknown type, a
/// broken reference, or (in strict mode) a schema rule violation.
///
/// `line` and `column` are 1-based positions in the document; `elementPath` names the element,
/// e.g. `Edmx/DataServices/Schema[NorthwindModel]/EntityType[Customer]/Property[City]`.
public struct MetadataError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The broad kind of metadata error; cases may be added.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case malformedXML, notMetadata, missingAttribute, invalidAttribute, unknownType
            case brokenReference, schemaViolation, duplicateName
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }
        public static let malformedXML = Code(.malformedXML)
        public static let notMetadata = Code(.notMetadata)
        public static let missingAttribute = Code(.missingAttribute)
        public static let invalidAttribute = Code(.invalidAttribute)
        public static let unknownType = Code(.unknownType)
        public static let brokenReference = Code(.brokenReference)
        public static let schemaViolation = Code(.schemaViolation)
        public static let duplicateName = Code(.duplicateName)
        public var description: String { base.rawValue }
    }

    public var code: Code
    public var message: String
    public var line: Int
    public var column: Int
    public var elementPath: String

    /// Creates a value from its parts.
    public init(_ code: Code, _ message: String, line: Int, column: Int, elementPath: String) {
        self.code = code
        self.message = message
        self.line = line
        self.column = column
        self.elementPath = elementPath
    }

    public var description: String {
        "\(message) (\(code)) at line \(line), column \(column), in \(elementPath.isEmpty ? "the document" : elementPath)"
    }
}
