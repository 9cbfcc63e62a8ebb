import ArgumentParser
import Foundation

@main
struct OODataCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "oodata",
        abstract: "Offline OData tools: inspect metadata, URLs, payloads and batches.",
        subcommands: [MetadataCommand.self, URLCommand.self, PayloadCommand.self, BatchCommand.self]
    )

    /// Runs the tool, printing failures on stderr and exiting with 1.
    static func main() {
        do {
            var command = try parseAsRoot()
            try command.run()
        } catch let failure as CLIFailure {
            FileHandle.standardError.write(Data("error: \(failure.description)\n".utf8))
            Foundation.exit(1)
        } catch {
            exit(withError: error)
        }
    }
}
