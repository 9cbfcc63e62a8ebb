import ArgumentParser
import Foundation
import ODataCodeGen

struct GenerateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate",
        abstract: "Write Swift types for a service from its $metadata (V2 or V4).",
        discussion: """
            One Sendable struct per entity and complex type, a Swift enum per enum type, entity-set \
            descriptors and typed function and action imports, for the typed API of OfflineOData \
            (DataService). The code imports only ODataCore. Without --output it goes to stdout; \
            with a directory it goes to <Name>.swift there, named after the metadata file.
            """
    )

    @Option(help: "Path to the $metadata document (CSDL XML, V4 or V2/V3 EDMX).")
    var metadata: String

    @Option(help: "A directory, or a file ending in .swift. Default: stdout.")
    var output: String?

    @Option(help: "Access level of the declarations: public or internal.")
    var access: String = "public"

    @Option(help: "Put every declaration inside an enum of this name (for two services with the same type names).")
    var namespace: String?

    func run() throws {
        guard let level = SwiftGenerator.Access(rawValue: access) else {
            throw CLIFailure("--access takes public or internal, not '\(access)'")
        }
        if metadata.contains("://") {
            throw CLIFailure(
                "--metadata takes a local file, not \(metadata); save the service's $metadata first "
                    + "(curl -o service.xml 'SERVICE_ROOT/$metadata')")
        }
        let input = URL(fileURLWithPath: metadata)
        let result: MetadataFileGenerator.Output
        do {
            result = try MetadataFileGenerator.generate(metadata: input, access: level, namespace: namespace)
        } catch {
            throw CLIFailure(error.description)
        }
        for note in result.notes { FileHandle.standardError.write(Data("note: \(note)\n".utf8)) }
        if !result.declaresTypes {
            FileHandle.standardError.write(
                Data("warning: \(metadata) declares no types or entity containers; the output has none\n".utf8))
        }
        guard let output else {
            FileHandle.standardOutput.write(Data(result.source.utf8))
            return
        }
        var target = URL(fileURLWithPath: output)
        var isDirectory: ObjCBool = false
        let exists = FileManager.default.fileExists(atPath: output, isDirectory: &isDirectory)
        if exists && isDirectory.boolValue {
            target = target.appendingPathComponent(MetadataFileGenerator.outputFileName(for: input))
        } else if !output.hasSuffix(".swift") {
            throw CLIFailure(
                "--output \(output): give an existing directory or a file ending in .swift"
                    + (exists ? " (it is a file that does not end in .swift)" : " (there is no such directory)"))
        }
        do {
            try MetadataFileGenerator.write(result.source, to: target)
        } catch {
            throw CLIFailure(error.description)
        }
        FileHandle.standardError.write(Data("wrote \(target.path)\n".utf8))
    }
}
