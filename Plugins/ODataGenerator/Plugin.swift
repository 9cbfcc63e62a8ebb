import Foundation
import PackagePlugin

/// Generates Swift types at build time from each `$metadata` document in a target: files
/// ending in `.edmx`, or in `.xml` with `metadata` in their name (`Sales.metadata.xml`).
/// Each gives one Swift file named after it (`Sales.swift`), with `public` declarations; two
/// documents that would give the same name get `Sales.swift` and `Sales2.swift`, in path order.
@main
struct ODataGenerator: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        guard let module = target as? any SourceModuleTarget else { return [] }
        let tool = try context.tool(named: "oodata-generate")
        let documents = module.sourceFiles.filter { file in
            let name = file.url.lastPathComponent.lowercased()
            return name.hasSuffix(".edmx") || (name.hasSuffix(".xml") && name.contains("metadata"))
        }.sorted { $0.url.path < $1.url.path }
        var used: [String: Int] = [:]
        return documents.map { file in
            let base = file.url.lastPathComponent.split(separator: ".").first.map(String.init) ?? "Service"
            var name = base.prefix(1).uppercased() + base.dropFirst()
            let count = (used[name] ?? 0) + 1
            used[name] = count
            if count > 1 { name += String(count) }
            let output = context.pluginWorkDirectoryURL.appending(path: name + ".swift")
            return .buildCommand(
                displayName: "Generating Swift types from \(file.url.lastPathComponent)",
                executable: tool.url,
                arguments: ["--metadata", file.url.path, "--output", output.path],
                inputFiles: [file.url],
                outputFiles: [output])
        }
    }
}
