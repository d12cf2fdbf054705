// swift-tools-version: 6.2
import PackageDescription

// The library package: what a client that depends on Lull resolves and builds. It declares
// only what the library needs (swift-log); the examples, the tools and the benchmarks are
// packages of their own beside it (Examples/, Tools/, Benchmarks/), each depending on this
// one by path, so that their dependencies (swift-argument-parser, swift-nio) never reach a
// client. Warnings are errors in `make test` and CI (`-Xswiftc -warnings-as-errors`), not
// here: a client's newer toolchain may warn where this one does not, and that must not
// break the client's build.

let package = Package(
    name: "Lull",
    products: [
        .library(name: "Lull", targets: ["Lull"]),
        // The wake-up trace's format and its reader, for the `timerfires` tool (Tools/).
        // Not part of the API contract (docs/API.md): it changes with the trace format.
        .library(name: "LullWakeupReport", targets: ["LullDiagnosticsFormat", "LullWakeupReport"]),
    ],
    traits: [
        // Off by default: SwiftPM resolves a trait's dependencies only when it is on, and
        // swift-service-context brings swift-distributed-tracing with it.
        .trait(name: "ServiceContext", description: "Activities carry a ServiceContext (swift-service-context) into blocks and tasks"),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-service-context", from: "1.0.0"),
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
        .target(name: "LullDiagnosticsFormat"),
        .target(name: "LullWakeupReport", dependencies: ["LullDiagnosticsFormat"]),
        .target(
            name: "Lull",
            dependencies: [
                "CLibevent",
                "CLullShims",
                "LullDiagnosticsFormat",
                "LullWakeupReport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceContextModule", package: "swift-service-context",
                         condition: .when(traits: ["ServiceContext"])),
            ]
        ),
        // C only the tests use: arming the shims' fault table, and probes of what the runtime did.
        .target(
            name: "CLullTestSupport",
            dependencies: ["CLullShims"],
            path: "Tests/CLullTestSupport"
        ),
        .testTarget(
            name: "LullTests",
            dependencies: [
                "Lull", "CLullShims", "CLullTestSupport", "LullDiagnosticsFormat", "LullWakeupReport",
                .product(name: "ServiceContextModule", package: "swift-service-context",
                         condition: .when(traits: ["ServiceContext"])),
            ]
        ),
        // A test helper: reports each QoS class's worker nice value in an unprivileged process
        // (Tests/LullTests/UnprivilegedPriorityTests.swift runs it).
        .executableTarget(
            name: "lull-priority-probe",
            dependencies: ["Lull"],
            path: "Tests/LullPriorityProbe"
        ),
        // A test helper: GlobalExecutor.install() is process-wide, so its checks run in
        // children (Tests/LullTests/GlobalExecutorTests.swift runs it).
        .executableTarget(
            name: "lull-executor-probe",
            dependencies: ["Lull"],
            path: "Tests/LullExecutorProbe"
        ),
        // A test helper: GlobalExecutor.install() from an async main.
        .executableTarget(
            name: "lull-async-main-probe",
            dependencies: ["Lull"],
            path: "Tests/LullAsyncMainProbe"
        ),
    ],
    swiftLanguageModes: [.v6]
)

// The DocC plugin, for `make docs` (`swift package generate-documentation --target Lull`),
// declared only when LULL_DOCC is set, so that a client never resolves it. The Swift Package
// Index sets SPI_GENERATE_DOCS when it builds documentation; it adds the plugin itself only
// when the manifest does not name it at all, so this one must be declared for it too.
if Context.environment["LULL_DOCC"] != nil || Context.environment["SPI_GENERATE_DOCS"] != nil {
    package.dependencies.append(
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0")
    )
}
