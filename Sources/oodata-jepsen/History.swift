import Foundation

/// One line of a device's history: an operation's invocation, or its completion with the
/// result and, for a read, the values read. An invocation without a completion is an
/// operation whose outcome is unknown (its process was killed).
struct HistoryEvent: Codable, Sendable {
    /// `invoke` or `complete`.
    var type: String
    var device: Int
    /// The operation's number, unique within the device's history (across its restarts).
    var n: Int
    /// `read`, `create`, `update`, `delete`, `contact`, `shared`, `upload`, `download`, `open`,
    /// `drain` or `final`.
    var op: String
    /// The key of the business partner a write changes.
    var key: String?
    /// The unique value written (a phone number, or a contact's last name).
    var value: String?
    /// Seconds since 1970.
    var time: Double
    var ok: Bool?
    var error: String?
    /// A read's business partners: key to phone.
    var values: [String: String]?
    /// A read's own contacts (their last names).
    var contacts: [String]?
    /// `run` or `quiet`.
    var phase: String?
    /// ErrorArchive entries an upload left (the device then deletes them, as an app that
    /// shows the error and goes on would: the entities go back to their downloaded state).
    var archived: [DeviceFinal.Archived]?
    /// The scope-checksum mismatches a download found (from the EventLog, new ones only).
    var mismatches: [String]?
}

/// What a device holds after the quiet phase.
struct DeviceFinal: Codable, Sendable {
    struct Archived: Codable, Sendable {
        var code: String?
        var status: Int?
        var method: String?
        var url: String?
        var body: String?
    }
    var device: Int
    /// Every business partner: key to phone.
    var partners: [String: String]
    /// Every contact as `ContactID LastName`.
    var contacts: [String]
    var archive: [Archived]
    /// Requests still queued (archived ones not counted).
    var queued: Int
    /// EventLog entries of scope-checksum mismatches.
    var checksumEvents: [String]
    /// Seconds the final drain took, and whether it emptied the queue.
    var drainSeconds: Double
    var drained: Bool
    /// Whether the planted divergence (a row removed from the store) was made.
    var planted: String?
}

/// A fault the nemesis applied, from `start` to `end` (seconds since 1970).
struct NemesisEvent: Codable, Sendable {
    var fault: String
    var target: String
    var start: Double
    var end: Double
}

/// Appends JSON lines to a file with one `write` each, so that a `kill -9` loses at most the
/// line being written.
final class HistoryWriter: @unchecked Sendable {
    private let descriptor: Int32
    private let encoder = JSONEncoder()

    init(path: String) throws {
        descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        guard descriptor >= 0 else { throw JepsenFailure("cannot open \(path) for appending (errno \(errno))") }
        encoder.outputFormatting = [.sortedKeys]
    }

    deinit { close(descriptor) }

    func append(_ value: some Encodable) {
        guard var data = try? encoder.encode(value) else { return }
        data.append(0x0A)
        _ = data.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
    }
}

/// The lines of a JSON-lines file. Only a last line cut by a kill may not decode: any other
/// that does not is an error (a history the checkers would read wrong).
func readLines<T: Decodable>(_ type: T.Type, path: String) throws -> [T] {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [] }
    let decoder = JSONDecoder()
    let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
    var result: [T] = []
    for (number, line) in lines.enumerated() where !line.isEmpty {
        do {
            result.append(try decoder.decode(T.self, from: Data(line.utf8)))
        } catch {
            // The last line without its newline: written when the process was killed.
            guard number == lines.count - 1 else {
                throw JepsenFailure("\(path), line \(number + 1), does not decode: \(error)")
            }
        }
    }
    return result
}

struct JepsenFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

func now() -> Double { Date().timeIntervalSince1970 }

/// SplitMix64: the same operations and faults for the same seed.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
