import ODataCore

extension Model {
    /// Reads a collection in the service's JSON format: V2 JSON for a V2 or V3 service, V4
    /// JSON otherwise.
    func readCollection(_ body: [UInt8], entityType: String?) throws(PayloadError) -> EntityCollection {
        if version.isLegacy { return try V2JSONReader(model: self).readCollection(body, entityType: entityType) }
        return try V4JSONReader(model: self).readCollection(body, entityType: entityType)
    }

    /// Reads one entity in the service's JSON format (see ``readCollection(_:entityType:)``).
    func readEntity(_ body: [UInt8], entityType: String?) throws(PayloadError) -> Entity {
        if version.isLegacy { return try V2JSONReader(model: self).readEntity(body, entityType: entityType) }
        return try V4JSONReader(model: self).readEntity(body, entityType: entityType)
    }
}

extension ODataVersion {
    /// A request body for POST, PUT, PATCH or MERGE in the version's JSON format: V2 JSON
    /// (without the `d` wrapper) for a V2 or V3 service, V4 JSON otherwise.
    func requestBody(_ entity: Entity) -> [UInt8] {
        isLegacy ? V2JSONWriter().writeRequestBody(entity) : V4JSONWriter().write(entity)
    }
}
