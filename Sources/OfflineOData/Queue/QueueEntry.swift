import Foundation
import ODataCore

/// A queued request with what the queue algorithms need to know about it: which entity it
/// changes, which other entities it names, and what kind of change it is.
struct QueueEntry: Sendable {
    enum Kind: Sendable, Equatable {
        case create
        /// PATCH or MERGE (`replace` false), PUT (`replace` true).
        case update(replace: Bool)
        case delete
        /// A `$ref` request: adding (`remove` false) or removing a link.
        case link(remove: Bool)
        /// `PUT Set(key)/$value`: a new media stream for the entity.
        case media
        case other
    }

    var request: QueuedRequest
    var kind: Kind
    /// `Set(key)` of the entity the request changes (after the key map).
    var entity: String?
    /// Other entities the URL or the body names: the parent of a create through a navigation
    /// property, the target of a link, `@odata.bind` targets.
    var references: Set<String>
    /// Entities named in the body (`@odata.bind`): linking may change them too.
    var bound: Set<String>
    /// Entities a delete removed through `OnDelete` cascades, recorded when it was made.
    var cascade: [String]
    /// For a deep insert: the nested entities it creates (after the key map).
    var nested: [String] = []
    /// For a delete: the entity sets its cascade can reach on the backend, whatever the local
    /// store held when it was made (children deleted locally before still exist there until
    /// their own delete arrives).
    var cascadeSets: Set<String> = []

    // Derived from the fields above by `refresh()`: the algorithms compare them pairwise, so
    // they are kept rather than rebuilt on every comparison.
    /// Every entity the request changes or depends on.
    private(set) var touched: Set<String> = []
    /// The entities whose state the request changes: its own entity, the other end of a link,
    /// what a delete cascades to, what the body binds.
    private(set) var changed: Set<String> = []
    /// The entities whose existence or values the request itself decides: its own entity,
    /// what a deep insert nests, what a delete cascades to, the ends of a link. Unlike
    /// `changed`, not the targets a body merely binds to (`@odata.bind`): orders that bind one
    /// customer neither wait for each other nor fail with each other.
    private(set) var produced: Set<String> = []
    /// The entity sets of `touched`.
    private(set) var touchedSets: Set<String> = []

    var id: Int64 { request.id }
    /// A media request: its body is a stream (a media create, or a `$value` PUT).
    var isMedia: Bool { request.mediaType != nil }
    var isSent: Bool { request.firstSent != nil }

    /// Recomputes the derived sets; call after changing the fields they come from.
    mutating func refresh() {
        touched = references.union(cascade).union(nested)
        if let entity { touched.insert(entity) }
        changed = Set(cascade).union(bound).union(nested)
        if let entity { changed.insert(entity) }
        if case .link = kind { changed.formUnion(references) }
        produced = Set(cascade).union(nested)
        if let entity { produced.insert(entity) }
        if case .link = kind { produced.formUnion(references) }
        touchedSets = Set(touched.map { String($0.prefix { $0 != "(" }) })
    }

    /// Whether the two requests must keep their order: they touch a common entity, or one is
    /// a delete whose cascade can reach an entity set the other touches.
    func conflicts(with other: QueueEntry) -> Bool {
        if !touched.isDisjoint(with: other.touched) { return true }
        if !cascadeSets.isEmpty, !cascadeSets.isDisjoint(with: other.touchedSets) { return true }
        return !other.cascadeSets.isEmpty && !other.cascadeSets.isDisjoint(with: touchedSets)
    }

    /// Whether `self` (later in the queue) depends on `earlier`: it touches an entity
    /// `earlier` changes.
    func dependsOn(_ earlier: QueueEntry) -> Bool {
        !earlier.changed.isDisjoint(with: touched)
    }
}

extension QueueEntry {
    /// Analyses queued requests. `keyMap` maps local references (`Set(-1)`) to the backend's.
    static func analyse(
        _ requests: [QueuedRequest], model: Model, serviceRoot: String, keyMap: [String: String]
    ) -> [QueueEntry] {
        requests.map { analyse($0, model: model, serviceRoot: serviceRoot, keyMap: keyMap) }
    }

    static func analyse(
        _ request: QueuedRequest, model: Model, serviceRoot: String, keyMap: [String: String]
    ) -> QueueEntry {
        func mapped(_ reference: String) -> String { keyMap[reference] ?? reference }
        let entity = request.entitySet.map { mapped($0 + (request.entityKey ?? "")) }
        var references: Set<String> = []
        let target = try? LocalChange.parseTarget(request.url, model: model, serviceRoot: serviceRoot)
        if let target {
            if let key = target.key {
                references.insert(mapped(target.entitySet + Keys.predicate(key, in: target.entitySet, model: model)))
            }
            if let key = target.navigationKey, let navigation = target.navigation,
                let set = model.targetEntitySet(from: target.entitySet, navigationPath: navigation)?.name
            {
                references.insert(mapped(set + Keys.predicate(key, in: set, model: model)))
            }
        }
        var bound: Set<String> = []
        if !request.body.isEmpty, request.mediaType == nil, let json = try? JSONValue.parse(request.body) {
            collectReferences(json, model: model, serviceRoot: serviceRoot, into: &bound, mapped: mapped)
        }
        references.formUnion(bound)
        if let entity {
            references.remove(entity)
            bound.remove(entity)
        }
        let kind: Kind
        if target?.isRef == true {
            kind = .link(remove: request.method == "DELETE")
        } else if request.isCreate {
            kind = .create
        } else if target?.isValue == true {
            kind = .media
        } else {
            switch request.method {
            case "PATCH", "MERGE": kind = .update(replace: false)
            case "PUT": kind = .update(replace: true)
            case "DELETE": kind = .delete
            default: kind = .other
            }
        }
        var entry = QueueEntry(
            request: request, kind: kind, entity: entity, references: references, bound: bound,
            cascade: request.cascade.map(mapped))
        if kind == .delete, let set = request.entitySet { entry.cascadeSets = cascadeSets(from: set, model: model) }
        entry.nested = request.nested.map { mapped($0.entity) }
        entry.refresh()
        return entry
    }

    /// Entity sets reachable from `entitySet` through navigation properties with `OnDelete`
    /// cascade, transitively.
    static func cascadeSets(from entitySet: String, model: Model) -> Set<String> {
        var result: Set<String> = []
        var work = [entitySet]
        while let set = work.popLast() {
            guard let type = model.entityType(ofEntitySet: set) else { continue }
            for navigation in model.allNavigationProperties(ofStructuredType: type.qualifiedName)
            where navigation.onDelete == .cascade {
                guard let target = model.targetEntitySet(from: set, navigationPath: navigation.name)?.name,
                    result.insert(target).inserted
                else { continue }
                work.append(target)
            }
        }
        return result
    }

    /// Entity references in a request body: `@odata.bind`, `@odata.id`, V2 `__metadata.uri`
    /// and `uri`, at any depth (deep inserts).
    static func collectReferences(
        _ json: JSONValue, model: Model, serviceRoot: String, into references: inout Set<String>,
        mapped: (String) -> String
    ) {
        func add(_ text: String) {
            if let (set, key) = Keys.parse(text, model: model, serviceRoot: serviceRoot) {
                references.insert(mapped(set + Keys.predicate(key, in: set, model: model)))
            }
        }
        switch json {
        case .object(let members):
            for member in members {
                let name = member.name
                if name.hasSuffix("@odata.bind") || name == "@odata.id" || name == "uri" || name.hasSuffix("@odata.id")
                {
                    if let text = member.value.stringValue { add(text) }
                    for item in member.value.arrayValue ?? [] { if let text = item.stringValue { add(text) } }
                } else if name == "__metadata" {
                    continue
                } else if case .object(let inner) = member.value, inner.count == 1, inner[0].name == "__metadata",
                    let uri = inner[0].value["uri"]?.stringValue
                {
                    // V2: a navigation property bound with `{"__metadata": {"uri": ...}}`.
                    add(uri)
                } else {
                    collectReferences(
                        member.value, model: model, serviceRoot: serviceRoot, into: &references, mapped: mapped)
                }
            }
        case .array(let items):
            for item in items {
                collectReferences(item, model: model, serviceRoot: serviceRoot, into: &references, mapped: mapped)
            }
        default:
            break
        }
    }
}

/// The result of a queue algorithm: requests to drop and requests to rewrite.
struct QueueRewrite: Sendable {
    var removed: Set<Int64> = []
    var changed: [Int64: QueuedRequest] = [:]

    var isEmpty: Bool { removed.isEmpty && changed.isEmpty }
}
