import Foundation

/// Locates the shared conformance material (`../shared/odata-conformance` beside the
/// repository, or `ODATA_CONFORMANCE_DIR`).
enum Conformance {
    static let repositoryRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static let directory: URL = {
        if let override = ProcessInfo.processInfo.environment["ODATA_CONFORMANCE_DIR"] {
            return URL(fileURLWithPath: override)
        }
        return repositoryRoot.deletingLastPathComponent().appendingPathComponent("shared/odata-conformance")
    }()

    static func url(_ relative: String) -> URL { directory.appendingPathComponent(relative) }

    static func files(in folder: String, extension ext: String = "xml") -> [URL] {
        let dir = url(folder)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
        return names.filter { $0.hasSuffix("." + ext) }.sorted().map { dir.appendingPathComponent($0) }
    }

    static func data(_ relative: String) throws -> Data { try Data(contentsOf: url(relative)) }
}
