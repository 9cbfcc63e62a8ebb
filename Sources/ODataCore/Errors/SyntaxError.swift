/// A syntax error in a URL, a query option, an expression or a literal.
///
/// `offset` counts UTF-8 bytes from the start of `input` (the text as the caller gave it,
/// still percent-encoded for URLs). `description` shows the input with a caret under the
/// offending position.
public struct SyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The broad kind of syntax error; cases may be added.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case unexpectedCharacter, unexpectedEnd, invalidLiteral, invalidPath, invalidQueryOption
            case invalidExpression, invalidPercentEncoding, duplicateQueryOption, tooDeep
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }
        public static let unexpectedCharacter = Code(.unexpectedCharacter)
        public static let unexpectedEnd = Code(.unexpectedEnd)
        public static let invalidLiteral = Code(.invalidLiteral)
        public static let invalidPath = Code(.invalidPath)
        public static let invalidQueryOption = Code(.invalidQueryOption)
        public static let invalidExpression = Code(.invalidExpression)
        public static let invalidPercentEncoding = Code(.invalidPercentEncoding)
        public static let duplicateQueryOption = Code(.duplicateQueryOption)
        /// Nesting deeper than the parser allows (protects the stack).
        public static let tooDeep = Code(.tooDeep)
        public var description: String { base.rawValue }
    }

    public var code: Code
    public var message: String
    /// The whole text that was being parsed.
    public var input: String
    /// UTF-8 offset into `input` where the problem starts.
    public var offset: Int

    /// Creates a value from its parts.
    public init(_ code: Code, _ message: String, input: String, offset: Int) {
        self.code = code
        self.message = message
        self.input = input
        self.offset = max(0, min(offset, input.utf8.count))
    }

    /// Two lines: the input and a caret under the offending position.
    public var caretExcerpt: String {
        let bytes = Array(input.utf8)
        // Show at most 60 bytes either side of the error.
        let start = max(0, offset - 60)
        let end = min(bytes.count, offset + 60)
        let prefix = start > 0 ? "…" : ""
        let suffix = end < bytes.count ? "…" : ""
        let shown = String(decoding: bytes[start..<end], as: UTF8.self)
        let caretColumn = String(decoding: bytes[start..<offset], as: UTF8.self).count + (prefix.isEmpty ? 0 : 1)
        return "  " + prefix + shown + suffix + "\n  " + String(repeating: " ", count: caretColumn) + "^"
    }

    public var description: String {
        "\(message) at offset \(offset)\n\(caretExcerpt)"
    }
}

/// A request that is well-formed but does not fit the model: an unknown name, a wrong
/// type, a wrong number of arguments.
public struct BindingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The broad kind of binding error; cases may be added.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case unknownName, typeMismatch, invalidArguments, invalidSegment, invalidKey, unsupported
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }
        public static let unknownName = Code(.unknownName)
        public static let typeMismatch = Code(.typeMismatch)
        public static let invalidArguments = Code(.invalidArguments)
        public static let invalidSegment = Code(.invalidSegment)
        public static let invalidKey = Code(.invalidKey)
        public static let unsupported = Code(.unsupported)
        public var description: String { base.rawValue }
    }

    public var code: Code
    public var message: String
    /// The text that was being bound (a path or a query option value, as given).
    public var input: String
    /// UTF-8 offset into `input`.
    public var offset: Int

    /// Creates a value from its parts.
    public init(_ code: Code, _ message: String, input: String, offset: Int) {
        self.code = code
        self.message = message
        self.input = input
        self.offset = offset
    }

    public var description: String {
        SyntaxError(.invalidExpression, message, input: input, offset: offset).description
    }
}
