// watch-run: runs a command, and runs it again whenever files below the watched
// directories change — in the spirit of entr and watchexec, on Lull's DirectoryTreeWatcher
// (bursts of changes coalesced over its latency), a process source for the command's exit,
// a timer for the kill after the grace period, and signal sources for SIGINT and SIGTERM.
// Async/await end to end: an async main, and `for await` loops over the watchers' `changes`
// and the sources' `events`, each with backpressure (what comes while a loop is busy merges
// into its next element).

import ArgumentParser
import Lull
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

@main
struct WatchRunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch-run",
        abstract: "Run a command, and restart it whenever files below the watched directories change.",
        usage: "watch-run [--watch <dir> ...] [--ignore <pattern> ...] -- <command> [<argument> ...]",
        discussion: """
            Changes that come in a burst (a save, a checkout, a build) are coalesced over the \
            latency into one restart. A running command is sent SIGTERM (its whole process \
            group), then SIGKILL after the grace period, and started again once it has exited. \
            Ignore patterns follow .gitignore's syntax; the root's .gitignore is read too.
            """
    )

    @Option(name: [.customShort("w"), .customLong("watch")], help: ArgumentHelp("A directory to watch (repeatable; default: the current one).", valueName: "dir"))
    var directories: [String] = []

    @Option(name: [.customShort("i"), .customLong("ignore")], help: ArgumentHelp("A .gitignore-style pattern of paths to ignore (repeatable).", valueName: "pattern"))
    var ignorePatterns: [String] = []

    @Option(name: .customLong("ignore-file"), help: ArgumentHelp("A file of ignore patterns, one per line (repeatable).", valueName: "file"))
    var ignoreFiles: [String] = []

    @Flag(name: .customLong("no-gitignore"), help: "Do not read the .gitignore at the root of each watched directory.")
    var skipGitignore = false

    @Flag(name: .customLong("no-default-ignores"),
          help: "Also watch version control metadata (.git/ ...) and editors' temporary files (*.swp, *~ ...).")
    var noDefaultIgnores = false

    @Option(help: ArgumentHelp("Milliseconds a change waits for others before the command is restarted.", valueName: "ms"))
    var latency: Int = 200

    @Option(help: ArgumentHelp("Seconds a stopped command gets to exit after SIGTERM before SIGKILL.", valueName: "seconds"))
    var grace: Double = 2

    @Flag(help: "Wait for the first change before running the command.")
    var postpone = false

    @Argument(parsing: .postTerminator, help: "The command to run, after --.")
    var command: [String] = []

    mutating func validate() throws {
        if command.first == "--" { command.removeFirst() }
        guard !command.isEmpty else { throw ValidationError("no command given: watch-run [options] -- <command>") }
        guard latency >= 0 else { throw ValidationError("--latency must be >= 0 milliseconds") }
        guard grace > 0, grace.isFinite else { throw ValidationError("--grace must be a number of seconds > 0") }
    }

    func run() async throws {
        // Later patterns win: the defaults, the root's .gitignore, --ignore-file, --ignore.
        var chosenPatterns: [String] = []
        for file in ignoreFiles {
            do {
                chosenPatterns += try TextFile.lines(of: file)
            } catch {
                throw fail("cannot read ignore file \(file): \(error)")
            }
        }
        chosenPatterns += ignorePatterns

        let events = WorkQueue(label: "watch-run.events", qos: .userInitiated)
        let runner = CommandRunner(command: command, grace: .milliseconds(Int64(grace * 1000)), say: say)
        var watchers: [(watcher: DirectoryTreeWatcher, rules: IgnoreRules)] = []
        for directory in directories.isEmpty ? ["."] : directories {
            var treeRules = IgnoreRules(patterns: noDefaultIgnores ? [] : IgnoreRules.defaultPatterns)
            if !skipGitignore, let gitignore = try? TextFile.lines(of: directory + "/.gitignore") {
                treeRules.add(gitignore)
            }
            treeRules.add(chosenPatterns)
            let watcher: DirectoryTreeWatcher
            do {
                watcher = try DirectoryTreeWatcher(path: directory, latency: .milliseconds(latency), queue: events)
            } catch let error as EventSourceError where [ENOENT, ENOTDIR, EACCES].contains(error.code) {
                throw fail("cannot watch \(directory): \(String(cString: strerror(error.code)))")
            } catch {
                // Limits (inotify instances or watches, descriptors): Lull's message names the
                // limit and the sysctl to raise.
                throw fail("cannot watch \(directory): \(error)")
            }
            watchers.append((watcher, treeRules))
        }

        // SIGINT or SIGTERM: stop the command, then exit; a second one exits at once.
        let stopping = StopRequest()
        await withTaskGroup(of: Void.self) { loops in
            for signalNumber in [SIGINT, SIGTERM] {
                signal(signalNumber, SIG_IGN)  // so that the signal sources see them (as on Darwin)
                // Iterated from here, so that the source watches the signal before the first
                // command runs (a signal that comes before the loop's task starts merges).
                let iterator = EventSource.makeSignalSource(signal: signalNumber).events.makeAsyncIterator()
                loops.addTask { [watchers] in
                    var deliveries = iterator
                    while await deliveries.next() != nil {
                        guard stopping.isFirst() else { Glibc.exit(1) }
                        say("\(signalNumber == SIGINT ? "SIGINT" : "SIGTERM"): stopping")
                        for (watcher, _) in watchers { watcher.cancel() }  // ends their loops
                        // In a task of its own, so that this loop sees a second signal meanwhile.
                        Task {
                            await runner.finish()
                            Glibc.exit(0)
                        }
                    }
                }
            }

            for (watcher, _) in watchers {
                watcher.activate()
                if let error = watcher.error { say("warning: \(error)") }
            }
            say("watching \(watchers.map(\.watcher.path).joined(separator: ", ")) (latency \(latency) ms"
                + ")")
            if !postpone { await runner.restart() }

            // One loop per tree: changes that come while a restart is asked for merge into
            // the next batch.
            for (watcher, rules) in watchers {
                let root = watcher.path
                let batches = watcher.changes
                loops.addTask {
                    for await batch in batches {
                        let relevant = batch.filter { change in
                            if case .notWatched(let reason) = change.kind {
                                say("warning: not watching \(change.path): \(reason)")
                                return false
                            }
                            return !rules.isIgnored(relativePath(of: change.path, below: root), isDirectory: change.isDirectory)
                        }
                        guard !relevant.isEmpty else { continue }
                        say(summary(of: relevant, below: root))
                        await runner.restart()
                    }
                }
            }
        }
    }

    /// Prints `message` and ends with status 1 (no usage text: the command line was fine).
    private func fail(_ message: String) -> ExitCode {
        let line = Array("watch-run: \(message)\n".utf8)
        _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
        return ExitCode(1)
    }
}

/// Whether a stop was asked for already.
final class StopRequest: Sendable {
    private let asked = Atomic(false)

    /// True for the first request only.
    func isFirst() -> Bool { !asked.exchange(true, ordering: .relaxed) }
}

/// `path` relative to the watched `root` ("" for the root itself).
func relativePath(of path: String, below root: String) -> String {
    if path == root { return "" }
    let prefix = root.hasSuffix("/") ? root : root + "/"
    return path.hasPrefix(prefix) ? String(path.dropFirst(prefix.count)) : path
}

/// "3 changes (modified a.c, created b.c, removed c.o): restarting".
func summary(of changes: [DirectoryTreeWatcher.Change], below root: String) -> String {
    let shown = changes.prefix(3).map { change -> String in
        let name = relativePath(of: change.path, below: root)
        return switch change.kind {
        case .created: "created \(name)"
        case .modified: "modified \(name)"
        case .attributesChanged: "touched \(name)"
        case .removed: "removed \(name)"
        case .renamed(let from): "renamed \(relativePath(of: from, below: root)) -> \(name)"
        case .mustRescan: "events lost under \(name.isEmpty ? root : name)"
        case .notWatched: "not watched \(name)"
        }
    }
    let more = changes.count > 3 ? ", +\(changes.count - 3) more" : ""
    return "\(changes.count) change\(changes.count == 1 ? "" : "s") (\(shown.joined(separator: ", "))\(more))"
}

/// Prints a line of watch-run's at once: the command's output goes to the same place.
@Sendable
func say(_ message: String) {
    print("[watch-run] \(message)")
    fflush(nil)
}
