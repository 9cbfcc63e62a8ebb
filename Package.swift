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
        .library(name: "ODataServer", targets: ["ODataServer"]),
        .library(name: "OfflineOData", targets: ["OfflineOData"]),
        .library(name: "ODataGateway", targets: ["ODataGateway"]),
        .library(name: "ODataCodeGen", targets: ["ODataCodeGen"]),
        .executable(name: "oodata", targets: ["oodata"]),
        .executable(name: "oodata-generate", targets: ["oodata-generate"]),
        .plugin(name: "ODataGenerator", targets: ["ODataGenerator"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.7.1"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache", from: "2.1.1"),
    ],
    targets: [
        .target(
            name: "ODataCore",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ODataCodeGen",
            dependencies: ["ODataCore"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "oodata-generate",
            dependencies: ["ODataCodeGen"],
            swiftSettings: swiftSettings
        ),
        .plugin(
            name: "ODataGenerator",
            capability: .buildTool(),
            dependencies: ["oodata-generate"]
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
        .target(
            name: "ODataServer",
            dependencies: [
                "ODataCore",
                "ODataStore",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ODataGateway",
            dependencies: [
                "ODataCore",
                "OfflineOData",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "OfflineOData",
            dependencies: [
                "ODataCore",
                "ODataStore",
                // Only Linux builds SwiftNIO: Apple platforms send through URLSession.
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: .when(platforms: [.linux])),
                .product(name: "Logging", package: "swift-log"),
                // SHA-256 of store files a gateway builds (CryptoKit on Apple platforms).
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            resources: [.process("Resources")],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "oodata",
            dependencies: [
                "ODataCore",
                "ODataStore",
                "ODataServer",
                "OfflineOData",
                "ODataCodeGen",
                "ODataGateway",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // The Jepsen-style harness (scripts/jepsen, docs/reliability.md): not a product.
        .executableTarget(
            name: "oodata-jepsen",
            dependencies: [
                "ODataCore",
                "ODataStore",
                "ODataServer",
                "OfflineOData",
                "InteropSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "InteropSupport",
            dependencies: [.product(name: "Logging", package: "swift-log")],
            path: "Tests/InteropSupport",
            swiftSettings: swiftSettings
        ),
        // The second evaluator the store's query tests compare against (issue 55).
        .target(
            name: "ODataOracle",
            dependencies: ["ODataCore"],
            path: "Tests/ODataOracle",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ODataCoreTests",
            dependencies: ["ODataCore", "InteropSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ODataCodeGenTests",
            dependencies: ["ODataCodeGen", "ODataCore"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ODataStoreTests",
            dependencies: ["ODataStore", "ODataCore", "ODataOracle"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "OfflineODataTests",
            dependencies: ["OfflineOData", "ODataServer", "ODataStore", "ODataCore", "ODataCodeGen", "InteropSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ODataGatewayTests",
            dependencies: [
                "ODataGateway", "OfflineOData", "ODataServer", "ODataStore", "ODataCore", "InteropSupport",
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ODataServerTests",
            dependencies: [
                "ODataServer", "ODataStore", "ODataCore", "InteropSupport",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ],
            swiftSettings: swiftSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
