import CSQLCipher
import Foundation
import ODataCore

/// SQL functions of our own, registered on every connection: what SQLite cannot compute on the
/// stored forms of ``ValueStorage`` (a decimal's BLOB, a date's biased year).
///
/// `oodata_cast(from, to, value)`: the stored `value` of Edm type `from` (a qualified name)
/// cast to Edm type `to` (``PrimitiveCast``), in `to`'s stored form; NULL when the cast fails.
/// A fourth argument, 1, casts for a V2 request (V2's string forms).
/// A stored value that cannot be read is an error that names it, never a guess.
///
/// `oodata_lower(text)`, `oodata_upper(text)`, `oodata_trim(text)`: `tolower`, `toupper` and
/// `trim` by Unicode rules (Part 2, 5.1.1.7): SQLite's own `lower`/`upper` change ASCII letters
/// only, and its `trim` removes only the characters it is given. `oodata_round`, `oodata_mod`
/// and `oodata_shift` are described where they are defined.
enum StoreFunctions {
    static func register(_ handle: OpaquePointer) -> Int32 {
        for count: Int32 in [3, 4] {
            let status = sqlite3_create_function_v2(
                handle, "oodata_cast", count, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil,
                { context, count, arguments in StoreFunctions.cast(context, count, arguments) }, nil, nil, nil)
            guard status == SQLITE_OK else { return status }
        }
        typealias Function = @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void
        let textFunctions: [(String, Function)] = [
            ("oodata_lower", { context, _, arguments in StoreFunctions.mapped(context, arguments) { $0.lowercased() } }),
            ("oodata_upper", { context, _, arguments in StoreFunctions.mapped(context, arguments) { $0.uppercased() } }),
            ("oodata_trim", { context, _, arguments in StoreFunctions.mapped(context, arguments, StoreFunctions.trim) }),
        ]
        let rounded: Function = { context, _, arguments in StoreFunctions.rounded(context, arguments) }
        guard sqlite3_create_function_v2(
            handle, "oodata_round", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil, rounded, nil, nil, nil) == SQLITE_OK
        else { return SQLITE_ERROR }
        let remainder: Function = { context, _, arguments in StoreFunctions.remainder(context, arguments) }
        guard sqlite3_create_function_v2(
            handle, "oodata_mod", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil, remainder, nil, nil, nil) == SQLITE_OK
        else { return SQLITE_ERROR }
        let shift: Function = { context, count, arguments in StoreFunctions.shift(context, count, arguments) }
        guard sqlite3_create_function_v2(
            handle, "oodata_shift", 4, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil, shift, nil, nil, nil) == SQLITE_OK
        else { return SQLITE_ERROR }
        for (name, function) in textFunctions {
            let status = sqlite3_create_function_v2(
                handle, name, 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil, function, nil, nil, nil)
            guard status == SQLITE_OK else { return status }
        }
        return SQLITE_OK
    }

    /// `oodata_round(x, name)`: `round` (half away from zero, Part 2 5.1.1.9.3), `floor` or
    /// `ceiling` of a real, exact for every double. NULL stays NULL.
    private static func rounded(_ context: OpaquePointer?, _ arguments: UnsafeMutablePointer<OpaquePointer?>?) {
        guard let arguments, sqlite3_value_type(arguments[0]) != SQLITE_NULL else {
            sqlite3_result_null(context)
            return
        }
        let rule: FloatingPointRoundingRule
        switch text(arguments[1]) {
        case "round": rule = .toNearestOrAwayFromZero
        case "floor": rule = .down
        case "ceiling": rule = .up
        default:
            sqlite3_result_error(context, "oodata_round: the second argument is round, floor or ceiling", -1)
            return
        }
        sqlite3_result_double(context, sqlite3_value_double(arguments[0]).rounded(rule))
    }

    /// `oodata_mod(a, b)`: OData's `mod` of reals, the exact remainder with the sign of `a`
    /// (`2.5 mod 2` is 0.5; SQLite's `%` takes integer parts). NULL for a null or zero `b`.
    private static func remainder(_ context: OpaquePointer?, _ arguments: UnsafeMutablePointer<OpaquePointer?>?) {
        guard let arguments, sqlite3_value_type(arguments[0]) != SQLITE_NULL,
            sqlite3_value_type(arguments[1]) != SQLITE_NULL, sqlite3_value_double(arguments[1]) != 0
        else {
            sqlite3_result_null(context)
            return
        }
        let a = sqlite3_value_double(arguments[0]), b = sqlite3_value_double(arguments[1])
        sqlite3_result_double(context, a.truncatingRemainder(dividingBy: b))
    }

    /// `oodata_shift(type, value, seconds, picoseconds)`: the stored Edm.DateTimeOffset,
    /// Edm.DateTime or Edm.Date `value` (`type` its qualified name) moved by a duration, in its
    /// own offset, in the same stored form. NULL stays NULL; a date moves by whole days only.
    private static func shift(
        _ context: OpaquePointer?, _ count: Int32, _ arguments: UnsafeMutablePointer<OpaquePointer?>?
    ) {
        guard count == 4, let arguments, let type = text(arguments[0]).flatMap(PrimitiveType.init(qualifiedName:))
        else {
            sqlite3_result_error(context, "oodata_shift: wrong arguments", -1)
            return
        }
        let seconds = sqlite3_value_int64(arguments[2])
        let picoseconds = sqlite3_value_int64(arguments[3])
        let decoded: PrimitiveValue?
        do {
            decoded = try ValueStorage.decode(value(arguments[1]), as: type)
        } catch {
            sqlite3_result_error(context, "date arithmetic on \(type.rawValue): \(error.message)", -1)
            return
        }
        guard let decoded, let moved = DateArithmetic.shifted(decoded, seconds: seconds, picoseconds: picoseconds)
        else {
            sqlite3_result_null(context)
            return
        }
        switch ValueStorage.encode(moved) {
        case .text(let s):
            let bytes = Array(s.utf8)
            sqlite3_result_text(context, bytes, Int32(bytes.count), csqlcipher_transient())
        case .integer(let v): sqlite3_result_int64(context, v)
        default: sqlite3_result_null(context)
        }
    }

    /// The text argument mapped by `transform`; NULL stays NULL.
    private static func mapped(
        _ context: OpaquePointer?, _ arguments: UnsafeMutablePointer<OpaquePointer?>?, _ transform: (String) -> String
    ) {
        guard let arguments, sqlite3_value_type(arguments[0]) != SQLITE_NULL else {
            sqlite3_result_null(context)
            return
        }
        // A value of an open type's dynamic property may be a number: SQLite's own text of it,
        // as its `lower` would take.
        guard let pointer = sqlite3_value_text(arguments[0]) else {
            sqlite3_result_null(context)
            return
        }
        let text = String(
            decoding: UnsafeBufferPointer(start: pointer, count: Int(sqlite3_value_bytes(arguments[0]))), as: UTF8.self)
        let bytes = Array(transform(text).utf8)
        sqlite3_result_text(context, bytes, Int32(bytes.count), csqlcipher_transient())
    }

    /// `text` without leading and trailing Unicode white space.
    static func trim(_ text: String) -> String {
        let scalars = Array(text.unicodeScalars)
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
            let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })
        else { return "" }
        var view = String.UnicodeScalarView()
        view.append(contentsOf: scalars[first...last])
        return String(view)
    }

    private static func cast(
        _ context: OpaquePointer?, _ count: Int32, _ arguments: UnsafeMutablePointer<OpaquePointer?>?
    ) {
        guard count == 3 || count == 4, let arguments,
            let from = text(arguments[0]).flatMap(PrimitiveType.init(qualifiedName:)),
            let to = text(arguments[1]).flatMap(PrimitiveType.init(qualifiedName:))
        else {
            sqlite3_result_error(context, "oodata_cast: wrong arguments", -1)
            return
        }
        let stored = value(arguments[2])
        let decoded: PrimitiveValue?
        do {
            decoded = try ValueStorage.decode(stored, as: from)
        } catch {
            sqlite3_result_error(context, "cast to \(to.rawValue): \(error.message)", -1)
            return
        }
        let legacy = count == 4 && sqlite3_value_int64(arguments[3]) != 0
        guard let decoded, let result = PrimitiveCast.cast(decoded, to: to, legacy: legacy) else {
            sqlite3_result_null(context)
            return
        }
        switch ValueStorage.encode(result) {
        case .null: sqlite3_result_null(context)
        case .integer(let v): sqlite3_result_int64(context, v)
        case .real(let v): sqlite3_result_double(context, v)
        case .text(let s):
            let bytes = Array(s.utf8)
            sqlite3_result_text(context, bytes, Int32(bytes.count), csqlcipher_transient())
        case .blob(let bytes):
            sqlite3_result_blob(context, bytes, Int32(bytes.count), csqlcipher_transient())
        }
    }

    private static func text(_ argument: OpaquePointer?) -> String? {
        guard sqlite3_value_type(argument) == SQLITE_TEXT, let pointer = sqlite3_value_text(argument) else {
            return nil
        }
        return String(cString: pointer)
    }

    private static func value(_ argument: OpaquePointer?) -> DatabaseValue {
        switch sqlite3_value_type(argument) {
        case SQLITE_INTEGER: return .integer(sqlite3_value_int64(argument))
        case SQLITE_FLOAT: return .real(sqlite3_value_double(argument))
        case SQLITE_TEXT:
            guard let pointer = sqlite3_value_text(argument) else { return .text("") }
            let count = Int(sqlite3_value_bytes(argument))
            return .text(String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_value_bytes(argument))
            guard count > 0, let pointer = sqlite3_value_blob(argument) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: pointer, count: count)))
        default: return .null
        }
    }
}
