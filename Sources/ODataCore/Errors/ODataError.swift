import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// An error returned by an OData service, in any of the forms backends use: the V4 JSON error,
/// the V2 JSON error (message as `{lang, value}`) and the V2 XML error, including SAP's
/// `innererror.errordetails`. The reference server writes the same type back out.
public struct ODataError: Error, Sendable, Hashable, CustomStringConvertible {
    /// One entry of `details` (V4) or `innererror.errordetails` (SAP V2).
    public struct Detail: Sendable, Hashable {
        public var code: String
        public var message: String
        public var target: String?
        /// SAP's `severity` (`error`, `warning`, `info`), when given.
        public var severity: String?
        /// Creates a value from its parts.
        public init(code: String, message: String, target: String? = nil, severity: String? = nil) {
            self.code = code
            self.message = message
            self.target = target
            self.severity = severity
        }
    }

    public var code: String
    public var message: String
    public var target: String?
    public var details: [Detail]
    /// The service-specific inner error, kept as JSON (XML inner errors are converted).
    public var innerError: JSONValue?
    /// The HTTP status of the response that carried the error, when known.
    public var httpStatus: Int?
    /// The language of the message (V2 `message.lang` / `xml:lang`).
    public var language: String?

    /// Creates a value from its parts.
    public init(code: String, message: String, target: String? = nil, details: [Detail] = [], innerError: JSONValue? = nil,
                httpStatus: Int? = nil, language: String? = nil) {
        self.code = code
        self.message = message
        self.target = target
        self.details = details
        self.innerError = innerError
        self.httpStatus = httpStatus
        self.language = language
    }

    public var description: String {
        var text = "OData error \(code): \(message)"
        if let httpStatus { text = "HTTP \(httpStatus) " + text }
        if let target { text += " (target \(target))" }
        for detail in details { text += "; \(detail.code): \(detail.message)" }
        return text
    }

    // MARK: Reading

    /// Parses an error body, JSON (V4 or V2) or XML (V2), detecting which from the bytes.
    public static func parse(_ body: [UInt8], httpStatus: Int? = nil) throws(PayloadError) -> ODataError {
        var start = 0
        while start < body.count, [0x20, 0x09, 0x0A, 0x0D, 0xEF, 0xBB, 0xBF].contains(body[start]) { start += 1 }
        guard start < body.count else { throw PayloadError(.missingValue, "The error body is empty", offset: 0) }
        var error = body[start] == UInt8(ascii: "<") ? try parseXML(body) : try parseJSON(body)
        error.httpStatus = httpStatus ?? error.httpStatus
        return error
    }

    static func parseJSON(_ body: [UInt8]) throws(PayloadError) -> ODataError {
        let root = try JSONValue.parse(body)
        guard let object = root["error"] ?? root["odata.error"] else {
            throw PayloadError(.unexpectedValue, "An OData error needs an 'error' object", offset: 0)
        }
        guard case .object = object else { throw PayloadError(.unexpectedValue, "'error' must be an object", offset: 0, path: "error") }
        var error = ODataError(code: text(object["code"]) ?? "", message: "")
        switch object["message"] {
        case .string(let message)?: error.message = message
        case .object(let members)?:
            // V2: {"lang": "en", "value": "…"}
            let message = JSONValue.object(members)
            error.message = text(message["value"]) ?? ""
            error.language = text(message["lang"])
        default: break
        }
        error.target = text(object["target"])
        for detail in object["details"]?.arrayValue ?? [] {
            error.details.append(Detail(code: text(detail["code"]) ?? "", message: text(detail["message"]) ?? "", target: text(detail["target"])))
        }
        if let inner = object["innererror"] {
            error.innerError = inner
            for detail in inner["errordetails"]?.arrayValue ?? [] {
                error.details.append(Detail(code: text(detail["code"]) ?? "", message: text(detail["message"]) ?? "",
                                            target: text(detail["target"]), severity: text(detail["severity"])))
            }
        }
        return error
    }

    private static func text(_ value: JSONValue?) -> String? {
        switch value {
        case .string(let s)?: s
        case .number(let n)?: n
        case .bool(let b)?: b ? "true" : "false"
        default: nil
        }
    }

    static func parseXML(_ body: [UInt8]) throws(PayloadError) -> ODataError {
        let root: XMLNode
        do {
            root = try XMLTreeBuilder.parse(Data(body))
        } catch {
            throw PayloadError(.malformedXML, error.message, offset: 0, path: "line \(error.line), column \(error.column)")
        }
        guard root.localName == "error" else {
            throw PayloadError(.unexpectedValue, "An XML error needs an <error> root, not <\(root.localName)>", offset: 0)
        }
        func childText(_ node: XMLNode, _ name: String) -> String? {
            node.child(named: name).map { $0.text.trimmingCharacters(in: .whitespacesAndNewlines) }
        }
        var error = ODataError(code: childText(root, "code") ?? "", message: childText(root, "message") ?? "")
        error.language = root.child(named: "message")?.attributes.first { $0.localName == "lang" }?.value
        error.target = childText(root, "target")
        if let inner = root.child(named: "innererror") {
            error.innerError = xmlToJSON(inner)
            for detail in inner.child(named: "errordetails")?.children(named: "errordetail") ?? [] {
                error.details.append(Detail(code: childText(detail, "code") ?? "", message: childText(detail, "message") ?? "",
                                            target: childText(detail, "target"), severity: childText(detail, "severity")))
            }
        }
        return error
    }

    private static func xmlToJSON(_ node: XMLNode) -> JSONValue {
        if node.children.isEmpty { return .string(node.text.trimmingCharacters(in: .whitespacesAndNewlines)) }
        // Repeated child names become arrays.
        var members: [JSONValue.Member] = []
        for child in node.children {
            let value = xmlToJSON(child)
            if let index = members.firstIndex(where: { $0.name == child.localName }) {
                if case .array(var items) = members[index].value, node.children.filter({ $0.localName == child.localName }).count > 1 {
                    items.append(value)
                    members[index].value = .array(items)
                } else {
                    members[index].value = .array([members[index].value, value])
                }
            } else {
                let repeated = node.children.filter { $0.localName == child.localName }.count > 1
                members.append(JSONValue.Member(child.localName, repeated ? .array([value]) : value))
            }
        }
        return .object(members)
    }

    // MARK: Writing

    /// The error as a V4 JSON body.
    public func v4JSON() -> [UInt8] {
        var writer = JSONWriter()
        writer.objectStart()
        writer.key("error")
        writer.objectStart()
        writer.key("code")
        writer.string(code)
        writer.key("message")
        writer.string(message)
        if let target {
            writer.key("target")
            writer.string(target)
        }
        if !details.isEmpty {
            writer.key("details")
            writer.arrayStart()
            for detail in details {
                writer.objectStart()
                writer.key("code")
                writer.string(detail.code)
                writer.key("message")
                writer.string(detail.message)
                if let target = detail.target {
                    writer.key("target")
                    writer.string(target)
                }
                writer.endObject()
            }
            writer.endArray()
        }
        if let innerError {
            writer.key("innererror")
            writer.value(innerError)
        }
        writer.endObject()
        writer.endObject()
        return writer.bytes
    }

    /// The error as a V2 JSON body (`message` as `{lang, value}`, details as SAP `errordetails`).
    public func v2JSON() -> [UInt8] {
        var writer = JSONWriter()
        writer.objectStart()
        writer.key("error")
        writer.objectStart()
        writer.key("code")
        writer.string(code)
        writer.key("message")
        writer.objectStart()
        writer.key("lang")
        writer.string(language ?? "en")
        writer.key("value")
        writer.string(message)
        writer.endObject()
        if innerError != nil || !details.isEmpty {
            writer.key("innererror")
            var members = innerError?.objectMembers?.filter { $0.name != "errordetails" } ?? []
            if !details.isEmpty {
                members.append(JSONValue.Member("errordetails", .array(details.map { detail in
                    var items: [JSONValue.Member] = [.init("code", .string(detail.code)), .init("message", .string(detail.message))]
                    if let target = detail.target { items.append(.init("target", .string(target))) }
                    if let severity = detail.severity { items.append(.init("severity", .string(severity))) }
                    return .object(items)
                })))
            }
            writer.value(.object(members))
        }
        writer.endObject()
        writer.endObject()
        return writer.bytes
    }

    /// The error as a V2 XML body.
    public func v2XML() -> [UInt8] {
        func escape(_ s: String) -> String {
            s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
        }
        var xml = "<?xml version=\"1.0\" encoding=\"utf-8\"?><error xmlns=\"http://schemas.microsoft.com/ado/2007/08/dataservices/metadata\">"
        xml += "<code>\(escape(code))</code><message xml:lang=\"\(escape(language ?? "en"))\">\(escape(message))</message>"
        if let target { xml += "<target>\(escape(target))</target>" }
        if !details.isEmpty {
            xml += "<innererror><errordetails>"
            for detail in details {
                xml += "<errordetail><code>\(escape(detail.code))</code><message>\(escape(detail.message))</message>"
                if let target = detail.target { xml += "<target>\(escape(target))</target>" }
                if let severity = detail.severity { xml += "<severity>\(escape(severity))</severity>" }
                xml += "</errordetail>"
            }
            xml += "</errordetails></innererror>"
        }
        return Array((xml + "</error>").utf8)
    }
}
