import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// A parsed XML element with resolved namespaces and its source position.
final class XMLNode {
    struct Attribute {
        var localName: String
        var namespaceURI: String?
        var value: String
    }

    let localName: String
    let namespaceURI: String?
    let attributes: [Attribute]
    let line: Int
    let column: Int
    let path: String
    var children: [XMLNode] = []
    var text = ""

    init(localName: String, namespaceURI: String?, attributes: [Attribute], line: Int, column: Int, path: String) {
        self.localName = localName
        self.namespaceURI = namespaceURI
        self.attributes = attributes
        self.line = line
        self.column = column
        self.path = path
    }

    /// An attribute without a namespace.
    subscript(_ name: String) -> String? {
        attributes.first { $0.localName == name && $0.namespaceURI == nil }?.value
    }

    /// An attribute in a given namespace.
    func attribute(_ name: String, namespace: String) -> String? {
        attributes.first { $0.localName == name && $0.namespaceURI == namespace }?.value
    }

    func children(named name: String) -> [XMLNode] { children.filter { $0.localName == name } }
    func child(named name: String) -> XMLNode? { children.first { $0.localName == name } }
}

/// Builds an `XMLNode` tree with Foundation's SAX parser, resolving namespace prefixes
/// itself so the result does not depend on platform differences.
///
/// The first problem is kept and every later event ignored; the parser is never stopped from a
/// callback: `XMLParser.abortParsing()` there crashes inside libxml2 on Linux for some inputs
/// (found by the `csdl` fuzz target: a document declaring `encoding="utf-7"` with a broken tag).
final class XMLTreeBuilder: NSObject, XMLParserDelegate {
    private var stack: [XMLNode] = []
    /// Qualified names of the open elements, to check that end tags match (the Linux
    /// XMLParser recovers from mismatched tags instead of failing).
    private var openNames: [String] = []
    private var prefixStack: [[String: String]] = [[:]]
    private(set) var root: XMLNode?
    private var failure: MetadataError?
    private static let maxDepth = 256

    static func parse(_ data: Data) throws(MetadataError) -> XMLNode {
        // Foundation's parser on Linux traps on names that are not UTF-8, and stopping it after
        // an encoding switch crashed libxml2 (both found by fuzzing): only UTF-8 is read.
        let bytes = [UInt8](data)
        if let bad = DecodedText.firstInvalidUTF8(bytes) {
            throw MetadataError(.malformedXML, "The document is not UTF-8 text: byte \(bad) starts no UTF-8 character",
                                line: 1 + bytes.prefix(bad).filter { $0 == 0x0A }.count, column: 1, elementPath: "")
        }
        if let declared = Self.declaredEncoding(bytes), !["utf-8", "utf8", "us-ascii", "ascii"].contains(declared.lowercased()) {
            throw MetadataError(.malformedXML, "The document declares encoding \(declared); only UTF-8 is read",
                                line: 1, column: 1, elementPath: "")
        }
        if let offset = Self.malformedComment(bytes) {
            throw MetadataError(.malformedXML, "A comment contains '--' before its end; XML does not allow that",
                                line: 1 + bytes.prefix(offset).filter { $0 == 0x0A }.count, column: 1, elementPath: "")
        }
        if let offset = Self.processingInstruction(bytes) {
            throw MetadataError(.malformedXML, "Processing instructions (<?…?>) other than the XML declaration are not read",
                                line: 1 + bytes.prefix(offset).filter { $0 == 0x0A }.count, column: 1, elementPath: "")
        }
        let builder = XMLTreeBuilder()
        let parser = XMLParser(data: data)
        parser.shouldProcessNamespaces = false
        parser.shouldReportNamespacePrefixes = false
        parser.shouldResolveExternalEntities = false
        parser.delegate = builder
        let ok = parser.parse()
        if let failure = builder.failure { throw failure }
        if !builder.openNames.isEmpty {
            throw MetadataError(.malformedXML, "Malformed XML: <\(builder.openNames.last ?? "")> is never closed", line: max(parser.lineNumber, 1),
                                column: max(parser.columnNumber, 1), elementPath: builder.stack.last?.path ?? "")
        }
        if !ok || builder.root == nil {
            let reason = parser.parserError.map { describe($0) } ?? "the document is empty or not XML"
            throw MetadataError(.malformedXML, "Malformed XML: \(reason)", line: max(parser.lineNumber, 1),
                                column: max(parser.columnNumber, 1), elementPath: builder.stack.last?.path ?? "")
        }
        guard let root = builder.root else {
            throw MetadataError(.malformedXML, "The document is empty", line: 1, column: 1, elementPath: "")
        }
        return root
    }

    /// The offset of a processing instruction other than the XML declaration at the start (outside
    /// comments and CDATA), if any. Foundation's parser on Linux crashes on one without data
    /// (`<?x?>`, found by fuzzing), and CSDL and error documents have no use for them.
    static func processingInstruction(_ bytes: [UInt8]) -> Int? {
        var i = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
        func starts(_ text: String, at index: Int) -> Bool { bytes[index...].starts(with: text.utf8) }
        // The declaration: `<?xml` and whitespace, only at the very start. It ends at its first
        // `>`, which must follow `?` (no value in it may hold a `>`): `<?xml\t><?x?>` is a
        // broken declaration, not one that ends after the next instruction (found by fuzzing).
        if starts("<?xml", at: i), i + 5 < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[i + 5]) {
            let start = i
            while i < bytes.count, bytes[i] != UInt8(ascii: ">") { i += 1 }
            guard i < bytes.count, bytes[i - 1] == UInt8(ascii: "?") else { return start }
            i += 1
        }
        while i + 1 < bytes.count {
            if bytes[i] == UInt8(ascii: "<") {
                if starts("<!--", at: i) {
                    guard let end = bytes[(i + 4)...].firstRange(of: Array("-->".utf8)) else { return nil }
                    i = end.upperBound
                    continue
                }
                if starts("<![CDATA[", at: i) {
                    guard let end = bytes[(i + 9)...].firstRange(of: Array("]]>".utf8)) else { return nil }
                    i = end.upperBound
                    continue
                }
                if bytes[i + 1] == UInt8(ascii: "?") { return i }
            }
            i += 1
        }
        return nil
    }

    /// The offset of a comment that contains `--` before its end (outside CDATA), if any. XML
    /// does not allow one, and libxml2 ends such a comment elsewhere than the pre-check of
    /// processing instructions does: a `<?…?>` after it then reached Foundation's parser and
    /// crashed it (found by fuzzing).
    static func malformedComment(_ bytes: [UInt8]) -> Int? {
        var i = 0
        while i + 3 < bytes.count {
            if bytes[i] == UInt8(ascii: "<"), bytes[(i + 1)...].starts(with: "![CDATA[".utf8) {
                guard let end = bytes[(i + 9)...].firstRange(of: Array("]]>".utf8)) else { return nil }
                i = end.upperBound
                continue
            }
            if bytes[i] == UInt8(ascii: "<"), bytes[(i + 1)...].starts(with: "!--".utf8) {
                guard let dashes = bytes[(i + 4)...].firstRange(of: Array("--".utf8)) else { return nil }
                guard dashes.upperBound < bytes.count, bytes[dashes.upperBound] == UInt8(ascii: ">") else { return i }
                i = dashes.upperBound + 1
                continue
            }
            i += 1
        }
        return nil
    }

    /// The `encoding` of the XML declaration, if the document starts with one.
    static func declaredEncoding(_ bytes: [UInt8]) -> String? {
        var start = 0
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { start = 3 }
        let head = String(decoding: bytes[start..<min(bytes.count, start + 200)], as: UTF8.self)
        guard head.hasPrefix("<?xml"), let end = head.range(of: "?>") else { return nil }
        let declaration = head[..<end.lowerBound]
        guard let key = declaration.range(of: "encoding") else { return nil }
        let rest = declaration[key.upperBound...].drop { $0 == " " || $0 == "=" }
        guard let quote = rest.first, quote == "\"" || quote == "'" else { return nil }
        return String(rest.dropFirst().prefix { $0 != quote })
    }

    private static func describe(_ error: any Error) -> String {
        let nsError = error as NSError
        if let message = nsError.userInfo[NSLocalizedDescriptionKey] as? String, !message.isEmpty {
            return message.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let known: [Int: String] = [
            4: "the document is empty or does not start with an element", 5: "the document ends too early or has extra content",
            9: "invalid character", 23: "'>' or '/>' expected in a tag", 26: "undeclared entity", 38: "attribute value must be quoted",
            39: "'<' not allowed in an attribute value", 40: "attribute value not closed", 41: "attribute without a value",
            42: "attribute redefined", 64: "XML declaration malformed", 65: "whitespace required", 68: "name expected",
            73: "'>' expected", 76: "end tag does not match the start tag", 77: "the document ends inside a tag",
        ]
        return "\(known[nsError.code] ?? "XML parser error") (libxml2 code \(nsError.code))"
    }

    func parser(_ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
                qualifiedName qName: String?, attributes attributeDict: [String: String] = [:]) {
        guard failure == nil else { return }
        var prefixes = prefixStack.last ?? [:]
        for (name, value) in attributeDict {
            if name == "xmlns" {
                prefixes[""] = value
            } else if name.hasPrefix("xmlns:") {
                prefixes[String(name.dropFirst(6))] = value
            }
        }
        prefixStack.append(prefixes)
        let (prefix, local) = split(elementName)
        let ns = prefixes[prefix ?? ""]
        var attributes: [XMLNode.Attribute] = []
        for name in attributeDict.keys.sorted() {
            guard let value = attributeDict[name], name != "xmlns", !name.hasPrefix("xmlns:") else { continue }
            let (attrPrefix, attrLocal) = split(name)
            attributes.append(.init(localName: attrLocal, namespaceURI: attrPrefix.flatMap { prefixes[$0] }, value: value))
        }
        let label = attributeDict["Name"] ?? attributeDict["Namespace"] ?? attributeDict["Term"] ?? attributeDict["Target"]
        let step = label.map { "\(local)[\($0)]" } ?? local
        let path = (stack.last.map { $0.path + "/" } ?? "") + step
        let node = XMLNode(localName: local, namespaceURI: ns, attributes: attributes,
                           line: parser.lineNumber, column: parser.columnNumber, path: path)
        if stack.count >= Self.maxDepth {
            failure = MetadataError(.malformedXML, "Elements nested deeper than \(Self.maxDepth) levels", line: parser.lineNumber,
                                    column: parser.columnNumber, elementPath: path)
            return
        }
        if let parent = stack.last {
            parent.children.append(node)
        } else {
            root = node
        }
        stack.append(node)
        openNames.append(elementName)
    }

    func parser(_ parser: XMLParser, parseErrorOccurred parseError: any Error) {
        guard failure == nil else { return }
        failure = MetadataError(.malformedXML, "Malformed XML: \(Self.describe(parseError))", line: max(parser.lineNumber, 1),
                                column: max(parser.columnNumber, 1), elementPath: stack.last?.path ?? "")
    }

    func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName qName: String?) {
        guard failure == nil else { return }
        if let open = openNames.last, open != elementName {
            failure = MetadataError(.malformedXML, "Malformed XML: end tag </\(elementName)> does not match <\(open)>",
                                    line: max(parser.lineNumber, 1), column: max(parser.columnNumber, 1), elementPath: stack.last?.path ?? "")
            return
        }
        _ = openNames.popLast()
        _ = stack.popLast()
        _ = prefixStack.popLast()
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) {
        stack.last?.text += string
    }

    private func split(_ name: String) -> (String?, String) {
        guard let colon = name.firstIndex(of: ":") else { return (nil, name) }
        return (String(name[..<colon]), String(name[name.index(after: colon)...]))
    }
}
