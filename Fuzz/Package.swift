// swift-tools-version: 6.1
import Foundation
import PackageDescription

// libFuzzer targets for the parsers in ODataCore. Build and run them with `Scripts/fuzz`
// (it passes `-sanitize=fuzzer -parse-as-library`: libFuzzer supplies `main`).
// The main package is a path dependency; its identity is the name of its folder.
let parent = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "OfflineODataFuzz",
    platforms: [.macOS(.v14)],
    dependencies: [.package(path: "..")],
    targets: [
        .executableTarget(
            name: "ODataFuzz",
            dependencies: [.product(name: "ODataCore", package: parent)]
        ),
    ],
    swiftLanguageModes: [.v6]
)
