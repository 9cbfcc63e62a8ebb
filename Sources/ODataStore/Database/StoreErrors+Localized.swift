public import Foundation

// `localizedDescription` is each error's own description, not Foundation's generic text.

extension DatabaseError: LocalizedError {
    /// The description: SQLite's code and message, and the statement it came from.
    public var errorDescription: String? { description }
}

extension StoreError: LocalizedError {
    /// The description: message and code.
    public var errorDescription: String? { description }
}
