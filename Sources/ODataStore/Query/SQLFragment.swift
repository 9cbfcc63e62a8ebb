/// A piece of SQL with its bound values, in order. Values are never spliced into the text.
struct SQLFragment {
    var sql: String
    var arguments: [DatabaseValue]

    init(_ sql: String, _ arguments: [DatabaseValue] = []) {
        self.sql = sql
        self.arguments = arguments
    }

    static func + (a: SQLFragment, b: SQLFragment) -> SQLFragment {
        SQLFragment(a.sql + b.sql, a.arguments + b.arguments)
    }

    static func + (a: SQLFragment, b: String) -> SQLFragment { SQLFragment(a.sql + b, a.arguments) }
    static func + (a: String, b: SQLFragment) -> SQLFragment { SQLFragment(a + b.sql, b.arguments) }

    /// `(a op b)`.
    static func binary(_ a: SQLFragment, _ op: String, _ b: SQLFragment) -> SQLFragment {
        "(" + a + " \(op) " + b + ")"
    }

    /// Joins fragments with a separator.
    static func joined(_ parts: [SQLFragment], _ separator: String) -> SQLFragment {
        var result = SQLFragment("")
        for (index, part) in parts.enumerated() {
            if index > 0 { result = result + separator }
            result = result + part
        }
        return result
    }
}
