import ArgumentParser
import Foundation
import ODataCore

struct MetadataCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "metadata",
        abstract: "Parse a $metadata document and print what it holds as JSON."
    )

    @Argument(help: "Path to a CSDL XML document (V4, or V2/V3 EDMX).")
    var file: String

    @Flag(help: "Print the whole model instead of counts.")
    var full = false

    @Flag(help: "Also enforce CSDL schema rules.")
    var strict = false

    func run() throws {
        let model = try loadModel(file, strict: strict)
        if full {
            try printJSON(model)
        } else {
            try printJSON(model.summary)
        }
    }
}

/// Reads and parses a `$metadata` file, turning failures into messages for the user.
func loadModel(_ path: String, strict: Bool = false) throws -> Model {
    let data: Data
    do {
        data = try Data(contentsOf: URL(fileURLWithPath: path))
    } catch {
        throw CLIFailure("cannot read \(path): \(error.localizedDescription)")
    }
    do {
        return try MetadataParser(options: .init(strict: strict)).parse(data)
    } catch {
        throw CLIFailure("\(path): \(error)")
    }
}

/// A failure that the tool reports on stderr with exit code 1.
struct CLIFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

func printJSON(_ value: some Encodable) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    let data = try encoder.encode(value)
    FileHandle.standardOutput.write(data)
    FileHandle.standardOutput.write(Data("\n".utf8))
}
