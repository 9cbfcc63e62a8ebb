import Foundation
import ODataCodeGen

// The code generator as a small tool of its own, for the build-tool plugin: it links only
// ODataCore, so an app's build does not compile the CLI's server and HTTP stack.
//
// oodata-generate --metadata FILE --output FILE.swift [--access public|internal]

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("oodata-generate: error: \(message)\n".utf8))
    exit(1)
}

var metadata: String?
var output: String?
var access = SwiftGenerator.Access.public
var namespace: String?
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let argument = arguments.next() {
    switch argument {
    case "--metadata": metadata = arguments.next()
    case "--output": output = arguments.next()
    case "--namespace": namespace = arguments.next()
    case "--access":
        guard let value = arguments.next(), let parsed = SwiftGenerator.Access(rawValue: value) else {
            fail("--access takes public or internal")
        }
        access = parsed
    default:
        fail("unknown argument '\(argument)'; usage: --metadata FILE --output FILE.swift [--access public|internal]")
    }
}
guard let metadata, let output else { fail("usage: --metadata FILE --output FILE.swift [--access public|internal]") }
do {
    let result = try MetadataFileGenerator.generate(
        metadata: URL(fileURLWithPath: metadata), access: access, namespace: namespace)
    for note in result.notes { FileHandle.standardError.write(Data("note: \(note)\n".utf8)) }
    try MetadataFileGenerator.write(result.source, to: URL(fileURLWithPath: output))
} catch {
    fail(error.description)
}
