import ArgumentParser
import Foundation
import ODataCore

struct URLCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "url",
        abstract: "Parse an OData request URL and print it as JSON; with --metadata, also bind it to the model."
    )

    @Option(help: "A $metadata document to bind the request to.")
    var metadata: String?

    @Option(help: "URL syntax: 4.01 (default), 4.0 or 2.0 (used when no metadata gives the version).")
    var odataVersion: String?

    @Argument(help: "The request URL, relative to the service root (e.g. \"Customers('A')/Orders?$top=2\").")
    var url: String

    func run() throws {
        let model = try metadata.map { try loadModel($0) }
        let version = try odataVersion.map { text -> ODataVersion in
            guard let version = ODataVersion(rawValue: text) else { throw CLIFailure("unknown OData version \(text)") }
            return version
        } ?? (model?.version.grammar ?? .v401)
        let parsed: ParsedURL
        do {
            parsed = try URLParser(version: version).parse(url)
        } catch {
            throw CLIFailure("syntax error: \(error)")
        }
        var members: [(String, TreeJSON)] = [("request", parsed.json)]
        if let model {
            do {
                let bound = try RequestBinder(model: model).bind(parsed, input: url)
                members.append(("bound", bound.json))
            } catch {
                throw CLIFailure("binding error: \(error)")
            }
        }
        print(TreeJSON.object(members).serialized(pretty: true))
    }
}
