public import Foundation
import ODataCore

/// Generates Swift source for a `$metadata` file: what `oodata generate` and the build-tool
/// plugin run.
public enum MetadataFileGenerator {
    /// The outcome of one generation.
    public struct Output: Sendable {
        /// The Swift source.
        public var source: String
        /// What the generated code leaves out, one line each.
        public var notes: [String]
        /// What the lenient metadata parser tolerated.
        public var warnings: [String]
        /// Whether the document declares any type or entity container (an annotations-only
        /// document does not).
        public var declaresTypes: Bool
    }

    /// A metadata file that could not be read or parsed, with its path.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// The file.
        public var path: String
        /// What is wrong with it.
        public var message: String
        public var description: String { "\(path): \(message)" }
    }

    /// Reads and parses `metadata` and generates Swift source for it.
    public static func generate(
        metadata: URL, access: SwiftGenerator.Access = .public, namespace: String? = nil
    ) throws(Failure) -> Output {
        if let scheme = metadata.scheme, scheme != "file" {
            throw Failure(path: metadata.absoluteString, message: "only local files are read; save the $metadata first")
        }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: metadata.path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw Failure(path: metadata.path, message: "is a directory, not a $metadata file")
        }
        if metadata.path.hasPrefix("http:") || metadata.path.contains("://") {
            throw Failure(path: metadata.path, message: "only local files are read; save the $metadata first")
        }
        let data: Data
        do {
            data = try Data(contentsOf: metadata)
        } catch {
            throw Failure(path: metadata.path, message: "cannot read the file: \(error.localizedDescription)")
        }
        let model: Model
        do {
            model = try MetadataParser().parse(data)
        } catch {
            throw Failure(path: metadata.path, message: "not a valid $metadata document: \(error)")
        }
        var generator = SwiftGenerator(
            model: model, access: access, sourceName: metadata.lastPathComponent, namespace: namespace)
        let source = generator.generate()
        let declares = model.schemas.contains {
            !$0.entityTypes.isEmpty || !$0.complexTypes.isEmpty || !$0.enumTypes.isEmpty
                || !$0.typeDefinitions.isEmpty || $0.entityContainer != nil
        }
        return Output(source: source, notes: generator.notes, warnings: model.warnings, declaresTypes: declares)
    }

    /// The default name of the generated file: the metadata file's name without its
    /// extension(s), upper camel case, with `.swift` (`sales.metadata.xml` → `Sales.swift`).
    public static func outputFileName(for metadata: URL) -> String {
        let base = metadata.lastPathComponent.split(separator: ".").first.map(String.init) ?? "Service"
        return SwiftNames.upperCamel(base) + ".swift"
    }

    /// Writes `source` to `url` only when it differs from what is there, so that builds that
    /// watch the file do not start again for nothing.
    public static func write(_ source: String, to url: URL) throws(Failure) {
        let bytes = Data(source.utf8)
        if let existing = try? Data(contentsOf: url), existing == bytes { return }
        do {
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try bytes.write(to: url, options: .atomic)
        } catch {
            throw Failure(path: url.path, message: "cannot write the file: \(error.localizedDescription)")
        }
    }
}
