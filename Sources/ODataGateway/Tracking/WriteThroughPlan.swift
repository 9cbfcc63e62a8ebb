import Foundation
import ODataCore

/// One request of an upload that the backend applied (a 2xx answer), as write-through sees it.
struct AppliedRequest: Sendable, Equatable {
    var method: String
    /// The URL as the device sent it (absolute, or relative to the service root; `$<id>`
    /// references to earlier creates of the batch are resolved by the plan).
    var url: String
    var status: Int
    /// The created entity's URL (`Location`, or `OData-EntityId`), when the answer names one.
    var location: String?
    /// Its `Content-ID` in the batch, when it has one.
    var contentID: String?
}

/// Which entities an upload changed, and what that means for each scope (SPEC §13,
/// "Write-through"): a value type without PostgreSQL or HTTP, tested on its own.
struct WriteThroughPlan: Sendable {
    /// One entity the upload changed, by its entity set and typed key.
    struct Entity: Sendable, Equatable {
        var set: String
        /// The key's values, in the order of the entity type's key.
        var key: [KeyPart]
        /// Whether the upload deleted it.
        var deleted: Bool

        struct KeyPart: Sendable, Equatable {
            var name: String
            var value: PrimitiveValue
        }

        /// The forms its key can have as the gateway keeps a row's key (each key value as the
        /// backend's JSON writes it: a number or a string), joined as a refresh joins them.
        var rowKeys: [String] {
            var forms: [String] = [""]
            for (index, part) in key.enumerated() {
                let text = Literal.payloadText(part.value)
                var spellings = [JSONValue.string(text).serialized]
                switch part.value {
                case .byte, .sbyte, .int16, .int32, .int64, .single, .double, .decimal, .boolean:
                    spellings.append(text)
                default: break
                }
                forms = forms.flatMap { prefix in spellings.map { index == 0 ? $0 : prefix + "," + $0 } }
            }
            return forms
        }
    }

    /// The entities changed, each once (a delete after a change of one entity wins).
    var entities: [Entity] = []
    /// Whether a change named no entity the plan can tell (an action, a link, a create whose
    /// answer names no entity): every scope it may touch is made due instead.
    var unknown = false

    /// What to do for one scope.
    enum Action: Sendable, Equatable {
        /// Read the scope's query narrowed to `entities` (by key, a few at a time) and write
        /// what it holds of them; the deleted ones and those the read no longer finds become
        /// tombstones.
        case write(scope: Int64, set: String, entities: [Entity])
        /// Make the scope due: its next download waits for a refresh.
        case due(scope: Int64)
    }

    /// The plan of the requests `applied`, in the order the backend applied them.
    init(applied: [AppliedRequest], gatewayRoot: String, backendRoot: String, model: Model) {
        var locations: [String: String] = [:]
        for request in applied where (200..<300).contains(request.status) {
            let url = ContentIDReferences.resolve(url: request.url, locations)
            if let id = request.contentID, let location = request.location { locations[id] = location }
            let method = request.method.uppercased()
            if let location = request.location, method == "POST" || method == "PUT" {
                if let created = Self.entity(
                    location, gatewayRoot: gatewayRoot, backendRoot: backendRoot, model: model),
                    created.rest.isEmpty
                {
                    add(created.entity)
                } else {
                    unknown = true
                }
            } else if method == "POST" {
                // A create whose answer names no entity, or an action.
                unknown = true
            }
            guard method != "POST" || request.location == nil else { continue }
            guard let target = Self.entity(url, gatewayRoot: gatewayRoot, backendRoot: backendRoot, model: model)
            else {
                unknown = true
                continue
            }
            var entity = target.entity
            if target.rest.isEmpty {
                entity.deleted = method == "DELETE"
            } else if !Self.isPropertyPath(target.rest, set: entity.set, model: model) {
                // A link (`$ref`, a navigation) changes entities the plan cannot name.
                unknown = true
            }
            add(entity)
        }
    }

    private mutating func add(_ entity: Entity) {
        if let index = entities.firstIndex(where: { $0.set == entity.set && $0.key == entity.key }) {
            entities[index].deleted = entity.deleted
        } else {
            entities.append(entity)
        }
    }

    /// Nothing to write through.
    var isEmpty: Bool { entities.isEmpty && !unknown }

    /// What to do for each of `scopes` (those an upload of `uploader` may change: its own, and
    /// those of user "", shared or anonymous). A scope of a changed entity set gets its entities
    /// written; a scope that expands gets them written and is made due too (its nested rows may
    /// hold a changed entity, of its own set or another); another user's scope (an anonymous
    /// one, for a signed-in uploader: it is never read with the uploader's credentials) is made
    /// due; with an unknown change, every scope is made due.
    func actions(
        for scopes: [GatewayStore.ScopeEntry], uploader: String, isShared: (String) -> Bool
    ) -> [Action] {
        var actions: [Action] = []
        for scope in scopes {
            guard !unknown, let query = try? TrackedQuery(target: scope.query) else {
                actions.append(.due(scope: scope.id))
                continue
            }
            let set = query.path.removingPercentEncoding ?? query.path
            let expands = query.options.contains { $0.name == "$expand" }
            let mine = entities.filter { $0.set == set }
            let readable = isShared(scope.query) || scope.user == uploader
            if !mine.isEmpty {
                actions.append(readable ? .write(scope: scope.id, set: set, entities: mine) : .due(scope: scope.id))
                if expands, readable { actions.append(.due(scope: scope.id)) }
            } else if expands, !entities.isEmpty {
                actions.append(.due(scope: scope.id))
            }
        }
        return actions
    }

    /// The scope's query narrowed to `entities`' keys, relative to the backend's root: the
    /// scope's own options (but paging and ordering), its `$filter` and a disjunction of the
    /// keys, each value written by the model's literal writer. Nil when a key cannot be written.
    static func target(query: String, entities: [Entity], version: ODataVersion) -> String? {
        guard let scoped = try? TrackedQuery(target: query), !entities.isEmpty else { return nil }
        var keys: [String] = []
        for entity in entities {
            let terms = entity.key.map { $0.name + " eq " + Literal.format(.primitive($0.value), version: version) }
            guard !terms.isEmpty else { return nil }
            keys.append(terms.count == 1 ? terms[0] : "(" + terms.joined(separator: " and ") + ")")
        }
        let filter = keys.joined(separator: " or ")
        var options = scoped.options.filter {
            !["$top", "$skip", "$orderby", "$skiptoken", "$count", "$inlinecount"].contains($0.name)
        }
        let value = narrowed(options: &options, by: filter)
        options.append(("$filter", value))
        return scoped.path + "?"
            + options.map { $0.value.isEmpty ? $0.name : $0.name + "=" + $0.value }
            .joined(separator: "&")
    }

    /// The value of a `$filter` that keeps the scope's own (taken out of `options`) exactly as
    /// it was sent, and adds `clause` (plain text, encoded here): `(own) and (clause)`. The own
    /// filter is never decoded and encoded again, so a `+` stays a `+`.
    static func narrowed(options: inout [(name: String, value: String)], by clause: String) -> String {
        var allowed = CharacterSet.urlQueryAllowed
        allowed.remove(charactersIn: "&=+#%")
        let encoded = clause.addingPercentEncoding(withAllowedCharacters: allowed) ?? clause
        guard let index = options.firstIndex(where: { $0.name == "$filter" }) else { return encoded }
        let own = options[index].value
        options.remove(at: index)
        return "(" + own + ")%20and%20(" + encoded + ")"
    }

    /// How many keys one narrowed read names.
    static let keysPerRead = 20

    /// The entity `url` names (`Set(key)`, then the rest of its path), or nil when it names none
    /// of the model's entity sets by a key.
    static func entity(
        _ url: String, gatewayRoot: String, backendRoot: String, model: Model
    ) -> (entity: Entity, rest: [PathSegment.Kind])? {
        guard let relative = try? LeavingPath.relative(url, gatewayRoot: gatewayRoot, backendRoot: backendRoot)
        else { return nil }
        let pathText = String(relative.prefix { $0 != "?" })
        guard let path = try? URLParser(version: model.version.grammar).parsePath(pathText),
            path.segments.count >= 2, case .key(let parts) = path.segments[1].kind
        else { return nil }
        let set: String
        switch path.segments[0].kind {
        case .entitySet(let name), .unresolved(let name): set = name
        default: return nil
        }
        guard let type = model.entityType(ofEntitySet: set),
            let values = try? model.keyValues(parts, ofEntitySet: set, aliases: [:])
        else { return nil }
        var key: [Entity.KeyPart] = []
        for name in model.key(of: type).map(\.name) {
            guard let value = values[name] else { return nil }
            key.append(Entity.KeyPart(name: name, value: value))
        }
        return (Entity(set: set, key: key, deleted: false), path.segments.dropFirst(2).map(\.kind))
    }

    /// Whether `rest` (after `Set(key)`) names a property of the entity or its value: a change
    /// of the entity itself.
    static func isPropertyPath(_ rest: [PathSegment.Kind], set: String, model: Model) -> Bool {
        guard let type = model.entityType(ofEntitySet: set), let first = rest.first else { return false }
        let name: String
        switch first {
        case .unresolved(let text), .property(let text): name = text
        default: return false
        }
        guard type.properties.contains(where: { $0.name == name }),
            !type.navigationProperties.contains(where: { $0.name == name })
        else { return false }
        return rest.dropFirst().allSatisfy {
            switch $0 {
            case .value, .unresolved, .property: true
            default: false
            }
        }
    }
}
