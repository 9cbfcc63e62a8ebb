import Foundation
import ODataCore
import ODataStore

extension ODataService {
    /// A parsed modification target: the entity set, the key (if any) and what follows.
    struct WriteTarget {
        var table: StoreSchema.EntityTable
        var key: [String: PrimitiveValue]?
        var keyText: String?
        /// A navigation property after the key (`Orders('1')/Items`).
        var navigation: StoreSchema.Navigation?
        var isRef = false
        var isValue = false
        var query: QueryOptions
    }

    func writeTarget(_ request: ServiceRequest) throws -> WriteTarget {
        let parsed = try URLParser(version: request.version.grammar).parse(request.target)
        let resolved = try PathResolver(lookup: model, aliases: parsed.query.aliases)
            .resolve(parsed.path, input: request.target)
        guard case .entitySet(let setName)? = resolved.path.segments.first?.kind, let table = store.schema.table(forEntitySet: setName) else {
            throw ServiceFailure(400, "BadRequest", "\(request.method) needs an entity set, not \(request.path)")
        }
        var target = WriteTarget(table: table, query: parsed.query)
        for segment in resolved.path.segments.dropFirst() {
            switch segment.kind {
            case .key(let parts):
                if target.navigation != nil {
                    // `Set(k)/Nav(k2)/$ref`: the second key names the linked entity.
                    continue
                }
                target.key = try keyValues(parts, table, parsed.query)
                target.keyText = String(request.path.drop { $0 != "(" }.prefix { $0 != "/" })
            case .navigation(let name):
                guard let nav = table.navigation(name) else { throw ServiceFailure(400, "BadRequest", "\(name) cannot be written here") }
                target.navigation = nav
            case .ref: target.isRef = true
            case .value: target.isValue = true
            case .typeCast: continue
            default: throw ServiceFailure(400, "BadRequest", "\(request.method) is not supported on \(request.path)")
            }
        }
        return target
    }

    func keyValues(_ parts: [KeyValue], _ table: StoreSchema.EntityTable, _ query: QueryOptions) throws -> [String: PrimitiveValue] {
        do {
            return try model.keyValues(parts, ofEntitySet: table.entitySet, aliases: query.aliases)
        } catch {
            throw ServiceFailure(400, "BadKey", error.message)
        }
    }

    /// Parses a request body as an entity of the table's type.
    func entity(from request: ServiceRequest, _ table: StoreSchema.EntityTable) throws -> Entity {
        guard !request.body.isEmpty else { throw ServiceFailure(400, "EmptyBody", "The request has no body") }
        if let problem = JSONTextCheck.problem(request.body) { throw ServiceFailure(400, "BadPayload", problem) }
        let entity = request.isV2
            ? try V2JSONReader(model: model).readEntity(request.body, entityType: table.entityType)
            : try V4JSONReader(model: model).readEntity(request.body, entityType: table.entityType)
        // Nothing sent is dropped: undeclared names, nulls, lengths and digits are checked.
        try model.checkWritable(entity, as: table.entityType)
        return entity
    }

    /// Enforces `If-Match` against the stored ETag: 412 on a mismatch; `*` matches any entity;
    /// 428 when it is missing and the entity has an ETag (unless `requireIfMatch` is off).
    func checkIfMatch(_ request: ServiceRequest, _ writer: StoreWriter, _ table: StoreSchema.EntityTable, _ key: [String: PrimitiveValue]) throws {
        // A backend without ETags writes unconditionally (or, playing one that insists, after any If-Match).
        guard options.sendsETags else {
            if options.requiresIfMatchWithoutETags, request.headers["If-Match"] == nil {
                throw ServiceFailure(428, "PreconditionRequired",
                                     "\(request.method) \(request.path) needs If-Match (no ETags here: send *)")
            }
            return
        }
        guard let ifMatch = request.headers["If-Match"]?.withoutOuterBlanks else {
            if options.requireIfMatch, let etag = try writer.reader.rowAndETag(in: table.entitySet, key: key)?.etag {
                throw ServiceFailure(428, "PreconditionRequired",
                                     "\(request.method) \(request.path) needs If-Match with the entity's ETag (\(etag)) or *")
            }
            return
        }
        guard let current = try writer.reader.rowAndETag(in: table.entitySet, key: key) else {
            throw ServiceFailure(ifMatch == "*" ? 412 : 404, ifMatch == "*" ? "PreconditionFailed" : "NotFound", "No entity to match If-Match against")
        }
        if ifMatch == "*" { return }
        let tags = ifMatch.split(separator: ",").map(\.withoutOuterBlanks)
        guard let etag = current.etag, tags.contains(etag) else {
            throw ServiceFailure(412, "PreconditionFailed", "The entity has changed: If-Match \(ifMatch) does not match its ETag")
        }
    }

    /// A link changed: the end that holds the foreign key has new values, so it gets a new
    /// ETag (an `If-Match` with the old one now fails). The answer carries the new ETag when
    /// that end is the entity the request URL names; a link table changes no entity's values.
    func linkChanged(_ writer: StoreWriter, _ table: StoreSchema.EntityTable, _ key: [String: PrimitiveValue], _ nav: StoreSchema.Navigation,
                     _ otherTable: StoreSchema.EntityTable, _ otherKey: [String: PrimitiveValue]) throws -> ServiceResponse {
        var response = ServiceResponse(status: 204)
        guard let sourceChanges = store.schema.linkChangesSource(table.entitySet, navigation: nav.name) else { return response }
        let etag = Self.newETag()
        if sourceChanges {
            if try writer.setState(in: table.entitySet, key: key, etag: .some(etag)) { response.headers["ETag"] = etag }
        } else {
            try writer.setState(in: otherTable.entitySet, key: otherKey, etag: .some(etag))
        }
        return response
    }

    /// A link changed: both ends are reported as changed by delta links (a foreign key on
    /// either side may have changed with it).
    func recordLinkChange(_ request: ServiceRequest, _ writer: StoreWriter, _ table: StoreSchema.EntityTable,
                          _ key: [String: PrimitiveValue], _ otherTable: StoreSchema.EntityTable,
                          _ otherKey: [String: PrimitiveValue]) throws {
        try recordChange(writer, table, canonicalKeyText(key, table), "upsert", viewers: viewers(request, table, key))
        try recordChange(writer, otherTable, canonicalKeyText(otherKey, otherTable), "upsert",
                         viewers: viewers(request, otherTable, otherKey))
    }

    /// Records a change for delta links; `viewers`: the users with a row filter of the set who
    /// could see the row before it (their deltas report it removed when it no longer matches).
    func recordChange(_ writer: StoreWriter, _ table: StoreSchema.EntityTable, _ keyText: String, _ kind: String,
                      viewers: Set<String> = []) throws {
        try writer.connection.execute("INSERT INTO server_changes (entity_set, key, kind) VALUES (?, ?, ?)", [.text(table.entitySet), .text(keyText), .text(kind)])
        guard !viewers.isEmpty,
              case .integer(let seq)? = try writer.connection.query("SELECT last_insert_rowid()").first?.first
        else { return }
        for viewer in viewers.sorted() {
            try writer.connection.execute(
                "INSERT OR IGNORE INTO server_change_viewers (seq, viewer) VALUES (?, ?)", [.integer(seq), .text(viewer)])
        }
    }

    /// The entity a `$ref` request names: the body's `@odata.id` (POST, PUT), or `$id` or the
    /// key after the navigation property (DELETE); nil for the DELETE of a single-valued
    /// navigation property's link, which names none.
    func referencedID(_ request: ServiceRequest, _ target: WriteTarget, _ nav: StoreSchema.Navigation) throws -> String? {
        guard request.method == "DELETE" else { return try referencedID(request) }
        if let given = target.query.id { return given }
        if let last = request.path.split(separator: "/").dropLast().last, last.contains("(") {
            return nav.targetEntitySet + String(last.drop { $0 != "(" })
        }
        return nil
    }

    /// Runs one modification inside a write transaction (also used by `$batch`).
    func modify(_ request: ServiceRequest, _ writer: StoreWriter) throws -> ServiceResponse {
        if request.method == "POST", case .unresolved(let name)? = try? URLParser(version: request.version.grammar).parsePath(request.path).segments.first?.kind,
           model.actionImport(name) != nil {
            return try callAction(request, name, writer)
        }
        let target = try writeTarget(request)
        // A row the user cannot see is not changed, linked or created through (404).
        if let key = target.key { try guardRow(request, target.table, key) }
        let preferences = Preferences(request.headers["Prefer"])
        switch (request.method, target.key, target.navigation, target.isRef) {
        case ("POST", nil, nil, false):
            return try create(request, target.table, writer, preferences, linkFrom: nil)
        case ("POST", let key?, let nav?, false):
            return try create(request, target.table, writer, preferences, linkFrom: (key, nav))
        case ("POST", let key?, let nav?, true), ("PUT", let key?, let nav?, true):
            let id = try referencedID(request)
            let (targetTable, targetKey) = try resolveID(id, request.version)
            guard targetTable.entitySet == nav.targetEntitySet else { throw ServiceFailure(400, "BadReference", "\(id) is not in \(nav.targetEntitySet)") }
            try guardRow(request, targetTable, targetKey)
            try writer.link(target.table.entitySet, key: key, navigation: nav.name, to: targetKey)
            try recordLinkChange(request, writer, target.table, key, targetTable, targetKey)
            return try linkChanged(writer, target.table, key, nav, targetTable, targetKey)
        case ("DELETE", let key?, let nav?, true):
            let id: String
            if let named = try referencedID(request, target, nav) {
                id = named
            } else if !nav.isCollection {
                // A single-valued navigation property: its one link goes.
                var response = ServiceResponse(status: 204)
                for other in try writer.linkedKeys(target.table.entitySet, key: key, navigation: nav.name) {
                    try writer.unlink(target.table.entitySet, key: key, navigation: nav.name, from: other)
                    if let otherTable = store.schema.table(forEntitySet: nav.targetEntitySet) {
                        try recordLinkChange(request, writer, target.table, key, otherTable, other)
                        response = try linkChanged(writer, target.table, key, nav, otherTable, other)
                    }
                }
                return response
            } else {
                throw ServiceFailure(400, "BadReference", "Deleting a reference of a collection needs $id or a key")
            }
            let (targetTable, targetKey) = try resolveID(id, request.version)
            try guardRow(request, targetTable, targetKey)
            // Only a link that exists goes: unlinking SO0 through BP1 must not take it from BP0.
            guard try writer.linkedKeys(target.table.entitySet, key: key, navigation: nav.name).contains(targetKey) else {
                throw ServiceFailure(404, "NotFound", "\(request.path) has no link to \(id)")
            }
            try writer.unlink(target.table.entitySet, key: key, navigation: nav.name, from: targetKey)
            try recordLinkChange(request, writer, target.table, key, targetTable, targetKey)
            return try linkChanged(writer, target.table, key, nav, targetTable, targetKey)
        case ("PUT", let key?, nil, false) where target.isValue:
            return try uploadMedia(request, target.table, key, target.keyText ?? "", writer)
        case ("PUT", let key?, nil, false), ("PATCH", let key?, nil, false), ("MERGE", let key?, nil, false):
            try checkIfMatch(request, writer, target.table, key)
            guard try writer.reader.rowAndETag(in: target.table.entitySet, key: key) != nil else {
                throw ServiceFailure(404, "NotFound", "No entity at \(request.path)")
            }
            var entity = try entity(from: request, target.table)
            try model.checkKeyUnchanged(entity, key: key)
            for (name, value) in key { entity[name] = .primitive(value) }
            let etag = Self.newETag()
            entity.control.etag = etag
            try writer.update(entity, in: target.table.entitySet, replace: request.method == "PUT")
            try linkBinds(entity, target.table, key, writer, request.version)
            try recordChange(writer, target.table, target.keyText ?? "", "upsert",
                             viewers: viewers(request, target.table, key))
            var headers = HTTPHeaders()
            headers["ETag"] = etag
            if preferences.returnRepresentation, let stored = try writer.reader.entity(in: target.table.entitySet, key: key) {
                var response = representation(stored, target.table, request, status: 200)
                response.headers["Preference-Applied"] = "return=representation"
                response.headers["ETag"] = etag
                return response
            }
            return ServiceResponse(status: 204, headers: headers)
        case ("DELETE", let key?, nil, false):
            try checkIfMatch(request, writer, target.table, key)
            guard try writer.delete(from: target.table.entitySet, key: key) else {
                throw ServiceFailure(404, "NotFound", "No entity at \(request.path)")
            }
            try writer.connection.execute("DELETE FROM server_media WHERE entity_set = ? AND key = ?", [.text(target.table.entitySet), .text(canonicalKeyText(key, target.table))])
            try recordChange(writer, target.table, target.keyText ?? "", "delete",
                             viewers: viewers(request, target.table, key))
            return ServiceResponse(status: 204)
        default:
            throw ServiceFailure(405, "MethodNotAllowed", "\(request.method) is not supported on \(request.path)")
        }
    }

    private func create(_ request: ServiceRequest, _ table: StoreSchema.EntityTable, _ writer: StoreWriter, _ preferences: Preferences,
                        linkFrom parent: ([String: PrimitiveValue], StoreSchema.Navigation)?) throws -> ServiceResponse {
        var targetTable = table
        if let (_, nav) = parent {
            guard let target = store.schema.table(forEntitySet: nav.targetEntitySet) else { throw ServiceFailure(400, "BadRequest", "Cannot create through \(nav.name)") }
            targetTable = target
        }
        // A media entity is created from its stream: the body is the media, not JSON.
        let media = isMediaBody(request) && model.entityType(targetTable.entityType)?.hasStream == true
        var entity = media ? try mediaEntityKey(request, targetTable) : try entity(from: request, targetTable)
        if let (parentKey, nav) = parent {
            // `POST SalesOrders('SO2')/Items`: the new item's OrderID comes from its order.
            for (name, value) in try writer.reader.propertiesImplied(creatingThrough: nav.name, of: table.entitySet, key: parentKey)
            where entity[name] == nil || entity[name] == .null {
                entity[name] = .primitive(value)
            }
        }
        if let keyName = options.serverGeneratedKeys[targetTable.entitySet], entity[keyName] == nil || entity[keyName] == .null {
            let rows = try writer.connection.query("SELECT max(\(StoreSchema.quote(keyName))) FROM \(StoreSchema.quote(targetTable.name))")
            var next: Int64 = 1
            if case .integer(let max)? = rows.first?.first { next = max + 1 }
            entity[keyName] = .primitive(.int64(next))
        }
        for keyName in targetTable.keyColumns where entity[keyName] == nil || entity[keyName] == .null {
            throw ServiceFailure(400, "MissingKey", "The new \(targetTable.entitySet) entity has no value for key property \(keyName)")
        }
        // Nested entities of a deep insert whose key the service generates need none either.
        var taken: [String: Int64] = [:]
        if let keyName = options.serverGeneratedKeys[targetTable.entitySet], let top = Self.integer(entity[keyName]) {
            // A nested entity of the same set (a self-referencing deep insert) gets a key past
            // both the stored ones and the top entity's (generated or given).
            let rows = try writer.connection.query("SELECT max(\(StoreSchema.quote(keyName))) FROM \(StoreSchema.quote(targetTable.name))")
            var stored: Int64 = 0
            if case .integer(let max)? = rows.first?.first { stored = max }
            taken[targetTable.entitySet] = Swift.max(top, stored)
        }
        try assignNestedKeys(&entity, targetTable, writer, &taken)
        try refuseContradictions(entity, targetTable)
        let etag = Self.newETag()
        entity.control.etag = etag
        stampNested(&entity)
        try writer.insert(entity, into: targetTable.entitySet)
        let key = keyValues(of: entity, targetTable)
        try linkBinds(entity, targetTable, key, writer, request.version)
        if let (parentKey, nav) = parent {
            try writer.link(table.entitySet, key: parentKey, navigation: nav.name, to: key)
        }
        let keyText = keyPredicate(entity, targetTable, version: request.version)
        if media { try storeMedia(request, targetTable, key, writer) }
        try recordChange(writer, targetTable, keyText, "upsert")
        let location = (request.serviceRoot ?? "") + targetTable.entitySet + keyText
        var headers = HTTPHeaders()
        headers["Location"] = location
        headers["ETag"] = etag
        if preferences.returnMinimal {
            headers["Preference-Applied"] = "return=minimal"
            headers["OData-EntityId"] = location
            return ServiceResponse(status: 204, headers: headers)
        }
        let stored = try createdTree(entity, targetTable, key, writer.reader) ?? entity
        // The nested entities are new too: delta links report them.
        try recordNestedChanges(stored, targetTable, writer)
        var response = representation(stored, targetTable, request, status: 201)
        response.headers.merge(headers)
        return response
    }

    /// Refuses a deep insert whose nested entity gives a property its parent's referential
    /// constraint sets otherwise (an item of order SO9 that says `"OrderID":"SO1"`): it would be
    /// stored under the parent, and answered as the entity it named.
    private func refuseContradictions(_ entity: Entity, _ table: StoreSchema.EntityTable, depth: Int = 0) throws {
        guard depth < 32 else { return }
        for value in entity.navigation {
            guard let inline = value.inline, let nav = table.navigation(value.name),
                let target = store.schema.table(forEntitySet: nav.targetEntitySet)
            else { continue }
            let children: [Entity]
            switch inline {
            case .entity(let child): children = child.map { [$0] } ?? []
            case .collection(let collection): children = collection.entities
            }
            for child in children {
                if let (property, given, implied) = store.schema.contradiction(
                    creatingThrough: nav.name, of: table.entitySet, parent: entity, child: child)
                {
                    throw ServiceFailure(
                        400, "BadRequest",
                        "The nested \(target.entitySet) entity in \(value.name) gives \(property) "
                            + "\(Literal.format(.primitive(given))), but its parent's referential constraint makes it "
                            + "\(Literal.format(.primitive(implied)))")
                }
                try refuseContradictions(child, target, depth: depth + 1)
            }
        }
    }

    /// The created entity as stored, with the nested entities of a deep insert inline in the
    /// order of the request (OData 4.01 Part 1 §11.4.2.2), so a client can take over the keys
    /// the service gave them.
    private func createdTree(_ sent: Entity, _ table: StoreSchema.EntityTable, _ key: [String: PrimitiveValue],
                             _ reader: StoreReader, depth: Int = 0) throws -> Entity? {
        guard var stored = try reader.entity(in: table.entitySet, key: key) else { return nil }
        guard depth < 32 else { return stored }
        for value in sent.navigation {
            guard let inline = value.inline, let nav = table.navigation(value.name),
                  let target = store.schema.table(forEntitySet: nav.targetEntitySet) else { continue }
            let implied = store.schema.propertiesImplied(creatingThrough: nav.name, of: table.entitySet, parent: stored)
            func read(_ child: Entity) throws -> Entity? {
                let childKey = implied.filter { target.keyColumns.contains($0.key) }.merging(keyValues(of: child, target)) { _, own in own }
                guard childKey.count == target.keyColumns.count else { return nil }
                return try createdTree(child, target, childKey, reader, depth: depth + 1)
            }
            var result = NavigationValue(name: value.name)
            switch inline {
            case .entity(let child):
                result.inline = .entity(try child.flatMap(read))
            case .collection(let children):
                // Every place keeps its entity (what cannot be read back is answered as sent), so
                // a client matching them by place is never shifted.
                result.inline = .collection(EntityCollection(entities: try children.entities.map { try read($0) ?? $0 }))
            }
            stored.navigation.removeAll { $0.name == value.name }
            stored.navigation.append(result)
        }
        return stored
    }

    /// Records the inline entities of a created tree (a deep insert) as changed, for deltas.
    private func recordNestedChanges(_ entity: Entity, _ table: StoreSchema.EntityTable, _ writer: StoreWriter, depth: Int = 0) throws {
        guard depth < 32 else { return }
        for value in entity.navigation {
            guard let nav = table.navigation(value.name), let target = store.schema.table(forEntitySet: nav.targetEntitySet) else { continue }
            let children: [Entity]
            switch value.inline {
            case .entity(let child?)?: children = [child]
            case .collection(let collection)?: children = collection.entities
            default: children = []
            }
            for child in children {
                let key = keyValues(of: child, target)
                guard key.count == target.keyColumns.count else { continue }
                try recordChange(writer, target, canonicalKeyText(key, target), "upsert")
                try recordNestedChanges(child, target, writer, depth: depth + 1)
            }
        }
    }

    /// An integer key value as Int64; nil for other values.
    static func integer(_ value: Value?) -> Int64? {
        switch value {
        case .primitive(.int64(let number))?: return number
        case .primitive(.int32(let number))?: return Int64(number)
        case .primitive(.int16(let number))?: return Int64(number)
        default: return nil
        }
    }

    /// Gives nested (deep insert) entities of sets with server-generated keys the next free key
    /// when they have none; `taken` holds the keys handed out in this request, per set.
    private func assignNestedKeys(_ entity: inout Entity, _ table: StoreSchema.EntityTable, _ writer: StoreWriter,
                                  _ taken: inout [String: Int64]) throws {
        func assign(_ nested: inout Entity, _ target: StoreSchema.EntityTable) throws {
            if let keyName = options.serverGeneratedKeys[target.entitySet], nested[keyName] == nil || nested[keyName] == .null {
                var next = taken[target.entitySet] ?? 0
                if next == 0 {
                    let rows = try writer.connection.query("SELECT max(\(StoreSchema.quote(keyName))) FROM \(StoreSchema.quote(target.name))")
                    if case .integer(let max)? = rows.first?.first { next = max }
                }
                next += 1
                taken[target.entitySet] = next
                nested[keyName] = .primitive(.int64(next))
            }
            try assignNestedKeys(&nested, target, writer, &taken)
        }
        for index in entity.navigation.indices {
            guard let nav = table.navigation(entity.navigation[index].name),
                  let target = store.schema.table(forEntitySet: nav.targetEntitySet) else { continue }
            switch entity.navigation[index].inline {
            case .entity(var nested?)?:
                try assign(&nested, target)
                entity.navigation[index].inline = .entity(nested)
            case .collection(var nested)?:
                for item in nested.entities.indices { try assign(&nested.entities[item], target) }
                entity.navigation[index].inline = .collection(nested)
            default:
                break
            }
        }
    }

    /// Stores a request's body as the media stream of an entity, with its content type.
    private func storeMedia(_ request: ServiceRequest, _ table: StoreSchema.EntityTable, _ key: [String: PrimitiveValue], _ writer: StoreWriter) throws {
        try writer.connection.execute("INSERT OR REPLACE INTO server_media (entity_set, key, content_type, bytes) VALUES (?, ?, ?, ?)",
                                      [.text(table.entitySet), .text(canonicalKeyText(key, table)), .text(request.headers["Content-Type"] ?? "application/octet-stream"),
                                       .blob(request.body)])
    }

    /// Whether a request body is a media stream rather than an entity: any content type but
    /// JSON (a missing one counts as JSON).
    func isMediaBody(_ request: ServiceRequest) -> Bool {
        guard let type = request.headers["Content-Type"]?.lowercased().trimmingCharacters(in: .whitespaces), !type.isEmpty else { return false }
        return !type.hasPrefix("application/json")
    }

    /// The new entity of a media create: no properties but its key, which is generated
    /// (`serverGeneratedKeys`) or, for a single-property key, named by the `Slug` header
    /// (percent-encoded, RFC 5023).
    private func mediaEntityKey(_ request: ServiceRequest, _ table: StoreSchema.EntityTable) throws -> Entity {
        var entity = Entity()
        if options.serverGeneratedKeys[table.entitySet] != nil { return entity }
        guard let slug = request.headers["Slug"].map({ $0.removingPercentEncoding ?? $0 }), !slug.isEmpty else {
            throw ServiceFailure(400, "MissingKey", "A new \(table.entitySet) media entity needs its key in the Slug header")
        }
        guard table.keyColumns.count == 1, let name = table.keyColumns.first, let type = model.entityType(table.entityType),
              let property = model.property(name, ofStructuredType: type.qualifiedName) else {
            throw ServiceFailure(400, "MissingKey", "\(table.entitySet) has a key of several properties; a Slug cannot name it")
        }
        let value: PrimitiveValue?
        switch PrimitiveType(rawValue: property.type.name) {
        case .string?: value = .string(slug)
        case .int64?: value = Int64(slug).map { .int64($0) }
        case .int32?: value = Int32(slug).map { .int32($0) }
        case .int16?: value = Int16(slug).map { .int16($0) }
        case .guid?: value = GuidValue(slug).map { .guid($0) }
        default: value = nil
        }
        guard let value else { throw ServiceFailure(400, "BadKey", "The Slug \(slug) is not a \(property.type.name) key for \(table.entitySet)") }
        entity[name] = .primitive(value)
        return entity
    }

    /// Expanded entities of a deep insert get ETags too.
    private func stampNested(_ entity: inout Entity) {
        for index in entity.navigation.indices {
            switch entity.navigation[index].inline {
            case .entity(var inner?)?:
                inner.control.etag = Self.newETag()
                stampNested(&inner)
                entity.navigation[index].inline = .entity(inner)
            case .collection(var inner)?:
                for i in inner.entities.indices {
                    inner.entities[i].control.etag = Self.newETag()
                    stampNested(&inner.entities[i])
                }
                entity.navigation[index].inline = .collection(inner)
            default: break
            }
        }
    }

    func representation(_ entity: Entity, _ table: StoreSchema.EntityTable, _ request: ServiceRequest, status: Int) -> ServiceResponse {
        if request.isV2 {
            return .json(status, V2JSONWriter().write(decorateV2(entity, table, root: request.serviceRoot ?? "")), version: request.version)
        }
        var entity = entity
        entity.control.context = request.contextURL("\(table.entitySet)/$entity")
        return .json(status, V4JSONWriter().write(entity), version: request.version)
    }

    /// `@odata.bind` / `__metadata.uri` links of a written entity.
    /// Links what `@odata.bind` (V2: `__metadata.uri`) names, also inside the entities of a
    /// deep insert.
    private func linkBinds(_ entity: Entity, _ table: StoreSchema.EntityTable, _ key: [String: PrimitiveValue], _ writer: StoreWriter, _ version: ODataVersion) throws {
        for nav in entity.navigation {
            for id in nav.bind ?? [] {
                let (_, targetKey) = try resolveID(id, version)
                try writer.link(table.entitySet, key: key, navigation: nav.name, to: targetKey)
            }
            guard let inline = nav.inline, let stored = table.navigation(nav.name),
                  let target = store.schema.table(forEntitySet: stored.targetEntitySet) else { continue }
            let children: [Entity]
            switch inline {
            case .entity(let child): children = child.map { [$0] } ?? []
            case .collection(let collection): children = collection.entities
            }
            let implied = try writer.reader.propertiesImplied(creatingThrough: nav.name, of: table.entitySet, key: key)
            for var child in children where child.navigation.contains(where: { $0.bind != nil || $0.inline != nil }) {
                for (name, value) in implied where child[name] == nil || child[name] == .null { child[name] = .primitive(value) }
                let childKey = keyValues(of: child, target)
                guard childKey.count == target.keyColumns.count else { continue }
                try linkBinds(child, target, childKey, writer, version)
            }
        }
    }

    /// `Set(key)` (relative or absolute) → the table and key it names.
    func resolveID(_ id: String, _ version: ODataVersion) throws -> (StoreSchema.EntityTable, [String: PrimitiveValue]) {
        var path = id
        for root in ["/odata/v4/", "/odata/v2/"] {
            if let range = path.range(of: root) { path = String(path[range.upperBound...]) }
        }
        let parsed = try URLParser(version: version.grammar).parse(path)
        let resolved = try PathResolver(lookup: model, aliases: parsed.query.aliases).resolve(parsed.path, input: path)
        guard resolved.path.segments.count == 2, case .entitySet(let set) = resolved.path.segments[0].kind,
              case .key(let parts) = resolved.path.segments[1].kind, let table = store.schema.table(forEntitySet: set) else {
            throw ServiceFailure(400, "BadReference", "\(id) does not name one entity")
        }
        return (table, try keyValues(parts, table, parsed.query))
    }

    func referencedID(_ request: ServiceRequest) throws -> String {
        let json = try JSONValue.parse(request.body)
        if let id = json["@odata.id"]?.stringValue ?? json["@id"]?.stringValue ?? json["uri"]?.stringValue { return id }
        throw ServiceFailure(400, "BadReference", "The body must name the entity with @odata.id")
    }

    private func uploadMedia(_ request: ServiceRequest, _ table: StoreSchema.EntityTable, _ key: [String: PrimitiveValue], _ keyText: String,
                             _ writer: StoreWriter) throws -> ServiceResponse {
        guard model.entityType(table.entityType)?.hasStream == true else {
            throw ServiceFailure(400, "NotAMediaEntity", "\(table.entitySet) entities have no stream")
        }
        guard try writer.reader.entity(in: table.entitySet, key: key) != nil else { throw ServiceFailure(404, "NotFound", "No entity at \(request.path)") }
        try checkIfMatch(request, writer, table, key)
        try storeMedia(request, table, key, writer)
        var entity = Entity()
        for (name, value) in key { entity[name] = .primitive(value) }
        let etag = Self.newETag()
        entity.control.etag = etag
        try writer.update(entity, in: table.entitySet, replace: false)
        try recordChange(writer, table, keyText, "upsert", viewers: viewers(request, table, key))
        var headers = HTTPHeaders()
        headers["ETag"] = etag
        return ServiceResponse(status: 204, headers: headers)
    }
}
