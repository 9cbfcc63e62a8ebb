import Foundation
import ODataCore

/// The request-queue algorithms of SPEC §6, as pure functions over analysed queue entries.
/// Only requests that were never sent take part: a request already sent may have reached the
/// backend, and its repeatability ID must keep meaning the same change.
enum QueueAlgorithms {
    // MARK: 6.1 Request queue optimization

    /// Combines requests on the same entity: create + updates → one create with the final
    /// values, create + delete → nothing, updates → one update (PATCH bodies merge, a PUT
    /// replaces), update + delete → the delete. Media streams (`$value` PUTs) replace each
    /// other and the stream of a media create; they never merge with JSON values, which a
    /// media request cannot carry. A later request joins an earlier one only when
    /// both belong to the same transaction (or neither to any), neither is unmodifiable, they
    /// share upload category and headers, and nothing between them touches the entities the
    /// later one touches. Link requests are never combined and keep their place. Custom tags
    /// of combined requests are joined with `#`.
    static func optimize(_ entries: [QueueEntry], model: Model) -> (entries: [QueueEntry], rewrite: QueueRewrite) {
        var list = entries
        var alive = [Bool](repeating: true, count: list.count)
        var rewrite = QueueRewrite()
        // The latest live request on each entity: only requests with an earlier one on their
        // entity look at what lies between.
        var latest: [String: Int] = [:]
        for later in list.indices {
            let request = list[later]
            guard let entity = request.entity else { continue }
            let previous = latest[entity]
            latest[entity] = later
            guard combinable(request), let earlier = previous, alive[earlier] else { continue }
            // Nothing in between may touch what this one touches.
            guard !(earlier + 1..<later).contains(where: { alive[$0] && list[$0].conflicts(with: request) }) else {
                continue
            }
            let target = list[earlier]
            guard combinable(target),
                target.request.options.transactionID == request.request.options.transactionID,
                target.request.options.uploadCategory == request.request.options.uploadCategory,
                target.request.options.removeAfterUpload == request.request.options.removeAfterUpload,
                sameHeaders(target, request)
            else { continue }
            var merged = target
            switch (target.kind, request.kind) {
            case (.create, .delete) where Set(target.nested).isSubset(of: request.cascade):
                // A deep insert goes with the delete only when the delete takes its nested
                // entities too; otherwise they would stay behind, created locally but never sent.
                alive[earlier] = false
                alive[later] = false
                latest[entity] = nil
                rewrite.removed.formUnion([target.id, request.id])
                rewrite.changed[target.id] = nil
                continue
            case (.create, .update(let replace)):
                guard !target.isMedia,
                    let body = combine(
                        target.request.body, request.request.body, replace: replace, keepFrom: target, model: model)
                else { continue }
                merged.request.body = body
            case (.update(let first), .update(let second)):
                if second {
                    merged.request.method = "PUT"
                    merged.request.body = request.request.body
                } else {
                    guard
                        let body = combine(
                            target.request.body, request.request.body, replace: false, keepFrom: target, model: model)
                    else { continue }
                    merged.request.body = body
                    merged.request.method = first ? "PUT" : target.request.method
                }
            case (.create, .media) where target.isMedia, (.media, .media):
                merged.request.body = request.request.body
                merged.request.mediaType = request.request.mediaType
                merged.request.headers["Content-Type"] = request.request.mediaType
            case (.update, .delete), (.media, .delete):
                merged.request.method = "DELETE"
                merged.request.url = request.request.url
                merged.request.body = []
                merged.request.mediaType = nil
                merged.request.headers = request.request.headers
                merged.kind = .delete
                merged.cascade = request.cascade
                merged.cascadeSets = request.cascadeSets
                merged.request.cascade = request.request.cascade
            default:
                continue
            }
            merged.references.formUnion(request.references)
            merged.bound.formUnion(request.bound)
            merged.refresh()
            merged.request.options.customTag = joinTags(
                target.request.options.customTag, request.request.options.customTag)
            list[earlier] = merged
            latest[entity] = earlier
            alive[later] = false
            rewrite.removed.insert(request.id)
            rewrite.changed[merged.id] = merged.request
        }
        return (list.indices.filter { alive[$0] }.map { list[$0] }, rewrite)
    }

    static func combinable(_ entry: QueueEntry) -> Bool {
        guard entry.entity != nil, !entry.isSent, !entry.request.options.unmodifiableRequest else { return false }
        switch entry.kind {
        case .create, .update, .delete, .media: return true
        case .link, .other: return false
        }
    }

    /// Whether two requests carry the same headers. Beside a media request, the content type
    /// and `Slug` do not count: a later stream comes with its own, a delete with none.
    static func sameHeaders(_ earlier: QueueEntry, _ later: QueueEntry) -> Bool {
        guard earlier.isMedia || later.isMedia else { return earlier.request.headers == later.request.headers }
        return earlier.request.headers.filter { $0.key != "Content-Type" && $0.key != "Slug" }
            == later.request.headers.filter { $0.key != "Content-Type" && $0.key != "Slug" }
    }

    static func joinTags(_ first: String?, _ second: String?) -> String? {
        let tags = [first, second].compactMap { $0 }.filter { !$0.isEmpty }
        return tags.isEmpty ? nil : tags.joined(separator: "#")
    }

    /// Combines two JSON object bodies: the later one's members win. With `replace` (a PUT
    /// after a create), only the create's keys, annotations and inline children are kept
    /// from the first body.
    static func combine(
        _ first: [UInt8], _ second: [UInt8], replace: Bool, keepFrom entry: QueueEntry, model: Model
    ) -> [UInt8]? {
        guard case .object(var members)? = try? JSONValue.parse(first),
            case .object(let overlay)? = try? JSONValue.parse(second)
        else { return nil }
        if replace {
            let keys = Set(
                entry.request.entitySet.flatMap { model.entityType(ofEntitySet: $0) }.map {
                    model.key(of: $0).map(\.name)
                } ?? [])
            members = members.filter { member in
                switch member.value {
                case .object, .array: return true
                default: return member.name.contains("@") || member.name == "__metadata" || keys.contains(member.name)
                }
            }
        }
        for member in overlay {
            if let index = members.firstIndex(where: { $0.name == member.name }) {
                members[index].value = member.value
            } else {
                members.append(member)
            }
        }
        return Array(JSONValue.object(members).serialized.utf8)
    }

    // MARK: 6.2 Undo local creation

    /// Drops the requests of entities created locally and deleted again before upload: the
    /// create, its updates, links and the delete, and the same for children the delete
    /// cascaded to. Nothing is dropped when the cascade reaches an entity that came from the
    /// backend, when a request of another entity still refers to one of them, when one of
    /// the requests was sent already, or when a deep insert nests an entity the delete leaves.
    static func undoLocalCreations(_ entries: [QueueEntry]) -> (entries: [QueueEntry], rewrite: QueueRewrite) {
        var rewrite = QueueRewrite()
        // Each entity's unsent create; a deep insert creates its nested entities too.
        var creates: [String: Int64] = [:]
        for entry in entries where entry.kind == .create && !entry.isSent {
            for member in [entry.entity].compactMap({ $0 }) + entry.nested where creates[member] == nil {
                creates[member] = entry.id
            }
        }
        for delete in entries where delete.kind == .delete && !rewrite.removed.contains(delete.id) {
            guard let entity = delete.entity else { continue }
            let doomed = Set([entity] + delete.cascade)
            let allCreatedBefore = doomed.allSatisfy { member in
                creates[member].map { $0 < delete.id && !rewrite.removed.contains($0) } ?? false
            }
            guard allCreatedBefore else { continue }
            var drop: Set<Int64> = []
            var safe = true
            for entry in entries where !rewrite.removed.contains(entry.id) && !entry.touched.isDisjoint(with: doomed) {
                let own = entry.entity.map(doomed.contains) ?? false
                let isLink = if case .link = entry.kind { true } else { false }
                // A deep insert goes only when the delete takes every entity it nests.
                let nestedStay = entry.kind == .create && !Set(entry.nested).isSubset(of: doomed)
                guard entry.id <= delete.id, !entry.isSent, own || isLink, !nestedStay else { safe = false; break }
                drop.insert(entry.id)
            }
            if safe { rewrite.removed.formUnion(drop) }
        }
        return (entries.filter { !rewrite.removed.contains($0.id) }, rewrite)
    }

    // MARK: 6.3 Transaction builder

    /// Groups the queue into units, each sent as one change set. Without the builder, a run of
    /// neighbouring requests with the same transaction ID is one unit and every other request
    /// its own. With it, a request with a transaction ID joins the latest change set of that
    /// transaction when nothing between them touches what it touches, and that change set
    /// holds no other unmodifiable request for the same entity; otherwise it opens a new one.
    /// Requests without a transaction ID are never moved.
    static func units(_ entries: [QueueEntry], builder: Bool) -> [[QueueEntry]] {
        var units: [[QueueEntry]] = []
        guard builder else {
            for entry in entries {
                if let transaction = entry.request.options.transactionID,
                    units.last?.last?.request.options.transactionID == transaction
                {
                    units[units.count - 1].append(entry)
                } else {
                    units.append([entry])
                }
            }
            return units
        }
        var open: [String: Int] = [:]
        for entry in entries {
            guard let transaction = entry.request.options.transactionID else {
                units.append([entry])
                continue
            }
            if let index = open[transaction] {
                let between = units[(index + 1)...].joined()
                let independent = between.allSatisfy { !$0.conflicts(with: entry) }
                let unmodifiableClash =
                    entry.request.options.unmodifiableRequest
                    && units[index].contains { $0.request.options.unmodifiableRequest && $0.entity == entry.entity }
                if independent && !unmodifiableClash {
                    units[index].append(entry)
                    continue
                }
            }
            units.append([entry])
            open[transaction] = units.count - 1
        }
        return units
    }

    // MARK: Dependencies (SPEC §7, undo)

    /// The requests to remove with `roots`: each root and every later request that depends on
    /// one already removed (same entity, a child of a created entity, a link to it).
    static func dependants(of roots: Set<Int64>, in entries: [QueueEntry]) -> Set<Int64> {
        var removed: [QueueEntry] = []
        var ids: Set<Int64> = []
        for entry in entries.sorted(by: { $0.id < $1.id }) {
            if roots.contains(entry.id) || removed.contains(where: { entry.dependsOn($0) }) {
                removed.append(entry)
                ids.insert(entry.id)
            }
        }
        return ids
    }
}
