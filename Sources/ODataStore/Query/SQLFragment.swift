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
    /// (In place: joining with `+` copied the text so far for every part, quadratic for the
    /// thousands of items of a long `in` list.)
    static func joined(_ parts: [SQLFragment], _ separator: String) -> SQLFragment {
        var sql = ""
        var arguments: [DatabaseValue] = []
        sql.reserveCapacity(parts.reduce(0) { $0 + $1.sql.utf8.count + separator.utf8.count })
        arguments.reserveCapacity(parts.reduce(0) { $0 + $1.arguments.count })
        for (index, part) in parts.enumerated() {
            if index > 0 { sql += separator }
            sql += part.sql
            arguments += part.arguments
        }
        return SQLFragment(sql, arguments)
    }
}
