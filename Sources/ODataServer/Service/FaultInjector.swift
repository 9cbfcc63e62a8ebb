import Foundation
import ODataCore

/// A fault rule: when a request matches, fail it, delay it, or drop the connection after the
/// change committed (a lost response).
public struct FaultRule: Sendable, Hashable, Codable {
    /// HTTP method to match; nil matches any.
    public var method: String?
    /// Substring of the request target to match; nil matches any.
    public var urlContains: String?
    /// Substring of the request body to match; nil matches any.
    public var bodyContains: String?
    /// Fail with this status (and code and message).
    public var status: Int?
    public var code: String?
    public var message: String?
    /// Commit, then drop the connection instead of answering.
    public var dropAfterCommit: Bool
    /// Wait this long before answering.
    public var delayMilliseconds: Int?
    /// Send the response body in 8 parts with this pause before each (a slow network that
    /// still delivers).
    public var trickleMilliseconds: Int?
    /// How many times the rule fires; nil for always.
    public var times: Int?
    /// Handle the request as if it carried `Prefer: return=minimal`: a create is answered 204
    /// with a `Location`, without the entity (a backend whose answers omit what it created).
    public var minimal: Bool
    /// Answer with this JSON body and status 200 instead of handling the request: a backend
    /// that misbehaves (next links that loop, a row on two pages) as tests need it.
    public var answer: String?

    /// Creates a rule.
    public init(method: String? = nil, urlContains: String? = nil, bodyContains: String? = nil, status: Int? = nil, code: String? = nil,
                message: String? = nil, dropAfterCommit: Bool = false, delayMilliseconds: Int? = nil, trickleMilliseconds: Int? = nil, times: Int? = nil,
                answer: String? = nil, minimal: Bool = false) {
        self.method = method
        self.urlContains = urlContains
        self.bodyContains = bodyContains
        self.status = status
        self.code = code
        self.message = message
        self.dropAfterCommit = dropAfterCommit
        self.delayMilliseconds = delayMilliseconds
        self.trickleMilliseconds = trickleMilliseconds
        self.times = times
        self.answer = answer
        self.minimal = minimal
    }

    enum CodingKeys: String, CodingKey { case method, urlContains, bodyContains, status, code, message, dropAfterCommit, delayMilliseconds, trickleMilliseconds, times, answer, minimal }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(method: try c.decodeIfPresent(String.self, forKey: .method), urlContains: try c.decodeIfPresent(String.self, forKey: .urlContains),
                  bodyContains: try c.decodeIfPresent(String.self, forKey: .bodyContains), status: try c.decodeIfPresent(Int.self, forKey: .status),
                  code: try c.decodeIfPresent(String.self, forKey: .code), message: try c.decodeIfPresent(String.self, forKey: .message),
                  dropAfterCommit: try c.decodeIfPresent(Bool.self, forKey: .dropAfterCommit) ?? false,
                  delayMilliseconds: try c.decodeIfPresent(Int.self, forKey: .delayMilliseconds),
                  trickleMilliseconds: try c.decodeIfPresent(Int.self, forKey: .trickleMilliseconds), times: try c.decodeIfPresent(Int.self, forKey: .times),
                  answer: try c.decodeIfPresent(String.self, forKey: .answer),
                  minimal: try c.decodeIfPresent(Bool.self, forKey: .minimal) ?? false)
    }

    func matches(_ request: ServiceRequest) -> Bool {
        if let method, method.uppercased() != request.method { return false }
        if let urlContains, !request.target.contains(urlContains) { return false }
        if let bodyContains, !String(decoding: request.body, as: UTF8.self).contains(bodyContains) { return false }
        return true
    }
}

/// The fault rules in force; changed through `--faults` and the `/_faults` endpoint.
public actor FaultInjector {
    private var rules: [FaultRule]

    /// Creates the injector with initial rules.
    public init(rules: [FaultRule] = []) { self.rules = rules }

    /// Replaces every rule.
    public func set(_ rules: [FaultRule]) { self.rules = rules }

    /// The current rules.
    public func current() -> [FaultRule] { rules }

    /// Whether no rule is in force.
    public var isEmpty: Bool { rules.isEmpty }

    /// Reads rules from a JSON file (an array of rules).
    public static func rules(fromFile path: String) throws -> [FaultRule] {
        try JSONDecoder().decode([FaultRule].self, from: Data(contentsOf: URL(fileURLWithPath: path)))
    }

    /// Puts back one use of `rule` (a rule with `times` that fired on a request it should not
    /// have counted: a refused request under `dropAfterCommit`).
    func giveBack(_ rule: FaultRule) {
        guard rule.times != nil else { return }
        var unused = rule
        unused.times = nil
        if let index = rules.firstIndex(where: { var other = $0; other.times = nil; return other == unused }) {
            rules[index].times = (rules[index].times ?? 0) + 1
        } else {
            var restored = rule
            restored.times = 1
            rules.insert(restored, at: 0)
        }
    }

    func match(_ request: ServiceRequest) -> FaultRule? {
        guard let index = rules.firstIndex(where: { $0.matches(request) }) else { return nil }
        let rule = rules[index]
        if let times = rule.times {
            if times <= 1 { rules.remove(at: index) } else { rules[index].times = times - 1 }
        }
        return rule
    }
}
