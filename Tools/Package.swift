// swift-tools-version: 6.2
import PackageDescription

// Lull's tools: `timerfires`, the wake-up report of a Lull program. A package of its own,
// depending on Lull by path, so that its dependency (swift-argument-parser) never reaches a
// client of the library. It reads the trace format through the library package's
// `LullWakeupReport` product, and never links the runtime itself.
let package = Package(
    name: "LullTools",
    products: [
        .executable(name: "timerfires", targets: ["timerfires"]),
        .executable(name: "timerfires-sleep-loop", targets: ["timerfires-sleep-loop"]),
    ],
    dependencies: [
        .package(name: "Lull", path: ".."),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    ],
    targets: [
        .executableTarget(
            name: "timerfires",
            dependencies: [
                .product(name: "LullWakeupReport", package: "Lull"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "timerfires"
        ),
        // A plain C program with known timers (nanosleep, poll, epoll_wait, timerfd), which
        // the tests trace through the kernel's tracepoints: timerfires on a process that is
        // not a Lull program.
        .executableTarget(
            name: "timerfires-sleep-loop",
            path: "timerfires-sleep-loop"
        ),
    ],
    swiftLanguageModes: [.v6]
)
