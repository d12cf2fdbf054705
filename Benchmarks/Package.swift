// swift-tools-version: 6.2
import PackageDescription

// Lull's benchmarks (`make bench`): Lull against Apple's Dispatch on Linux, SwiftNIO and raw
// libevent. A package of its own, as SwiftNIO keeps its benchmarks, so that neither a client
// of the library nor `make test` ever resolves or builds SwiftNIO. It depends on Lull and on
// the examples package (for the echo server's logic) by path.
let package = Package(
    name: "LullBenchmarks",
    products: [
        .executable(name: "lull-bench", targets: ["lull-bench"]),
    ],
    dependencies: [
        .package(name: "Lull", path: ".."),
        .package(name: "LullExamples", path: "../Examples"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
    ],
    targets: [
        // The echo comparison's load generator (C on raw epoll, run in a process of its own).
        .target(name: "CEchoLoad", path: "CEchoLoad"),
        .executableTarget(
            name: "lull-bench",
            dependencies: [
                "CEchoLoad",
                .product(name: "Lull", package: "Lull"),
                .product(name: "EchoServerKit", package: "LullExamples"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                "CLibeventFloor",
            ],
            path: "LullBenchmarks"
        ),
        // Raw libevent on one thread: the floor of the read-source ping-pong.
        .target(
            name: "CLibeventFloor",
            path: "CLibeventFloor",
            linkerSettings: [.linkedLibrary("event_core")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
