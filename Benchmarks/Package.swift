// swift-tools-version: 6.1
import Foundation
import PackageDescription

// The main package is a path dependency; its identity is the name of its folder.
let parent = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "OfflineODataBenchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(path: ".."),
    ],
    targets: [
        .target(
            name: "PayloadFixtures",
            dependencies: [.product(name: "ODataCore", package: parent)]
        ),
        .executableTarget(
            name: "PayloadRatio",
            dependencies: ["PayloadFixtures", .product(name: "ODataCore", package: parent)]
        ),
    ],
    swiftLanguageModes: [.v6]
)
