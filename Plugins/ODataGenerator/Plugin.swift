import Foundation
import PackagePlugin

/// Generates Swift types at build time from each `$metadata` document in a target: files
/// ending in `.edmx`, or in `.xml` with `metadata` in their name (`Sales.metadata.xml`).
/// Each gives one Swift file named after it (`Sales.swift`), with `public` declarations.
@main
struct ODataGenerator: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        guard let module = target as? any SourceModuleTarget else { return [] }
        let tool = try context.tool(named: "oodata-generate")
        return module.sourceFiles.filter { file in
            let name = file.url.lastPathComponent.lowercased()
            return name.hasSuffix(".edmx") || (name.hasSuffix(".xml") && name.contains("metadata"))
        }.map { file in
            let base = file.url.lastPathComponent.split(separator: ".").first.map(String.init) ?? "Service"
            let output = context.pluginWorkDirectoryURL.appending(
                path: base.prefix(1).uppercased() + base.dropFirst() + ".swift")
            return .buildCommand(
                displayName: "Generating Swift types from \(file.url.lastPathComponent)",
                executable: tool.url,
                arguments: ["--metadata", file.url.path, "--output", output.path],
                inputFiles: [file.url],
                outputFiles: [output])
        }
    }
}
