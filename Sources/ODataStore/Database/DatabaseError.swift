/// An error from the database layer: a SQLite result code with its message, the SQL that
/// failed and (hidden unless asked for) the values bound to it.
///
/// `description` never shows bound values, which may hold user data; `expandedDescription`
/// does, for debugging.
public struct DatabaseError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure; cases may be added.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case sqlite, invalidEncryptionKey, notADatabase, corrupt, busy, constraint, misuse, closed, emptyFile, truncated
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }
        /// Any other SQLite failure (see `resultCode`).
        public static let sqlite = Code(.sqlite)
        /// The key is wrong, missing, or given for an unencrypted file.
        public static let invalidEncryptionKey = Code(.invalidEncryptionKey)
        /// The file is not a SQLite database (or not a store).
        public static let notADatabase = Code(.notADatabase)
        /// The database file is damaged.
        public static let corrupt = Code(.corrupt)
        /// The file exists but has no bytes: it was created and never written (not a wrong key).
        public static let emptyFile = Code(.emptyFile)
        /// The file is shorter than the database it holds says: it was cut off (not a wrong key).
        public static let truncated = Code(.truncated)
        /// Another connection holds a lock longer than the busy timeout.
        public static let busy = Code(.busy)
        /// A constraint (key, foreign key, NOT NULL, CHECK) was violated.
        public static let constraint = Code(.constraint)
        /// The API was used in a wrong order (a bug).
        public static let misuse = Code(.misuse)
        /// The connection was closed.
        public static let closed = Code(.closed)
        public var description: String { base.rawValue }
    }

    public var code: Code
    /// The SQLite (extended) result code, or 0 when the error did not come from SQLite.
    public var resultCode: Int32
    public var message: String
    public var sql: String?
    /// Bound values, kept out of `description`.
    public var arguments: [DatabaseValue]

    /// Creates a value from its parts.
    public init(_ code: Code, resultCode: Int32 = 0, message: String, sql: String? = nil, arguments: [DatabaseValue] = []) {
        self.code = code
        self.resultCode = resultCode
        self.message = message
        self.sql = sql
        self.arguments = arguments
    }

    public var description: String {
        var text = "SQLite error \(resultCode) (\(code)): \(message)"
        if let sql { text += " — while executing `\(sql)`" }
        return text
    }

    /// The description with the bound values; may expose user data.
    public var expandedDescription: String {
        description + (arguments.isEmpty ? "" : " with arguments \(arguments)")
    }
}

/// A value stored in or read from SQLite.
public enum DatabaseValue: Sendable, Hashable, CustomStringConvertible {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    public var description: String {
        switch self {
        case .null: "NULL"
        case .integer(let v): String(v)
        case .real(let v): String(v)
        case .text(let s): "'\(s)'"
        case .blob(let b): "<\(b.count) bytes>"
        }
    }
}
