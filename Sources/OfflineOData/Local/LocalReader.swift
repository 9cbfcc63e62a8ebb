import Foundation
import ODataCore
import ODataStore

/// Local reads: an OData read request answered from the store with the full query language.
///
/// It owns what a local read decides: the scope check (an entity set no defining query covers
/// reads as empty, not as an error), local keys the backend has replaced (a URL with one still
/// names the entity), `ErrorArchive(n)/AffectedEntity` and `RequestQueue(n)/AffectedEntity`,
/// the refusal of functions and actions (they run on the backend only), media streams
/// (`Set(key)/$value`) and the media annotations of media entities.
struct LocalReader {
    let store: Store
    let serviceRoot: String
    /// Entity sets the defining queries fill (asked only when a read names an entity set; an
    /// error when a query cannot say).
    let covered: @Sendable () async throws -> Set<String>
    /// `Set(localKey)` → `Set(backendKey)` (asked only for URLs with a key).
    let keyMap: @Sendable () async throws -> [String: String]
    let pageSize: Int?

    /// A URL whose entity has a local key the backend replaced names it by the backend's key.
    func rewriteLocalKeys(_ url: String) async throws -> String {
        guard let open = url.firstIndex(of: "("), let close = url[open...].firstIndex(of: ")") else { return url }
        let map = try await keyMap()
        guard !map.isEmpty else { return url }
        let head = String(url[url.startIndex...close])
        // The key as written (`Contacts(-1)`), else in the form the map keeps (V2 writes an
        // Int64 key `-1L`).
        var mapped = map[head]
        if mapped == nil, let (set, key) = Keys.parse(head, model: store.model, serviceRoot: "") {
            mapped = map[set + Keys.predicate(key, in: set, model: store.model)]
        }
        guard let server = mapped else { return url }
        return server + url[url.index(after: close)...]
    }

    /// A local read, with the content type when it is a media stream.
    func read(_ url: String) async throws -> (result: QueryResult, contentType: String?) {
        let model = store.model
        var url = try await rewriteLocalKeys(url)
        switch try await mediaStream(url) {
        case .stream(let contentType, let body)?: return (.value(.primitive(.binary(Data(body)))), contentType)
        case .missing?: return (.entity(nil), nil)
        case nil: break
        }
        if let copy = try await conflictCopy(url) { return (.entity(copy.entity), nil) }
        if let (plain, copies) = Self.conflictExpands(url) {
            return (try await withConflictCopies(try await read(plain).result, copies), nil)
        }
        if let affected = try await affectedEntityURL(url) { url = affected }
        let (_, resolved) = try Keys.resolve(url, model: model, what: "read request")
        for segment in resolved.path.segments {
            switch segment.kind {
            case .functionImport(let name, _), .function(let name, _):
                throw OfflineODataError(
                    .notSupportedOffline, "\(name) is a function; functions run on the backend only, not offline")
            case .actionImport(let name), .action(let name):
                throw OfflineODataError(
                    .notSupportedOffline, "\(name) is an action; actions run on the backend only, not offline")
            default: continue
            }
        }
        if case .entitySet(let set)? = resolved.path.segments.first?.kind, !LocalSchema.systemSets.contains(set) {
            if !(try await covered()).contains(set) {
                let isSingle =
                    resolved.path.segments.count > 1
                    && resolved.path.segments.allSatisfy {
                        if case .key = $0.kind { return true }
                        if case .entitySet = $0.kind { return true }
                        return false
                    }
                return (isSingle ? .entity(nil) : .collection(EntityCollection()), nil)
            }
        }
        do {
            let result = try await store.query(url, pageSize: pageSize)
            return (
                try await annotateMedia(
                    result, entitySet: Self.targetEntitySet(of: resolved.path.segments, model: model)), nil
            )
        } catch let error as OfflineODataError {
            throw error
        } catch {
            throw OfflineODataError(.invalidRequest, "The read request \(url) failed: \(error)")
        }
    }

    /// The entity set a resolved resource path ends in (through navigation properties); nil
    /// when it names none.
    static func targetEntitySet(of segments: [PathSegment], model: Model) -> String? {
        var set: String?
        for segment in segments {
            switch segment.kind {
            case .entitySet(let name): set = name
            case .navigation(let name):
                set = set.flatMap { model.targetEntitySet(from: $0, navigationPath: name)?.name }
            case .key, .typeCast: continue
            default: return nil
            }
        }
        return set
    }

    /// The navigations of an ErrorArchive row to the copies a conflict keeps (SPEC §15).
    static let conflictNavigations = ["AffectedEntity", "BackendEntity", "OriginalEntity"]

    /// `ErrorArchive(n)/BackendEntity` or `ErrorArchive(n)/OriginalEntity`: the copy kept for
    /// that request (`entity` nil when none is), with its `$select` applied (the only option a
    /// copy takes; others are refused). Nil when `url` names neither.
    func conflictCopy(_ url: String) async throws -> ConflictCopyRead? {
        let parts = url.split(separator: "?", maxSplits: 1).map(String.init)
        let path = parts.first ?? url
        guard path.hasPrefix(LocalSchema.errorArchive + "("), let close = path.firstIndex(of: ")") else { return nil }
        let idText = path[path.index(path.startIndex, offsetBy: LocalSchema.errorArchive.count + 1)..<close]
        let tail = path[path.index(after: close)...]
        // V2 writes an Int64 key with its suffix: `ErrorArchive(5L)`.
        let digits = idText.hasSuffix("L") || idText.hasSuffix("l") ? idText.dropLast() : idText[...]
        guard let id = Int64(digits), tail == "/BackendEntity" || tail == "/OriginalEntity" else { return nil }
        let model = store.model
        let (entity, set) = try await store.read { reader -> (Entity?, String?) in
            let entity = try ConflictCopies.copy(
                requestID: id, backend: tail == "/BackendEntity", connection: reader.connection, model: model)
            let row = try reader.connection.query(
                "SELECT entity_set FROM oo_conflict WHERE request_id = ?", [.integer(id)]
            ).first
            guard case .text(let set)? = row?.first else { return (entity, nil) }
            return (entity, set)
        }
        let name = String(tail.dropFirst())
        guard parts.count == 2 else { return ConflictCopyRead(entity: entity) }
        return ConflictCopyRead(
            entity: try Self.selected(
                entity, options: Self.options(parts[1], separator: "&"), of: name, in: set, model: model))
    }

    /// `entity` with only the properties a copy's `$select` names (`*` for all). Any other
    /// option is refused, as is a property the copy's entity type does not have.
    static func selected(
        _ entity: Entity?, options: [String], of name: String, in set: String?, model: Model
    ) throws -> Entity? {
        var names: Set<String>?
        for option in options {
            let decoded = option.removingPercentEncoding ?? option
            guard decoded.hasPrefix("$select=") else {
                let optionName = decoded.prefix { $0 != "=" }
                throw OfflineODataError(
                    .invalidRequest,
                    "ErrorArchive: \(name) takes only $select; \(optionName) is not supported on the copies")
            }
            let list = decoded.dropFirst("$select=".count).split(separator: ",").map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            names = (names ?? []).union(list)
        }
        guard let names, !names.contains("*") else { return entity }
        // Checked against the copy's entity type, whether or not the copy exists.
        let type = set.flatMap { model.entitySet($0)?.entityType }
        if let known = type.map({ Set(model.allProperties(ofStructuredType: $0).map(\.name)) })
            ?? entity.map({
                Set($0.properties.map(\.name))
            }),
            let unknown = names.sorted().first(where: { !known.contains($0) })
        {
            throw OfflineODataError(
                .invalidRequest, "ErrorArchive: $select of \(name) names \(unknown), which the copy does not have")
        }
        guard var entity else { return nil }
        entity.properties = entity.properties.filter { names.contains($0.name) }
        return entity
    }

    /// Decoded option text made fit to go back into a URL: the characters that would end or
    /// change it (`%`, `&`, `#`, `+`) encoded again, so that it is decoded once, as sent.
    static func reencoded(_ text: String) -> String {
        var out = ""
        for character in text {
            switch character {
            case "%": out += "%25"
            case "&": out += "%26"
            case "#": out += "%23"
            case "+": out += "%2B"
            default: out.append(character)
            }
        }
        return out
    }

    /// The options of a query (`separator` "&") or of an expanded navigation (";"), split
    /// outside parentheses and quotes: `'…'` (a doubled `''` stays inside) and the JSON
    /// strings `"…"` of 4.01 (`\"` stays inside). A `"` never closed is taken as plain text
    /// (a `$search` phrase cut short must not swallow the options after it).
    static func options(_ text: String, separator: Character) -> [String] {
        options(text, separator: separator, doubleQuotes: true)
            ?? options(text, separator: separator, doubleQuotes: false)
            ?? []
    }

    /// The split, or nil when `doubleQuotes` is on and a `"` string is not closed.
    private static func options(_ text: String, separator: Character, doubleQuotes: Bool) -> [String]? {
        var parts: [String] = []
        var current = ""
        var depth = 0
        var quote: Character?
        var escaped = false
        for character in text {
            if let open = quote {
                if escaped {
                    escaped = false
                } else if open == "\"" && character == "\\" {
                    escaped = true
                } else if character == open {
                    quote = nil
                }
                current.append(character)
                continue
            }
            switch character {
            case "'": quote = character
            case "\"" where doubleQuotes: quote = character
            case "(": depth += 1
            case ")": depth = max(0, depth - 1)
            case separator where depth == 0:
                parts.append(current)
                current = ""
                continue
            default: break
            }
            current.append(character)
        }
        if quote == "\"" { return nil }
        if !current.isEmpty { parts.append(current) }
        return parts.filter { !$0.isEmpty }
    }

    /// A copy kept with an ErrorArchive row, as read: nil when that copy does not exist.
    struct ConflictCopyRead {
        var entity: Entity?
    }

    /// A read of ErrorArchive that expands `AffectedEntity`, `BackendEntity` or
    /// `OriginalEntity`: the URL without them, and the ones asked for with their options
    /// (`BackendEntity($select=Phone)`, as a query: `$select=Phone`). Nil otherwise.
    static func conflictExpands(_ url: String) -> (String, [(name: String, options: String?)])? {
        guard url.hasPrefix(LocalSchema.errorArchive) else { return nil }
        let parts = url.split(separator: "?", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { return nil }
        var asked: [(name: String, options: String?)] = []
        var options: [String] = []
        for option in Self.options(parts[1], separator: "&") {
            let decoded = option.removingPercentEncoding ?? option
            guard decoded.hasPrefix("$expand=") else {
                options.append(option)
                continue
            }
            var kept: [String] = []
            for item in Self.options(String(decoded.dropFirst("$expand=".count)), separator: ",").map({
                $0.trimmingCharacters(in: .whitespaces)
            }) {
                let name = String(item.prefix { $0 != "(" }).trimmingCharacters(in: .whitespaces)
                guard conflictNavigations.contains(name) else {
                    kept.append(item)
                    continue
                }
                var nested: String?
                if let open = item.firstIndex(of: "("), item.hasSuffix(")") {
                    let inner = String(item[item.index(after: open)..<item.index(before: item.endIndex)])
                    nested = Self.options(inner, separator: ";").map(Self.reencoded).joined(separator: "&")
                }
                asked.append((name, nested))
            }
            if !kept.isEmpty { options.append("$expand=" + kept.map(Self.reencoded).joined(separator: ",")) }
        }
        guard !asked.isEmpty else { return nil }
        return (parts[0] + (options.isEmpty ? "" : "?" + options.joined(separator: "&")), asked)
    }

    /// `result` (ErrorArchive rows) with the copies `names` inline on each row, each read with
    /// its options (the affected entity takes what a read of it takes; the kept copies take
    /// `$select`).
    func withConflictCopies(
        _ result: QueryResult, _ names: [(name: String, options: String?)]
    ) async throws -> QueryResult {
        func expanded(_ row: Entity) async throws -> Entity {
            guard case .primitive(.int64(let id))? = row["RequestID"] else {
                // A $select without the key leaves nothing to find the copies by: said, not
                // answered without them.
                throw OfflineODataError(
                    .invalidRequest,
                    "ErrorArchive: $expand of \(names.map(\.name).joined(separator: ", ")) needs RequestID in $select")
            }
            var row = row
            for (name, options) in names {
                var value = NavigationValue(name: name)
                let query = options.map { "?" + $0 } ?? ""
                switch name {
                case "AffectedEntity":
                    let target = try await store.read { reader in
                        try LocalSchema.affectedEntity(ofRequest: id, reader.connection)
                    }
                    var entity: Entity?
                    if let target,
                        case .entity(let found) = try await read(try await rewriteLocalKeys(target) + query).result
                    {
                        entity = found
                    }
                    value.inline = .entity(entity)
                default:
                    value.inline = .entity(try await conflictCopy("ErrorArchive(\(id))/\(name)" + query)?.entity)
                }
                row.navigation.append(value)
            }
            return row
        }
        switch result {
        case .entity(let row?): return .entity(try await expanded(row))
        case .collection(var collection):
            var rows: [Entity] = []
            for row in collection.entities { rows.append(try await expanded(row)) }
            collection.entities = rows
            return .collection(collection)
        default: return result
        }
    }

    /// `ErrorArchive(n)/AffectedEntity…` and `RequestQueue(n)/AffectedEntity…` → the entity's own URL.
    func affectedEntityURL(_ url: String) async throws -> String? {
        for set in [LocalSchema.errorArchive, LocalSchema.requestQueue] {
            guard url.hasPrefix(set + "(") else { continue }
            let rest = url.dropFirst(set.count + 1)
            guard let close = rest.firstIndex(of: ")"), let id = Int64(rest[rest.startIndex..<close]) else { continue }
            let tail = rest[rest.index(after: close)...]
            guard tail.hasPrefix("/AffectedEntity") else { continue }
            let after = String(tail.dropFirst("/AffectedEntity".count))
            let target = try await store.read { reader in
                try LocalSchema.affectedEntity(ofRequest: id, reader.connection)
            }
            guard let target else { throw OfflineODataError(.invalidRequest, "\(set)(\(id)) has no affected entity") }
            return try await rewriteLocalKeys(target) + after
        }
        return nil
    }

    /// `Set(key)/$value` of a media entity: its stored stream. Nil when `url` does not name a
    /// media stream; `.missing` when the entity is not in the store.
    func mediaStream(_ url: String) async throws -> MediaStream? {
        let path = url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? url
        guard path.hasSuffix("/$value") else { return nil }
        let model = store.model
        let entityURL = String(path.dropLast("/$value".count))
        guard let (set, key) = Keys.parse(entityURL, model: model, serviceRoot: serviceRoot),
            model.entityType(ofEntitySet: set)?.hasStream == true
        else { return nil }
        let predicate = Keys.predicate(key, in: set, model: model)
        let found = try await store.read { reader -> (exists: Bool, row: [DatabaseValue]?) in
            guard try reader.bookkeeping(in: set, key: key) != nil else { return (false, nil) }
            return (
                true,
                try reader.connection.query(
                    "SELECT content_type, body FROM oo_streams WHERE entity_set = ? AND entity_key = ?",
                    [.text(set), .text(predicate)]
                ).first
            )
        }
        guard found.exists else { return .missing }
        guard let row = found.row, case .blob(let body) = row[1] else {
            throw OfflineODataError(
                .notSupportedOffline,
                "The media stream of \(set)\(predicate) is not in the offline store: its defining query does not retrieve streams (automaticallyRetrievesStreams), or the backend had none"
            )
        }
        var contentType = "application/octet-stream"
        if case .text(let type) = row[0] { contentType = type }
        return .stream(contentType: contentType, body: body)
    }

    /// A media stream read from the store.
    enum MediaStream: Sendable {
        case missing
        case stream(contentType: String, body: [UInt8])
    }

    /// Media entities read from the store carry their stored stream's content type and read
    /// link (`@odata.mediaContentType`, `@odata.mediaReadLink` = `Set(key)/$value`), also
    /// inside `$expand`; those without a stored stream carry neither.
    func annotateMedia(_ result: QueryResult, entitySet: String?) async throws -> QueryResult {
        let model = store.model
        guard let entitySet else { return result }
        var entities: [Entity]
        switch result {
        case .collection(let collection): entities = collection.entities
        case .entity(let entity?): entities = [entity]
        default: return result
        }
        // Only media sets the answer holds (itself, or inside `$expand`) are looked up.
        var mediaSets: Set<String> = []
        for entity in entities { Self.collectMediaSets(entity, in: entitySet, model: model, into: &mediaSets) }
        guard !mediaSets.isEmpty else { return result }
        let sets = mediaSets.sorted()
        // `Set(key)` → content type of every stored stream of those sets.
        let types = try await store.read { reader -> [String: String] in
            var types: [String: String] = [:]
            let rows = try reader.connection.query(
                "SELECT entity_set, entity_key, content_type FROM oo_streams WHERE entity_set IN (\(sets.map { _ in "?" }.joined(separator: ", ")))",
                sets.map { .text($0) })
            for row in rows {
                guard case .text(let set) = row[0], case .text(let key) = row[1] else { continue }
                if case .text(let type) = row[2] {
                    types[set + key] = type
                } else {
                    types[set + key] = "application/octet-stream"
                }
            }
            return types
        }
        guard !types.isEmpty else { return result }
        for index in entities.indices { Self.annotate(&entities[index], in: entitySet, types: types, model: model) }
        switch result {
        case .collection(var collection):
            collection.entities = entities
            return .collection(collection)
        default:
            return .entity(entities.first)
        }
    }

    /// The media entity sets of an entity and its expanded children.
    static func collectMediaSets(_ entity: Entity, in entitySet: String, model: Model, into sets: inout Set<String>) {
        if model.entityType(ofEntitySet: entitySet)?.hasStream == true { sets.insert(entitySet) }
        for navigation in entity.navigation {
            guard let inline = navigation.inline,
                let target = model.targetEntitySet(from: entitySet, navigationPath: navigation.name)?.name
            else { continue }
            switch inline {
            case .entity(let child?): collectMediaSets(child, in: target, model: model, into: &sets)
            case .collection(let children):
                for child in children.entities { collectMediaSets(child, in: target, model: model, into: &sets) }
            case .entity(nil): continue
            }
        }
    }

    /// Annotates one entity and its expanded children.
    static func annotate(_ entity: inout Entity, in entitySet: String, types: [String: String], model: Model) {
        if model.entityType(ofEntitySet: entitySet)?.hasStream == true,
            let key = Keys.key(of: entity, in: entitySet, model: model)
        {
            let reference = entitySet + Keys.predicate(key, in: entitySet, model: model)
            if let type = types[reference] {
                entity.control.mediaContentType = type
                entity.control.mediaReadLink = reference + "/$value"
            }
        }
        for index in entity.navigation.indices {
            guard let inline = entity.navigation[index].inline,
                let target = model.targetEntitySet(from: entitySet, navigationPath: entity.navigation[index].name)?.name
            else { continue }
            switch inline {
            case .entity(var child?):
                annotate(&child, in: target, types: types, model: model)
                entity.navigation[index].inline = .entity(child)
            case .collection(var children):
                for i in children.entities.indices {
                    annotate(&children.entities[i], in: target, types: types, model: model)
                }
                entity.navigation[index].inline = .collection(children)
            case .entity(nil):
                continue
            }
        }
    }
}
