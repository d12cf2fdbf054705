// swift-tools-version: 6.2
import PackageDescription

let strictSettings: [SwiftSetting] = [
    .treatAllWarnings(as: .error),
]

let package = Package(
    name: "Lull",
    products: [
        .library(name: "Lull", targets: ["Lull"]),
        .executable(name: "timerfires", targets: ["timerfires"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CLibevent",
            pkgConfig: "libevent_pthreads",
            providers: [.apt(["libevent-dev"])]
        ),
        .target(name: "CLullShims"),
        // Wake-up diagnostics beside the runtime: the formats the runtime's recorder shares
        // with its readers (the trace file's layout, the control socket's address, the
        // environment), and the reader that turns a trace into a `WakeupReport`, which both
        // `RuntimeDiagnostics` and `timerfires` print.
        .target(name: "LullDiagnosticsFormat", swiftSettings: strictSettings),
        .target(name: "LullWakeupReport", dependencies: ["LullDiagnosticsFormat"], swiftSettings: strictSettings),
        .target(
            name: "Lull",
            dependencies: [
                "CLibevent",
                "CLullShims",
                "LullDiagnosticsFormat",
                "LullWakeupReport",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "qos-demo",
            dependencies: ["Lull"],
            path: "Examples/qos-demo",
            swiftSettings: strictSettings
        ),
        // Examples (issue #8): programs someone would run, each with a README of its own.
        // EchoServerKit is the echo server's logic, shared by the example and lull-bench.
        .target(
            name: "EchoServerKit",
            dependencies: ["Lull", "CLullShims"],
            path: "Examples/EchoServerKit",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "echo-server",
            dependencies: [
                "EchoServerKit",
                "Lull",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Examples/echo-server",
            exclude: ["README.md"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "watch-run",
            dependencies: [
                "Lull",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Examples/watch-run",
            exclude: ["README.md"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "activities",
            dependencies: ["Lull"],
            path: "Examples/activities",
            exclude: ["README.md"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "timerfires",
            dependencies: [
                "LullDiagnosticsFormat",
                "LullWakeupReport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tools/timerfires",
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "timer-coalescing",
            dependencies: ["Lull"],
            path: "Examples/timer-coalescing",
            exclude: ["README.md"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "memory-pressure-cache",
            dependencies: ["Lull"],
            path: "Examples/memory-pressure-cache",
            exclude: ["README.md"],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "lull-bench",
            dependencies: ["Lull", "EchoServerKit"],
            path: "Benchmarks/LullBenchmarks",
            swiftSettings: strictSettings
        ),
        // C only the tests use: arming the shims' fault table, and probes of what the runtime did.
        .target(
            name: "CLullTestSupport",
            dependencies: ["CLullShims"],
            path: "Tests/CLullTestSupport"
        ),
        .testTarget(
            name: "LullTests",
            dependencies: ["Lull", "CLullShims", "CLullTestSupport", "EchoServerKit", "LullDiagnosticsFormat", "LullWakeupReport"],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)

// A test helper: reports each QoS class's worker nice value in an unprivileged process
// (Tests/LullTests/UnprivilegedPriorityTests.swift runs it).
package.targets.append(.executableTarget(
    name: "lull-priority-probe",
    dependencies: ["Lull"],
    path: "Tests/LullPriorityProbe",
    swiftSettings: strictSettings
))
