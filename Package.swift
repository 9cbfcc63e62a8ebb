// swift-tools-version: 6.1
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "OfflineOData",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .library(name: "ODataCore", targets: ["ODataCore"]),
        .executable(name: "oodata", targets: ["oodata"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        .target(
            name: "ODataCore",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "oodata",
            dependencies: [
                "ODataCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ODataCoreTests",
            dependencies: ["ODataCore"],
            swiftSettings: swiftSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
