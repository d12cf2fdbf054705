// swift-tools-version: 6.2
import PackageDescription

// Lull's examples: programs someone would run, each with a README of its own. A package of
// their own, depending on Lull by path, so that their dependencies (swift-argument-parser)
// never reach a client of the library. `make demo` builds and runs them; `make test` builds
// them (`make examples`) and the tests start them as child processes.
let package = Package(
    name: "LullExamples",
    products: [
        // The echo server's logic, shared by the example and the benchmarks package.
        .library(name: "EchoServerKit", targets: ["EchoServerKit"]),
        .executable(name: "echo-server", targets: ["echo-server"]),
        .executable(name: "watch-run", targets: ["watch-run"]),
        .executable(name: "activities", targets: ["activities"]),
        .executable(name: "qos-demo", targets: ["qos-demo"]),
        .executable(name: "timer-coalescing", targets: ["timer-coalescing"]),
        .executable(name: "memory-pressure-cache", targets: ["memory-pressure-cache"]),
    ],
    dependencies: [
        // With the trait ServiceContext: the activities example shows an activity carrying one.
        .package(name: "Lull", path: "..", traits: ["ServiceContext"]),
        .package(url: "https://github.com/apple/swift-service-context", from: "1.0.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    ],
    targets: [
        .target(name: "CEchoShims", path: "CEchoShims"),
        // What the examples without an argument parser share: their --help and usage errors.
        .target(name: "ExampleSupport", path: "ExampleSupport"),
        .target(
            name: "EchoServerKit",
            dependencies: ["CEchoShims", .product(name: "Lull", package: "Lull")],
            path: "EchoServerKit"
        ),
        .executableTarget(
            name: "echo-server",
            dependencies: [
                "EchoServerKit",
                .product(name: "Lull", package: "Lull"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "echo-server",
            exclude: ["README.md"]
        ),
        .executableTarget(
            name: "watch-run",
            dependencies: [
                .product(name: "Lull", package: "Lull"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "watch-run",
            exclude: ["README.md"]
        ),
        .executableTarget(
            name: "activities",
            dependencies: [
                "ExampleSupport",
                .product(name: "Lull", package: "Lull"),
                .product(name: "ServiceContextModule", package: "swift-service-context"),
            ],
            path: "activities",
            exclude: ["README.md"],
            swiftSettings: [.define("ServiceContext")]
        ),
        .executableTarget(
            name: "qos-demo",
            dependencies: ["ExampleSupport", .product(name: "Lull", package: "Lull")],
            path: "qos-demo"
        ),
        .executableTarget(
            name: "timer-coalescing",
            dependencies: ["ExampleSupport", .product(name: "Lull", package: "Lull")],
            path: "timer-coalescing",
            exclude: ["README.md"]
        ),
        .executableTarget(
            name: "memory-pressure-cache",
            dependencies: [.product(name: "Lull", package: "Lull")],
            path: "memory-pressure-cache",
            exclude: ["README.md"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
