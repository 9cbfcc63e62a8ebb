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
        .library(name: "ODataStore", targets: ["ODataStore"]),
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
        .systemLibrary(
            name: "CSQLCipher",
            pkgConfig: "sqlcipher",
            providers: [.apt(["libsqlcipher-dev"])]
        ),
        .target(
            name: "ODataStore",
            dependencies: ["ODataCore", "CSQLCipher"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "oodata",
            dependencies: [
                "ODataCore",
                "ODataStore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ODataCoreTests",
            dependencies: ["ODataCore"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ODataStoreTests",
            dependencies: ["ODataStore", "ODataCore"],
            swiftSettings: swiftSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
