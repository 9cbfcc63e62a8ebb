/// Counts of the main elements of a model, as `oodata metadata` prints them.
public struct ModelSummary: Sendable, Hashable, Codable {
    public var version: String
    public var entityTypes = 0
    public var complexTypes = 0
    public var enumTypes = 0
    public var entitySets = 0
    public var singletons = 0
    public var navigationProperties = 0
    public var functionImports = 0
    public var actionImports = 0
    public var functions = 0
    public var actions = 0
}

extension Model {
    /// Counts of the model's elements.
    public var summary: ModelSummary {
        var summary = ModelSummary(version: version.rawValue)
        for schema in schemas {
            summary.entityTypes += schema.entityTypes.count
            summary.complexTypes += schema.complexTypes.count
            summary.enumTypes += schema.enumTypes.count
            summary.navigationProperties += schema.entityTypes.reduce(0) { $0 + $1.navigationProperties.count }
                + schema.complexTypes.reduce(0) { $0 + $1.navigationProperties.count }
            summary.functions += schema.functions.count
            summary.actions += schema.actions.count
            if let container = schema.entityContainer {
                summary.entitySets += container.entitySets.count
                summary.singletons += container.singletons.count
                summary.functionImports += container.functionImports.count
                summary.actionImports += container.actionImports.count
            }
        }
        return summary
    }
}
