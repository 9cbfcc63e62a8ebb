import ArgumentParser
import Foundation

@main
struct OODataCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "oodata",
        abstract: "Offline OData tools: inspect metadata, URLs, payloads and batches; work with local stores.",
        subcommands: [DemoCommand.self, OfflineCommand.self, ServeCommand.self, MetadataCommand.self, URLCommand.self, PayloadCommand.self, BatchCommand.self, StoreCommand.self]
    )

    /// Runs the tool, printing failures on stderr and exiting with 1.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let failure as CLIFailure {
            FileHandle.standardError.write(Data("error: \(failure.description)\n".utf8))
            Foundation.exit(1)
        } catch {
            exit(withError: error)
        }
    }
}
