import Foundation
import ODataCore
import ODataStore

extension ODataService {
    /// The key predicate of an entity in URL form: `('P1')` or `(OrderID='SO1',ItemPosition=10)`.
    func keyPredicate(_ entity: Entity, _ table: StoreSchema.EntityTable, version: ODataVersion) -> String {
        let parts = table.keyColumns.map { name -> String in
            let literal = entity[name].map { Literal.format($0, version: version) } ?? "null"
            return table.keyColumns.count == 1 ? literal : "\(name)=\(literal)"
        }
        return "(" + parts.joined(separator: ",") + ")"
    }

    /// The key values an entity carries for `table` (fewer than the key when some are missing).
    func keyValues(of entity: Entity, _ table: StoreSchema.EntityTable) -> [String: PrimitiveValue] {
        var key: [String: PrimitiveValue] = [:]
        for name in table.keyColumns { if case .primitive(let value)? = entity[name] { key[name] = value } }
        return key
    }

    /// An entity's key predicate in V4 form, whatever the spelling (or version) of the request
    /// URL: how `server_media` names an entity, and how link changes are recorded.
    func canonicalKeyText(_ key: [String: PrimitiveValue], _ table: StoreSchema.EntityTable) -> String {
        var entity = Entity()
        for (name, value) in key { entity[name] = .primitive(value) }
        return keyPredicate(entity, table, version: .v4)
    }

    /// The content types of the streams stored for media entities of `table` (V2's
    /// `__metadata.content_type`); entities of other types are returned as they are.
    func addMediaContentTypes(_ entities: [Entity], _ table: StoreSchema.EntityTable) async throws -> [Entity] {
        guard model.entityType(table.entityType)?.hasStream == true, !entities.isEmpty else { return entities }
        let set = table.entitySet
        let keys = entities.map { canonicalKeyText(keyValues(of: $0, table), table) }
        // The page's keys only, 500 at a time (SQLite allows 999 parameters).
        let types = try await store.read { reader in
            var types: [String: String] = [:]
            for start in stride(from: 0, to: keys.count, by: 500) {
                let chunk = keys[start..<min(start + 500, keys.count)]
                let sql = "SELECT key, content_type FROM server_media WHERE entity_set = ? AND key IN ("
                    + Array(repeating: "?", count: chunk.count).joined(separator: ", ") + ")"
                for row in try reader.connection.query(sql, [.text(set)] + chunk.map { .text($0) }) {
                    if case .text(let key) = row[0], case .text(let type) = row[1] { types[key] = type }
                }
            }
            return types
        }
        return zip(entities, keys).map { entity, key in
            var entity = entity
            entity.control.mediaContentType = types[key]
            return entity
        }
    }

    /// V2 entities carry their URI and type; nested expanded entities too.
    func decorateV2(_ entity: Entity, _ table: StoreSchema.EntityTable, root: String) -> Entity {
        var entity = entity
        let uri = root + table.entitySet + keyPredicate(entity, table, version: .v2)
        entity.control.editLink = uri
        entity.control.id = uri
        if entity.typeName == nil { entity.typeName = table.entityType }
        if model.entityType(table.entityType)?.hasStream == true {
            // A media link entry: `__metadata.media_src` and `edit_media` (its `content_type`
            // comes from ``addMediaContentTypes(_:_:)``).
            entity.control.mediaReadLink = uri + "/$value"
            entity.control.mediaEditLink = uri + "/$value"
        }
        for index in entity.navigation.indices {
            let name = entity.navigation[index].name
            guard let nav = table.navigation(name), let target = store.schema.table(forEntitySet: nav.targetEntitySet) else { continue }
            switch entity.navigation[index].inline {
            case .entity(let inner?)?: entity.navigation[index].inline = .entity(decorateV2(inner, target, root: root))
            case .collection(var inner)?:
                inner.entities = inner.entities.map { decorateV2($0, target, root: root) }
                entity.navigation[index].inline = .collection(inner)
            default: break
            }
        }
        // Navigation properties not expanded are deferred links.
        for nav in table.navigation where entity.navigation(nav.name) == nil {
            var value = NavigationValue(name: nav.name)
            value.navigationLink = uri + "/" + nav.name
            entity.navigation.append(value)
        }
        return entity
    }

    func table(forPath target: String, version: ODataVersion) throws -> StoreSchema.EntityTable? {
        let parsed = try URLParser(version: version.grammar).parse(target)
        let resolved = try PathResolver(lookup: model, aliases: parsed.query.aliases)
            .resolve(parsed.path, input: target)
        var setName: String?
        var current: String?
        for segment in resolved.path.segments {
            switch segment.kind {
            case .entitySet(let name): setName = name
            case .navigation(let name):
                if let set = current ?? setName, let nav = store.schema.table(forEntitySet: set)?.navigation(name) { setName = nav.targetEntitySet }
            default: break
            }
            current = setName
        }
        return setName.flatMap { store.schema.table(forEntitySet: $0) }
    }

    func read(_ request: ServiceRequest) async throws -> ServiceResponse {
        let root = request.serviceRoot ?? ""
        let parsedURL = try URLParser(version: request.version.grammar).parse(request.target)
        // Only JSON is written: another format is refused, not answered in JSON.
        if let format = parsedURL.query.format?.lowercased(), format != "json",
           !format.hasPrefix("application/json") {
            throw ServiceFailure(406, "NotAcceptable", "$format=\(format) is not supported; this service writes JSON only")
        }
        if parsedURL.query.id != nil, parsedURL.path.segments.first?.kind != .entity {
            throw ServiceFailure(400, "BadRequest", "$id names an entity for $entity and for DELETE of a $ref only")
        }
        if parsedURL.query.apply != nil {
            // Refused rather than ignored: an answer without the aggregation would look right.
            throw ServiceFailure(501, "NotImplemented", "$apply (data aggregation) is not supported by this service")
        }
        if case .unresolved(let name)? = parsedURL.path.segments.first?.kind, model.functionImport(name) != nil {
            return try await callFunction(request, parsedURL)
        }
        if case .functionImport? = parsedURL.path.segments.first?.kind {
            return try await callFunction(request, parsedURL)
        }
        // Under a user's row filters: the store reads the target with the filter joined to its
        // own, and the entities on the way must be visible.
        let restricted = try await restrictedTarget(request)
        let queryTarget = restricted ?? request.target
        /// A next link of the store's, for the client: the request's own query with the page's token.
        func nextLink(_ link: String) -> String {
            root + (restricted == nil ? link : Self.nextLink(link, for: request.target))
        }
        if parsedURL.path.segments.last?.kind == .value, let media = try await mediaValue(request, parsedURL) { return media }
        let preferences = Preferences(request.headers["Prefer"])
        let pageSize = preferences.maxPageSize.map { min($0, options.pageSize) } ?? options.pageSize
        if parsedURL.query.deltaToken != nil {
            var response = try await delta(request, parsedURL, pageSize: pageSize)
            if preferences.maxPageSize != nil { response.headers["Preference-Applied"] = "odata.maxpagesize=\(pageSize)" }
            return response
        }
        var headers = HTTPHeaders()
        if preferences.maxPageSize != nil { headers["Preference-Applied"] = "odata.maxpagesize=\(pageSize)" }
        let table = try self.table(forPath: request.target, version: request.version)
        // Flat V4 collections go from rows to JSON without entities in between (the same bytes).
        let result: QueryResult
        if request.isV2 {
            result = try await store.query(queryTarget, version: request.version, pageSize: pageSize)
        } else {
            switch try await store.queryRows(queryTarget, version: request.version, pageSize: pageSize,
                                             context: table.map { request.contextURL($0.entitySet) }) {
            case .rows(var page):
                var deltaLink: String?
                if page.nextLink == nil, preferences.trackChanges, options.tracksChanges, let table {
                    deltaLink = try await self.deltaLink(for: request, table: table)
                    headers["Preference-Applied"] = "odata.track-changes"
                }
                let body = page.writer.finish(nextLink: page.nextLink.map(nextLink), deltaLink: deltaLink)
                var response = ServiceResponse.json(200, body, version: request.version)
                response.headers.merge(headers)
                return response
            case .result(let answer):
                result = answer
            }
        }
        switch result {
        case .collection(var collection):
            if collection.nextLink == nil, preferences.trackChanges, options.tracksChanges, let table {
                collection.deltaLink = try await deltaLink(for: request, table: table)
                headers["Preference-Applied"] = "odata.track-changes"
            }
            if let next = collection.nextLink { collection.nextLink = nextLink(next) }
            if let table, parsedURL.query.expand != nil {
                collection.entities = try await hidingInvisible(collection.entities, of: table, for: request)
            }
            if request.isV2 {
                if let table {
                    collection.entities = try await addMediaContentTypes(collection.entities.map { decorateV2($0, table, root: root) }, table)
                }
                var response = ServiceResponse.json(200, V2JSONWriter().write(collection), version: request.version)
                response.headers.merge(headers)
                return response
            }
            if let table { collection.context = request.contextURL(table.entitySet) }
            var response = ServiceResponse.json(200, V4JSONWriter().write(collection), version: request.version)
            response.headers.merge(headers)
            return response
        case .entity(var entity?):
            if let table, parsedURL.query.expand != nil {
                entity = try await hidingInvisible([entity], of: table, for: request).first ?? entity
            }
            var response: ServiceResponse
            if request.isV2 {
                var decorated = entity
                if let table { decorated = try await addMediaContentTypes([decorateV2(entity, table, root: root)], table).first ?? entity }
                response = .json(200, V2JSONWriter().write(decorated), version: request.version)
            } else {
                var entity = entity
                if let table { entity.control.context = request.contextURL(table.entitySet + "/$entity") }
                response = .json(200, V4JSONWriter().write(entity), version: request.version)
            }
            if let etag = entity.control.etag { response.headers["ETag"] = etag }
            return response
        case .entity(nil):
            throw ServiceFailure(404, "NotFound", "No entity at \(request.path)")
        case .value(let value):
            if parsedURL.path.segments.last?.kind == .value {
                let text: String
                switch value {
                case .primitive(let p): text = Literal.payloadText(p)
                case .enumeration(let e): text = e.members.joined(separator: ",")
                case .null: throw ServiceFailure(404, "NotFound", "The value is null")
                default: throw ServiceFailure(400, "BadRequest", "$value needs a primitive property")
                }
                return .text(text, version: request.version)
            }
            if request.isV2 {
                // `{"d":{"Name":…}}`: the property's own name (the parsed path is not resolved yet).
                let name = parsedURL.path.segments.last.flatMap { segment -> String? in
                    switch segment.kind {
                    case .property(let n), .unresolved(let n): return n
                    default: return nil
                    }
                } ?? "value"
                let entity = Entity(properties: [NamedValue(name: name, value: value)])
                return .json(200, V2JSONWriter().write(entity), version: request.version)
            }
            // `$metadata#Products('P1')/Name`: the property's context.
            return .json(200, V4JSONWriter().writeValue(value, context: request.contextURL(request.path)), version: request.version)
        case .count(let count):
            return .text(String(count), version: request.version)
        case .references(let ids):
            if request.isV2 {
                // `$links` of a to-one navigation property: `{"d":{"uri":…}}`, else a collection.
                let linked = ResourcePath(segments: parsedURL.path.segments.filter { $0.kind != .ref })
                let resolver = PathResolver(lookup: model, aliases: parsedURL.query.aliases)
                let single = (try? resolver.resolve(linked, input: request.target))?.shape.isCollection == false
                let uris = ids.map { JSONValue.object([.init("uri", .string(root + $0))]) }
                if single, ids.count <= 1 {
                    guard let uri = uris.first else { throw ServiceFailure(404, "NotFound", "No link at \(request.path)") }
                    return .json(200, Array(JSONValue.object([.init("d", uri)]).serialized.utf8), version: request.version)
                }
                let links = JSONValue.object([.init("d", .object([.init("results", .array(uris))]))])
                return .json(200, Array(links.serialized.utf8), version: request.version)
            }
            var collection = EntityCollection(context: request.contextURL("Collection($ref)"))
            collection.references = ids
            return .json(200, V4JSONWriter().write(collection), version: request.version)
        }
    }

    /// `GET Set(key)/$value` of a media entity: its stored stream.
    func mediaValue(_ request: ServiceRequest, _ parsed: ParsedURL) async throws -> ServiceResponse? {
        guard parsed.path.segments.count >= 2, case .key(let parts) = parsed.path.segments[parsed.path.segments.count - 2].kind,
              let table = try table(forPath: request.target, version: request.version),
              model.entityType(table.entityType)?.hasStream == true else { return nil }
        let keyText = canonicalKeyText(try keyValues(parts, table, parsed.query), table)
        let set = table.entitySet
        let row = try await store.read { reader in
            try reader.connection.query("SELECT content_type, bytes FROM server_media WHERE entity_set = ? AND key = ?", [.text(set), .text(keyText)])
        }
        guard let first = row.first, case .blob(let bytes) = first[1] else { throw ServiceFailure(404, "NotFound", "No media stream for \(request.path)") }
        var headers = HTTPHeaders()
        if case .text(let type) = first[0] { headers["Content-Type"] = type }
        return ServiceResponse(status: 200, headers: headers, body: bytes)
    }
}

/// The `Prefer` header's parts that the service honours.
struct Preferences {
    var maxPageSize: Int?
    var trackChanges = false
    var returnMinimal = false
    var returnRepresentation = false
    var continueOnError = false

    init(_ header: String?) {
        for part in (header ?? "").split(separator: ",") {
            let item = part.trimmingCharacters(in: .whitespaces).lowercased()
            if item.hasPrefix("odata.maxpagesize=") || item.hasPrefix("maxpagesize=") {
                maxPageSize = Int(item.split(separator: "=").last ?? "").flatMap { $0 > 0 ? $0 : nil }
            } else if item == "odata.track-changes" || item == "track-changes" {
                trackChanges = true
            } else if item == "return=minimal" {
                returnMinimal = true
            } else if item == "return=representation" {
                returnRepresentation = true
            } else if item == "odata.continue-on-error" || item == "continue-on-error" {
                continueOnError = true
            }
        }
    }
}

extension HTTPHeaders {
    /// Adds every field of `other`, replacing fields with the same name.
    mutating func merge(_ other: HTTPHeaders) {
        for field in other { self[field.name] = field.value }
    }
}
