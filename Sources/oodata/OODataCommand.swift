import ArgumentParser
import Foundation
import ODataCore

@main
struct OODataCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "oodata",
        abstract: "Offline OData tools: inspect metadata, URLs, payloads and batches; work with local stores.",
        version: "oodata (OfflineOData) \(PackageVersion.string)",
        subcommands: [DemoCommand.self, OfflineCommand.self, ServeCommand.self, GatewayCommand.self, MetadataCommand.self, GenerateCommand.self, URLCommand.self, PayloadCommand.self, BatchCommand.self, StoreCommand.self]
    )

    /// Runs the tool, printing failures on stderr and exiting with 1.
    static func main() async {
        do {
            try Self.checkSubcommands(Array(CommandLine.arguments.dropFirst()))
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

    /// Names a mistyped subcommand (`oodata offline uplaod --store s` would otherwise be told
    /// "Unknown option '--store'"): the first word after a command that only groups others
    /// must be one of them.
    static func checkSubcommands(_ arguments: [String]) throws {
        var command: any ParsableCommand.Type = OODataCommand.self
        var path = ["oodata"]
        for argument in arguments {
            let children = command.configuration.subcommands
            // A group with a default subcommand (`oodata gateway` runs one) takes its options.
            guard !children.isEmpty, command.configuration.defaultSubcommand == nil else { return }
            if argument.hasPrefix("-") {
                // ArgumentParser's own options (help, version, completion scripts, its dumps).
                let builtIn = ["-h", "--help", "--version", "--generate-completion-script", "--experimental", "---"]
                guard !builtIn.contains(where: { argument == $0 || argument.hasPrefix($0) }) else { return }
                throw CLIFailure(
                    "'\(path.joined(separator: " "))' needs a subcommand before \(argument): "
                        + "\(children.map { $0._commandName }.joined(separator: ", ")).")
            }
            let names = children.map { $0._commandName }
            guard let next = children.first(where: { $0._commandName == argument }) else {
                if argument == "help" { return }
                let close = names.min { editDistance($0, argument) < editDistance($1, argument) }
                let hint = close.map { editDistance($0, argument) <= 2 ? " Did you mean '\($0)'?" : "" } ?? ""
                throw CLIFailure(
                    "'\(argument)' is not a subcommand of '\(path.joined(separator: " "))'.\(hint) "
                        + "Its subcommands: \(names.joined(separator: ", ")).")
            }
            command = next
            path.append(argument)
        }
    }

    /// Levenshtein distance, for suggestions among a few short names.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var row = Array(0...b.count)
        for i in 1...max(a.count, 1) where !a.isEmpty {
            var previous = row[0]
            row[0] = i
            for j in stride(from: 1, through: b.count, by: 1) {
                let current = row[j]
                row[j] = min(row[j] + 1, row[j - 1] + 1, previous + (a[i - 1] == b[j - 1] ? 0 : 1))
                previous = current
            }
        }
        return a.isEmpty ? b.count : row[b.count]
    }
}
