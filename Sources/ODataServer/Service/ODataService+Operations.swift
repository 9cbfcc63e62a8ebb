import Foundation
import ODataCore
import ODataStore

extension ODataService {
    /// Function imports of the sample service: `GetProductsByCategory(CategoryID='C1')`.
    func callFunction(_ request: ServiceRequest, _ parsed: ParsedURL) async throws -> ServiceResponse {
        var name = ""
        var arguments: [String: Value] = [:]
        switch parsed.path.segments.first?.kind {
        case .functionImport(let n, let args)?:
            name = n
            guard model.functionImport(n) != nil else {
                if model.entitySet(n) != nil {
                    throw ServiceFailure(400, "BadKey", "\(n)() has an empty key: an entity set needs a key value in parentheses")
                }
                throw ServiceFailure(404, "NotFound", "\(n) is not a function import of this service")
            }
            try model.checkArguments(args, ofFunction: n, isImport: true, aliases: parsed.query.aliases, input: request.target,
                                     offset: parsed.path.segments.first?.offset ?? 0)
            for argument in args {
                switch argument.value.node {
                case .literal(let value): arguments[argument.name] = value
                case .alias(let alias): if case .literal(let value)? = parsed.query.aliases[alias]?.node { arguments[argument.name] = value }
                default: break
                }
            }
        case .unresolved(let n)?:
            // V2 passes parameters as query options: GetProductsByCategory?CategoryID='C1'
            name = n
            // `Name(P='x')`: the syntax tree keeps the parameters as a named key.
            if parsed.path.segments.count > 1, case .key(let parts) = parsed.path.segments[1].kind {
                let named = parts.compactMap { part in part.name.map { NamedArgument(name: $0, value: part.value) } }
                guard named.count == parts.count else {
                    throw ServiceFailure(400, "BadParameter", "The parameters of \(n) need names (Name=value)")
                }
                try model.checkArguments(named, ofFunction: n, isImport: true, aliases: parsed.query.aliases,
                                         input: request.target,
                                         offset: parsed.path.segments[1].offset)
                for part in parts {
                    guard let partName = part.name else { continue }
                    switch part.value.node {
                    case .literal(let value): arguments[partName] = value
                    case .alias(let alias): if case .literal(let value)? = parsed.query.aliases[alias]?.node { arguments[partName] = value }
                    default: break
                    }
                }
            }
            // Query options named like the import's parameters are its arguments, parsed as
            // literals and checked against the parameters' types like arguments in parentheses.
            let item = model.functionImport(n)
            let parameters = item.map { item in item.function.flatMap { model.functions($0).first?.parameters } ?? item.parameters }
            let parameterNames = Set((parameters ?? []).map(\.name))
            var queryArguments: [NamedArgument] = []
            for option in parsed.query.custom where parameterNames.contains(option.name) {
                guard let text = option.value, !text.isEmpty else {
                    throw ServiceFailure(400, "BadParameter", "\(n): the parameter \(option.name) has no value")
                }
                let value: Value
                do {
                    value = try Literal.parse(text, version: request.version.grammar)
                } catch {
                    throw ServiceFailure(400, "BadParameter", "\(n): \(option.name)=\(text) is not a literal: \(error)")
                }
                queryArguments.append(NamedArgument(name: option.name, value: CommonExpression(.literal(value), at: 0)))
                arguments[option.name] = value
            }
            var inParentheses = false
            if parsed.path.segments.count > 1, case .key = parsed.path.segments[1].kind { inParentheses = true }
            if request.version.isLegacy, !inParentheses {
                try model.checkArguments(queryArguments, ofFunction: n, isImport: true, input: request.target, offset: 0)
            }
            for (alias, expression) in parsed.query.aliases { if case .literal(let value) = expression.node { arguments[alias] = value } }
        default:
            throw ServiceFailure(404, "NotFound", "Unknown function")
        }
        switch name {
        case "GetProductsByCategory":
            guard case .primitive(.string(let category))? = arguments["CategoryID"] else {
                throw ServiceFailure(400, "BadParameter", "GetProductsByCategory needs a string CategoryID")
            }
            // The function's own filter, and the request's query options over its result.
            let escaped = category.replacingOccurrences(of: "'", with: "''").addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            var options = ["$filter=CategoryID%20eq%20'\(escaped)'"]
            var ordered = false
            for (name, raw) in Self.systemOptions(in: request.target, version: request.version) {
                switch name.lowercased() {
                // `read` parsed the whole target already: the filter is one complete expression,
                // so in parentheses it cannot reach past them.
                case "$filter": options[0] += "%20and%20(" + raw + ")"
                case "$orderby":
                    ordered = true
                    options.append(name + "=" + raw)
                default: options.append(name + "=" + raw)
                }
            }
            if !ordered { options.append("$orderby=ProductID") }
            // Only the products the user may see.
            if let filter = rowFilter(request, "Products") {
                options[0] += "%20and%20(" + RowFilterText.encoded(filter) + ")"
            }
            let counted = parsed.path.segments.contains { $0.kind == .count }
            let result = try await store.query("Products" + (counted ? "/$count" : "") + "?" + options.joined(separator: "&"),
                                               version: request.version, pageSize: nil)
            if case .count(let count) = result { return .text(String(count), version: request.version) }
            guard case .collection(var collection) = result, let table = store.schema.table(forEntitySet: "Products") else {
                throw ServiceFailure(500, "InternalError", "GetProductsByCategory did not return a collection")
            }
            if parsed.query.expand != nil {
                collection.entities = try await hidingInvisible(collection.entities, of: table, for: request)
            }
            if request.isV2 {
                collection.entities = collection.entities.map { decorateV2($0, table, root: request.serviceRoot ?? "") }
                return .json(200, V2JSONWriter().write(collection), version: request.version)
            }
            collection.context = request.contextURL("Products")
            return .json(200, V4JSONWriter().write(collection), version: request.version)
        default:
            throw ServiceFailure(501, "NotImplemented", "The function import \(name) has no implementation in this service")
        }
    }

    /// The system query options of a request target as `$name` and the value as sent; V4.01
    /// names without `$` (`filter=`) count too.
    static func systemOptions(in target: String, version: ODataVersion) -> [(String, String)] {
        guard let question = target.firstIndex(of: "?") else { return [] }
        return target[target.index(after: question)...].split(separator: "&").compactMap { part in
            guard let equals = part.firstIndex(of: "=") else { return nil }
            let name = part[..<equals].replacingOccurrences(of: "%24", with: "$")
            let bare = !version.isLegacy && URLParser.systemOptions.contains(name.lowercased())
            guard name.hasPrefix("$") || bare else { return nil }
            return ((bare ? "$" : "") + name, String(part[part.index(after: equals)...]))
        }
    }

    /// The order a `POST ConfirmOrder` names (in its body, or V2's `?OrderID='SO1'`); nil for
    /// any other request.
    func confirmOrderID(_ request: ServiceRequest) -> String? {
        guard request.method == "POST", model.actionImport("ConfirmOrder") != nil,
              let path = try? URLParser(version: request.version.grammar).parsePath(request.path),
              case .unresolved("ConfirmOrder")? = path.segments.first?.kind
        else { return nil }
        var orderID: String?
        if !request.body.isEmpty, let json = try? JSONValue.parse(request.body) { orderID = json["OrderID"]?.stringValue }
        if orderID == nil, let parsed = try? URLParser(version: request.version.grammar).parse(request.target) {
            for option in parsed.query.custom where option.name == "OrderID" {
                if case .primitive(.string(let s))? = option.value.flatMap({ try? Literal.parse($0, version: .v2) }) {
                    orderID = s
                }
            }
        }
        return orderID
    }

    /// Action imports of the sample service: `POST ConfirmOrder {"OrderID": "SO1"}`.
    func callAction(_ request: ServiceRequest, _ name: String, _ writer: StoreWriter) throws -> ServiceResponse {
        switch name {
        case "ConfirmOrder":
            guard let orderID = confirmOrderID(request), let table = store.schema.table(forEntitySet: "SalesOrders")
            else {
                throw ServiceFailure(400, "BadParameter", "ConfirmOrder needs an OrderID")
            }
            let key: [String: PrimitiveValue] = ["OrderID": .string(orderID)]
            // An order the user cannot see is not there for it.
            try guardRow(request, table, key)
            guard try writer.reader.entity(in: "SalesOrders", key: key) != nil else { throw ServiceFailure(404, "NotFound", "No order \(orderID)") }
            var change = Entity()
            change["OrderID"] = .primitive(.string(orderID))
            change["Status"] = .enumeration(EnumValue(typeName: "Sales.OrderStatus", members: ["Confirmed"]))
            change.control.etag = Self.newETag()
            try writer.update(change, in: "SalesOrders", replace: false)
            let keyText = "('\(orderID.replacingOccurrences(of: "'", with: "''"))')"
            try recordChange(writer, table, keyText, "upsert", viewers: viewers(request, table, key))
            let order = try writer.reader.entity(in: "SalesOrders", key: key) ?? change
            return representation(order, table, request, status: 200)
        default:
            throw ServiceFailure(501, "NotImplemented", "The action import \(name) has no implementation in this service")
        }
    }
}
