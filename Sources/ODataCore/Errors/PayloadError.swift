/// An error in a payload: malformed JSON, a value of the wrong type, a missing part, a broken
/// batch. `offset` is the byte offset in the body (-1 when the error is about a value, not a
/// place in the text); `path` names the place in the document,
/// e.g. `value[3].Price` or `batch part 2`.
public struct PayloadError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The broad kind of payload error; cases may be added.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case malformedJSON, malformedXML, unexpectedValue, wrongType, missingValue, malformedBatch, unsupported, tooDeep
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }
        public static let malformedJSON = Code(.malformedJSON)
        public static let malformedXML = Code(.malformedXML)
        /// Valid JSON that does not have the shape an OData payload needs.
        public static let unexpectedValue = Code(.unexpectedValue)
        /// A value that does not fit the declared type.
        public static let wrongType = Code(.wrongType)
        public static let missingValue = Code(.missingValue)
        public static let malformedBatch = Code(.malformedBatch)
        public static let unsupported = Code(.unsupported)
        public static let tooDeep = Code(.tooDeep)
        public var description: String { base.rawValue }
    }

    public var code: Code
    public var message: String
    public var offset: Int
    public var path: String

    /// Creates a value from its parts.
    public init(_ code: Code, _ message: String, offset: Int, path: String = "") {
        self.code = code
        self.message = message
        self.offset = offset
        self.path = path
    }

    public var description: String {
        "\(message) (\(code))" + (offset >= 0 ? " at byte \(offset)" : "") + (path.isEmpty ? "" : " in \(path)")
    }
}
