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
        .package(url: "https://github.com/ordo-one/package-benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .target(
            name: "PayloadFixtures",
            dependencies: [.product(name: "ODataCore", package: parent)]
        ),
        .executableTarget(
            name: "PayloadDecoding",
            dependencies: [
                "PayloadFixtures",
                .product(name: "ODataCore", package: parent),
                .product(name: "Benchmark", package: "package-benchmark"),
            ],
            path: "Benchmarks/PayloadDecoding",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "package-benchmark")]
        ),
        .executableTarget(
            name: "StoreRatio",
            dependencies: ["PayloadFixtures", .product(name: "ODataCore", package: parent), .product(name: "ODataStore", package: parent)]
        ),
        .executableTarget(
            name: "OfflineRatio",
            dependencies: [
                "PayloadFixtures", .product(name: "ODataCore", package: parent), .product(name: "ODataStore", package: parent),
                .product(name: "ODataServer", package: parent), .product(name: "OfflineOData", package: parent),
            ]
        ),
        .target(
            name: "CRawSQLCipher",
            cSettings: [.define("SQLITE_HAS_CODEC")],
            linkerSettings: [.linkedLibrary("sqlcipher")]
        ),
        .executableTarget(
            name: "Scale",
            dependencies: [
                "PayloadFixtures", "CRawSQLCipher", .product(name: "ODataCore", package: parent),
                .product(name: "ODataStore", package: parent), .product(name: "OfflineOData", package: parent),
            ]
        ),
        .executableTarget(
            name: "ScaleBackend",
            dependencies: [
                "PayloadFixtures", "CRawSQLCipher", .product(name: "ODataCore", package: parent),
                .product(name: "ODataStore", package: parent), .product(name: "ODataServer", package: parent),
            ]
        ),
        .executableTarget(
            name: "TransportRatio",
            dependencies: [
                .product(name: "ODataCore", package: parent), .product(name: "ODataServer", package: parent),
                .product(name: "OfflineOData", package: parent),
            ]
        ),
        .executableTarget(
            name: "TypedRatio",
            dependencies: [
                .product(name: "ODataCore", package: parent), .product(name: "ODataStore", package: parent),
                .product(name: "ODataServer", package: parent), .product(name: "OfflineOData", package: parent),
            ],
            plugins: [.plugin(name: "ODataGenerator", package: parent)]
        ),
        .executableTarget(
            name: "GatewayRatio",
            dependencies: [
                "CRawSQLCipher", .product(name: "ODataCore", package: parent), .product(name: "ODataServer", package: parent),
                .product(name: "OfflineOData", package: parent), .product(name: "ODataGateway", package: parent),
            ]
        ),
        .executableTarget(
            name: "ChainRatio",
            dependencies: [.product(name: "ODataCore", package: parent), .product(name: "ODataStore", package: parent)]
        ),
        .executableTarget(
            name: "PayloadRatio",
            dependencies: ["PayloadFixtures", .product(name: "ODataCore", package: parent)]
        ),
    ],
    swiftLanguageModes: [.v6]
)
