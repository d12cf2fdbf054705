import CLullShims
import CLullTestSupport
import Glibc
import Synchronization
import Testing
@testable import Lull

// MARK: Test kit

/// Temporary trees, file operations and forked children for the file-system tests.
enum FileSystemTestKit {
    struct SystemError: Error, CustomStringConvertible {
        let call: String
        let code: Int32
        var description: String { "\(call): \(String(cString: strerror(code))) (errno \(code))" }
    }

    /// A directory made with mkdtemp under /tmp, removed with everything in it by `remove()`.
    final class TemporaryDirectory: Sendable {
        let path: String

        init(_ tag: String = "fs") throws {
            var template = Array("/tmp/lull-\(tag)-XXXXXX".utf8CString)
            let made = template.withUnsafeMutableBufferPointer { buffer -> Bool in
                mkdtemp(buffer.baseAddress!) != nil
            }
            guard made else { throw SystemError(call: "mkdtemp", code: errno) }
            path = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }

        func at(_ name: String) -> String { "\(path)/\(name)" }

        func remove() { FileSystemTestKit.removeTree(path) }
    }

    /// Removes a tree (not following symbolic links), ignoring what is already gone.
    static func removeTree(_ path: String) {
        var status = lull_object_status()
        guard lull_object_status_at(AT_FDCWD, path, &status) == 0 else { return }
        if status.is_directory != 0 {
            var names: [String] = []
            if let stream = lull_directory_open(AT_FDCWD, path) {
                var isDirectory: Int32 = 0
                while let name = lull_directory_next(stream, &isDirectory) { names.append(String(cString: name)) }
                lull_directory_close(stream)
            }
            for name in names { removeTree("\(path)/\(name)") }
            rmdir(path)
        } else {
            unlink(path)
        }
    }

    /// Writes `text` to a new file (or appends to it), through a descriptor closed at once.
    @discardableResult
    static func write(_ path: String, _ text: String, append: Bool = false) throws -> Int {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0o644)
        guard descriptor >= 0 else { throw SystemError(call: "open(\(path))", code: errno) }
        defer { close(descriptor) }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
        guard written == bytes.count else { throw SystemError(call: "write", code: errno) }
        return written
    }

    /// Overwrites the first bytes of a file in place (its size does not change).
    static func overwriteStart(_ descriptor: Int32, _ text: String) throws {
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
        guard written == bytes.count else { throw SystemError(call: "pwrite", code: errno) }
    }

    static func openForWriting(_ path: String) throws -> Int32 {
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw SystemError(call: "open(\(path))", code: errno) }
        return descriptor
    }

    static func openDirectory(_ path: String) throws -> Int32 {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw SystemError(call: "open(\(path))", code: errno) }
        return descriptor
    }

    static func check(_ result: Int32, _ call: String) throws {
        guard result == 0 else { throw SystemError(call: call, code: errno) }
    }

    /// The number of descriptors this process has open (to check that none leaks).
    ///
    /// Descriptors open on this process's own /proc directory are not counted: the runtime's
    /// threads open and close them at any moment (the stall check reads /proc/self/task), and
    /// the listing's own descriptor is one of them.
    static func openDescriptorCount() -> Int {
        guard let stream = lull_directory_open(AT_FDCWD, "/proc/self/fd") else { return -1 }
        var count = 0
        var isDirectory: Int32 = 0
        var target = [CChar](repeating: 0, count: 256)
        let ownProc = "/proc/\(getpid())/"
        while let name = lull_directory_next(stream, &isDirectory) {
            let length = readlink("/proc/self/fd/" + String(cString: name), &target, target.count - 1)
            // A descriptor closed since the listing read its entry is not open.
            guard length >= 0 else { continue }
            let path = String(decoding: target[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if !path.hasPrefix(ownProc) { count += 1 }
        }
        lull_directory_close(stream)
        return count
    }

    /// Runs `body` in a forked child (single-threaded: fit for unshare and setuid) and
    /// returns the text it returned, or nil if the child hung in every fork `ForkProbe`
    /// makes. The child touches no worker thread: it only calls code that answers
    /// synchronously, and hands its answer over on its standard output.
    static func inForkedChild(_ body: () -> String) throws -> String? {
        guard let outcome = ForkProbe.runChild(capturing: 1, {
            let answer = Array(body().utf8)
            _ = answer.withUnsafeBytes { Glibc.write(1, $0.baseAddress, $0.count) }
            _exit(0)
        }) else { throw SystemError(call: "pipe or fork", code: errno) }
        return outcome.hung ? nil : outcome.output
    }
}

/// What a source delivered: each handler call's `events`, and their union.
final class FileSystemEventLog: Sendable {
    private let calls = Mutex<[FileSystemEvent]>([])

    func record(_ events: FileSystemEvent) { calls.locked { $0.append(events) } }

    var values: [FileSystemEvent] { calls.locked { $0 } }
    var count: Int { calls.locked { $0.count } }
    var union: FileSystemEvent { calls.locked { $0.reduce([]) { $0.union($1) } } }

    /// Forgets what was delivered so far.
    func reset() { calls.locked { $0.removeAll() } }

    /// Waits until everything in `events` was delivered.
    @discardableResult
    func waitFor(_ events: FileSystemEvent) -> Bool {
        waitUntil { union.isSuperset(of: events) }
    }

    /// Nothing in `events` is delivered for a while.
    func staysFree(of events: FileSystemEvent, for duration: Duration = .milliseconds(150)) -> Bool {
        keepsHolding(for: duration) { union.isDisjoint(with: events) }
    }
}

/// A source with recording handlers, activated; `finish()` cancels it and waits for the
/// cancel handler.
struct WatchedObject {
    let source: FileSystemObjectSource
    let log = FileSystemEventLog()
    let cancelled = Flag()
    let registered = Flag()
    let outsideMask = Flag()

    init(_ source: FileSystemObjectSource, activate: Bool = true) {
        self.source = source
        let log = log
        let cancelled = cancelled
        let registered = registered
        let outsideMask = outsideMask
        source.setEventHandler {
            let events = source.events
            if events.rawValue & ~source.mask != 0 || source.data & ~source.mask != 0 { outsideMask.set() }
            log.record(events)
        }
        source.setCancelHandler { cancelled.set() }
        source.setRegistrationHandler { registered.set() }
        if activate {
            source.activate()
            _ = waitUntil { registered.isSet || cancelled.isSet }
        }
    }

    @discardableResult
    func finish() -> Bool {
        source.cancel()
        return cancelled.await()
    }
}

// MARK: Tests

extension LullSuite {
    /// File-system object sources: kqueue's EVFILT_VNODE meaning on inotify.
    @Suite struct FileSystemSourceTests {
        let queue = WorkQueue(label: "lull.test.fs")

        // MARK: Files

        @Test func aFileWatchedThroughItsDescriptorReportsWriteExtendAndAttrib() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let file = directory.at("file")
            let descriptor = try FileSystemTestKit.openForWriting(file)
            defer { close(descriptor) }
            try FileSystemTestKit.write(file, "hello")
            let watched = WatchedObject(EventSource.makeFileSystemObjectSource(fileDescriptor: descriptor, eventMask: .all, queue: queue))
            #expect(watched.source.handle == UInt(descriptor))
            #expect(watched.source.mask == FileSystemEvent.all.rawValue)
            #expect(watched.source.registrationError == nil)

            // Growing: write + extend.
            try FileSystemTestKit.write(file, " world", append: true)
            #expect(watched.log.waitFor([.write, .extend]), "got \(watched.log.values)")
            #expect(watched.log.staysFree(of: [.attrib, .link, .delete, .rename, .revoke]))

            // Overwriting in place: write, not extend.
            watched.log.reset()
            try FileSystemTestKit.overwriteStart(descriptor, "HELLO")
            #expect(watched.log.waitFor(.write), "got \(watched.log.values)")
            #expect(watched.log.staysFree(of: [.extend, .attrib, .link]))

            // Metadata: attrib, not link.
            watched.log.reset()
            try FileSystemTestKit.check(chmod(file, 0o600), "chmod")
            #expect(watched.log.waitFor(.attrib), "got \(watched.log.values)")
            #expect(watched.log.staysFree(of: [.link, .delete, .write]))
            #expect(!watched.outsideMask.isSet)
            #expect(watched.finish())
        }

        @Test func truncatingIsWriteAndExtendOnlyWhenItGrows() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let file = directory.at("file")
            try FileSystemTestKit.write(file, "twelve bytes")
            let watched = WatchedObject(try EventSource.makeFileSystemObjectSource(path: file, eventMask: .all, queue: queue))

            try FileSystemTestKit.check(truncate(file, 4), "truncate")
            #expect(watched.log.waitFor(.write), "got \(watched.log.values)")
            #expect(watched.log.staysFree(of: [.extend, .attrib, .link, .delete]))

            watched.log.reset()
            try FileSystemTestKit.check(truncate(file, 4_096), "truncate")
            #expect(watched.log.waitFor([.write, .extend]), "got \(watched.log.values)")
            #expect(watched.log.staysFree(of: [.attrib, .link, .delete]))
            #expect(watched.finish())
        }

        @Test func ownerAndTimesAreAttrib() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let file = directory.at("file")
            try FileSystemTestKit.write(file, "x")
            let watched = WatchedObject(try EventSource.makeFileSystemObjectSource(path: file, eventMask: .all, queue: queue))
            let changes: [(String, () -> Int32)] = [
                ("chown", { chown(file, getuid(), getgid()) }),
                ("utimes", { utimes(file, nil) }),
            ]
            for (call, change) in changes {
                watched.log.reset()
                try FileSystemTestKit.check(change(), call)
                #expect(watched.log.waitFor(.attrib), "\(call): got \(watched.log.values)")
                #expect(watched.log.staysFree(of: [.write, .extend, .link, .delete, .rename]), "\(call)")
            }
            #expect(watched.finish())
        }

        @Test func hardLinksAreLinkNotAttrib() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let file = directory.at("file")
            try FileSystemTestKit.write(file, "x")
            let descriptor = try FileSystemTestKit.openForWriting(file)
            defer { close(descriptor) }
            let watched = WatchedObject(EventSource.makeFileSystemObjectSource(fileDescriptor: descriptor, eventMask: .all, queue: queue))

            try FileSystemTestKit.check(link(file, directory.at("second")), "link")
            #expect(watched.log.waitFor(.link), "got \(watched.log.values)")
            #expect(watched.log.staysFree(of: [.attrib, .delete]))

            // Removing one of two links: Darwin reports DELETE | LINK on every unlink.
            watched.log.reset()
            try FileSystemTestKit.check(unlink(directory.at("second")), "unlink")
            #expect(watched.log.waitFor([.link, .delete]), "got \(watched.log.values)")
            #expect(watched.log.staysFree(of: .attrib))

            // A source with only .attrib in its mask does not fire for a link.
            let attribOnly = WatchedObject(try EventSource.makeFileSystemObjectSource(path: file, eventMask: .attrib, queue: queue))
            watched.log.reset()
            try FileSystemTestKit.check(link(file, directory.at("third")), "link")
            #expect(watched.log.waitFor(.link))
            #expect(watched.log.staysFree(of: .attrib))
            #expect(attribOnly.log.count == 0)
            try FileSystemTestKit.check(chmod(file, 0o640), "chmod")
            #expect(attribOnly.log.waitFor(.attrib))
            #expect(attribOnly.log.union == .attrib)
            #expect(attribOnly.finish())
            #expect(watched.finish())
        }

        @Test func theSourceFollowsTheObjectThroughARenameAndSeesLaterWrites() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let original = directory.at("original")
            let renamed = directory.at("renamed")
            try FileSystemTestKit.write(original, "data")
            let watched = WatchedObject(try EventSource.makeFileSystemObjectSource(path: original, eventMask: .all, queue: queue))
            #expect(watched.source.handle == UInt.max)

            try FileSystemTestKit.check(rename(original, renamed), "rename")
            #expect(watched.log.waitFor(.rename), "got \(watched.log.values)")
            #expect(watched.log.staysFree(of: [.delete, .write]))

            // Writes under the new name still reach the source; a new file at the old name does not.
            watched.log.reset()
            try FileSystemTestKit.write(renamed, "more", append: true)
            #expect(watched.log.waitFor([.write, .extend]), "got \(watched.log.values)")
            watched.log.reset()
            try FileSystemTestKit.write(original, "a different file")
            #expect(watched.log.staysFree(of: .all, for: .milliseconds(200)))
            #expect(watched.finish())
        }

        @Test func anUnlinkIsDeleteEvenWhileADescriptorKeepsTheFile() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let file = directory.at("file")
            let descriptor = try FileSystemTestKit.openForWriting(file)
            defer { close(descriptor) }
            let byDescriptor = WatchedObject(EventSource.makeFileSystemObjectSource(fileDescriptor: descriptor, eventMask: .all, queue: queue))
            let byPath = WatchedObject(try EventSource.makeFileSystemObjectSource(path: file, eventMask: .delete, queue: queue))

            try FileSystemTestKit.check(unlink(file), "unlink")
            // The program's descriptor is still open: inotify has said nothing but IN_ATTRIB.
            // Darwin posts DELETE | LINK for the unlink.
            #expect(byDescriptor.log.waitFor([.delete, .link]), "got \(byDescriptor.log.values)")
            #expect(byPath.log.waitFor(.delete), "got \(byPath.log.values)")
            #expect(byPath.log.union == .delete)
            #expect(byDescriptor.log.staysFree(of: .attrib))

            // The unlinked file can still be written through the descriptor, and is watched.
            byDescriptor.log.reset()
            let bytes = Array("after".utf8)
            #expect(bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) } == bytes.count)
            #expect(byDescriptor.log.waitFor([.write, .extend]))
            #expect(byDescriptor.log.staysFree(of: .delete))
            #expect(byDescriptor.finish())
            #expect(byPath.finish())
        }

        @Test func renamingAnotherFileOverTheWatchedOneIsDelete() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let victim = directory.at("victim")
            try FileSystemTestKit.write(victim, "old")
            try FileSystemTestKit.write(directory.at("replacement"), "new")
            let watched = WatchedObject(try EventSource.makeFileSystemObjectSource(path: victim, eventMask: .all, queue: queue))
            try FileSystemTestKit.check(rename(directory.at("replacement"), victim), "rename")
            #expect(watched.log.waitFor([.delete, .link]), "got \(watched.log.values)")
            #expect(watched.log.staysFree(of: .rename))
            #expect(watched.finish())
        }

        // MARK: Directories

        @Test func aDirectoryReportsEntryChangesAsWriteAndSubdirectoriesAsLink() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let descriptor = try FileSystemTestKit.openDirectory(directory.path)
            defer { close(descriptor) }
            let watched = WatchedObject(EventSource.makeFileSystemObjectSource(fileDescriptor: descriptor, eventMask: .all, queue: queue))

            try FileSystemTestKit.write(directory.at("file"), "x")
            #expect(watched.log.waitFor(.write), "got \(watched.log.values)")
            #expect(watched.log.staysFree(of: [.link, .extend, .attrib]))

            // Writing into an entry is not a change of the directory.
            watched.log.reset()
            try FileSystemTestKit.write(directory.at("file"), "more", append: true)
            #expect(watched.log.staysFree(of: .all, for: .milliseconds(200)))

            watched.log.reset()
            try FileSystemTestKit.check(rename(directory.at("file"), directory.at("file2")), "rename")
            #expect(watched.log.waitFor(.write))
            #expect(watched.log.staysFree(of: [.link, .rename]))

            watched.log.reset()
            try FileSystemTestKit.check(mkdir(directory.at("sub"), 0o755), "mkdir")
            #expect(watched.log.waitFor([.write, .link]), "got \(watched.log.values)")

            // A subdirectory renamed inside the directory does not change its link count.
            watched.log.reset()
            try FileSystemTestKit.check(rename(directory.at("sub"), directory.at("sub2")), "rename")
            #expect(watched.log.waitFor(.write))
            #expect(watched.log.staysFree(of: .link))

            watched.log.reset()
            try FileSystemTestKit.check(rmdir(directory.at("sub2")), "rmdir")
            #expect(watched.log.waitFor([.write, .link]), "got \(watched.log.values)")

            watched.log.reset()
            try FileSystemTestKit.check(unlink(directory.at("file2")), "unlink")
            #expect(watched.log.waitFor(.write))
            #expect(watched.log.staysFree(of: [.link, .delete]))

            watched.log.reset()
            try FileSystemTestKit.check(chmod(directory.path, 0o750), "chmod")
            #expect(watched.log.waitFor(.attrib))
            #expect(watched.log.staysFree(of: [.write, .link]))
            #expect(watched.finish())
        }

        @Test func aSubdirectoryMovedInOrOutIsWriteAndLinkAFileOnlyWrite() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            for name in ["watched", "outside", "outside/sub"] {
                try FileSystemTestKit.check(mkdir(directory.at(name), 0o755), "mkdir \(name)")
            }
            let watched = WatchedObject(try EventSource.makeFileSystemObjectSource(path: directory.at("watched"), eventMask: .all, queue: queue))

            try FileSystemTestKit.check(rename(directory.at("outside/sub"), directory.at("watched/sub")), "rename in")
            #expect(watched.log.waitFor([.write, .link]), "moved in: got \(watched.log.values)")
            #expect(watched.log.staysFree(of: [.delete, .rename, .attrib]))

            watched.log.reset()
            try FileSystemTestKit.check(rename(directory.at("watched/sub"), directory.at("outside/sub2")), "rename out")
            #expect(watched.log.waitFor([.write, .link]), "moved out: got \(watched.log.values)")
            #expect(watched.log.staysFree(of: [.delete, .rename, .attrib]))

            // A file moved in or out changes no link count of the directory.
            try FileSystemTestKit.write(directory.at("outside/file"), "x")
            watched.log.reset()
            try FileSystemTestKit.check(rename(directory.at("outside/file"), directory.at("watched/file")), "rename file in")
            #expect(watched.log.waitFor(.write), "got \(watched.log.values)")
            #expect(watched.log.staysFree(of: .link))
            watched.log.reset()
            try FileSystemTestKit.check(rename(directory.at("watched/file"), directory.at("outside/file")), "rename file out")
            #expect(watched.log.waitFor(.write), "got \(watched.log.values)")
            #expect(watched.log.staysFree(of: .link))
            #expect(watched.finish())
        }

        @Test func aWatchedDirectoryIsFollowedThroughAMoveAndItsRemovalIsDeleteWhileOpen() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            try FileSystemTestKit.check(mkdir(directory.at("a"), 0o755), "mkdir")
            try FileSystemTestKit.check(mkdir(directory.at("elsewhere"), 0o755), "mkdir")
            let descriptor = try FileSystemTestKit.openDirectory(directory.at("a"))
            defer { close(descriptor) }
            let byDescriptor = WatchedObject(EventSource.makeFileSystemObjectSource(fileDescriptor: descriptor, eventMask: .all, queue: queue))
            let byPath = WatchedObject(try EventSource.makeFileSystemObjectSource(path: directory.at("a"), eventMask: [.delete, .rename], queue: queue))

            // Moved to another directory: rename, and entries made there are still seen.
            try FileSystemTestKit.check(rename(directory.at("a"), directory.at("elsewhere/b")), "rename")
            #expect(byDescriptor.log.waitFor(.rename))
            #expect(byPath.log.waitFor(.rename))
            try FileSystemTestKit.write(directory.at("elsewhere/b/entry"), "x")
            #expect(byDescriptor.log.waitFor(.write))
            try FileSystemTestKit.check(unlink(directory.at("elsewhere/b/entry")), "unlink")

            // Removed in its new place while the program still has it open: delete.
            byDescriptor.log.reset()
            byPath.log.reset()
            try FileSystemTestKit.check(rmdir(directory.at("elsewhere/b")), "rmdir")
            #expect(byDescriptor.log.waitFor([.delete, .link]), "got \(byDescriptor.log.values)")
            #expect(byPath.log.waitFor(.delete), "got \(byPath.log.values)")
            #expect(byPath.log.union == .delete)
            #expect(byDescriptor.finish())
            #expect(byPath.finish())
        }

        // MARK: Sharing, masks, coalescing, lifetime

        @Test func sourcesOnOneInodeShareOneWatchAndEachGetsItsMask() throws {
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let file = directory.at("file")
            try FileSystemTestKit.write(file, "x")
            try FileSystemTestKit.check(link(file, directory.at("alias")), "link")
            let descriptor = try FileSystemTestKit.openForWriting(file)
            defer { close(descriptor) }
            let writes = WatchedObject(try FileSystemObjectSource(path: file, eventMask: .write, queue: queue, hub: hub))
            let attribs = WatchedObject(try FileSystemObjectSource(path: directory.at("alias"), eventMask: .attrib, queue: queue, hub: hub))
            let everything = WatchedObject(FileSystemObjectSource(descriptor: descriptor, eventMask: .all, queue: queue, hub: hub))
            #expect(hub.snapshot.watches == 1, "three sources on one inode should share one watch")

            try FileSystemTestKit.write(file, "y", append: true)
            try FileSystemTestKit.check(chmod(file, 0o600), "chmod")
            #expect(writes.log.waitFor(.write))
            #expect(attribs.log.waitFor(.attrib))
            #expect(everything.log.waitFor([.write, .extend, .attrib]))
            #expect(writes.log.union == .write)
            #expect(attribs.log.union == .attrib)

            // One source leaves; the others still fire.
            #expect(writes.finish())
            #expect(hub.snapshot.watches == 1)
            everything.log.reset()
            try FileSystemTestKit.write(file, "z", append: true)
            #expect(everything.log.waitFor(.write))
            #expect(attribs.finish())
            #expect(everything.finish())
            // The last lease removed the watch, and the idle instance is closed.
            #expect(waitUntil { hub.snapshot.watches == 0 && !hub.snapshot.hasInstance })
        }

        @Test func eventsCoalesceWhileSuspendedIntoOneHandlerCall() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let file = directory.at("file")
            try FileSystemTestKit.write(file, "x")
            let watched = WatchedObject(try EventSource.makeFileSystemObjectSource(path: file, eventMask: .all, queue: queue))
            // A second source on the same file tells when the hub has read everything.
            let witness = WatchedObject(try EventSource.makeFileSystemObjectSource(path: file, eventMask: .rename, queue: queue))
            watched.source.suspend()
            try FileSystemTestKit.write(file, "grow", append: true)
            try FileSystemTestKit.check(chmod(file, 0o600), "chmod")
            try FileSystemTestKit.check(rename(file, directory.at("moved")), "rename")
            #expect(witness.log.waitFor(.rename))
            #expect(keepsHolding(for: .milliseconds(50)) { watched.log.count == 0 })
            watched.source.resume()
            #expect(watched.log.waitFor([.write, .extend, .attrib, .rename]), "got \(watched.log.values)")
            #expect(watched.log.count == 1, "one handler call with the OR of the events, got \(watched.log.values)")
            #expect(watched.finish())
            #expect(witness.finish())
        }

        @Test func cancellingReleasesTheDescriptorsLullOpened() throws {
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            try FileSystemTestKit.write(directory.at("file"), "x")
            // Earlier tests' sources are gone: let the shared hub close its instance first.
            _ = waitUntil { !Runtime.shared.inotify.snapshot.hasInstance }
            let before = FileSystemTestKit.openDescriptorCount()
            do {
                let first = WatchedObject(try FileSystemObjectSource(path: directory.at("file"), eventMask: .all, queue: queue, hub: hub))
                let second = WatchedObject(try FileSystemObjectSource(path: directory.path, eventMask: .all, queue: queue, hub: hub))
                #expect(FileSystemTestKit.openDescriptorCount() > before)
                #expect(first.finish())
                #expect(second.finish())
            }
            // (At most: a descriptor of the process's own closing meanwhile is no leak.)
            #expect(waitUntil { !hub.snapshot.hasInstance && FileSystemTestKit.openDescriptorCount() <= before },
                    "descriptors before: \(before), now: \(FileSystemTestKit.openDescriptorCount())")
        }

        @Test func aSourceTheProgramDropsIsCancelledAndReleasesItsWatch() throws {
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let cancelled = Flag()
            do {
                let inactive = try FileSystemObjectSource(path: directory.path, eventMask: .all, queue: queue, hub: hub)
                inactive.setCancelHandler { cancelled.set() }
            }
            #expect(cancelled.await())
            #expect(waitUntil { hub.snapshot.watches == 0 && !hub.snapshot.hasInstance })
        }

        // MARK: Revocation

        @Test(.enabled(if: getuid() == 0, "mounting a tmpfs needs root"))
        func aLazyUnmountIsRevoke() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let mountPoint = directory.at("mnt")
            try FileSystemTestKit.check(mkdir(mountPoint, 0o755), "mkdir")
            guard mount("lull-test", mountPoint, "tmpfs", 0, nil) == 0 else {
                // Not allowed here (a container without CAP_SYS_ADMIN): nothing to test.
                return
            }
            var mounted = true
            defer { if mounted { umount2(mountPoint, Int32(MNT_DETACH)) } }
            try FileSystemTestKit.write("\(mountPoint)/file", "x")
            let file = WatchedObject(try EventSource.makeFileSystemObjectSource(path: "\(mountPoint)/file", eventMask: .all, queue: queue))
            let root = WatchedObject(try EventSource.makeFileSystemObjectSource(path: mountPoint, eventMask: .revoke, queue: queue))

            // The pin holds the file system busy, as an open descriptor does.
            #expect(umount(mountPoint) != 0 && errno == EBUSY)
            try FileSystemTestKit.check(umount2(mountPoint, Int32(MNT_DETACH)), "umount2")
            mounted = false
            #expect(file.log.waitFor(.revoke), "got \(file.log.values)")
            #expect(root.log.waitFor(.revoke), "got \(root.log.values)")
            #expect(root.log.union == .revoke)
            #expect(file.finish())
            #expect(root.finish())
        }

        // MARK: Overflow and storms

        @Test func anInjectedOverflowFiresEverySourceWithAConservativeSet() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            try FileSystemTestKit.write(directory.at("file"), "x")
            try FileSystemTestKit.write(directory.at("gone"), "x")
            let goneDescriptor = try FileSystemTestKit.openForWriting(directory.at("gone"))
            defer { close(goneDescriptor) }
            let file = WatchedObject(try EventSource.makeFileSystemObjectSource(path: directory.at("file"), eventMask: .all, queue: queue))
            let folder = WatchedObject(try EventSource.makeFileSystemObjectSource(path: directory.path, eventMask: [.write, .delete], queue: queue))
            let gone = WatchedObject(EventSource.makeFileSystemObjectSource(fileDescriptor: goneDescriptor, eventMask: .all, queue: queue))
            // Unlinked while the hub is not reading: only the overflow will tell.
            Runtime.shared.inotify.holdDraining(true)
            try FileSystemTestKit.check(unlink(directory.at("gone")), "unlink")
            let overflowsBefore = FileSystemDiagnostics.overflowCount
            Runtime.shared.inotify.injectOverflow()
            Runtime.shared.inotify.holdDraining(false)
            #expect(FileSystemDiagnostics.overflowCount == overflowsBefore + 1)
            #expect(file.log.waitFor([.write, .extend, .attrib, .link, .rename]), "got \(file.log.values)")
            #expect(!file.log.union.contains(.delete), "not confirmed, so not reported")
            #expect(!file.log.union.contains(.revoke))
            #expect(folder.log.waitFor(.write))
            #expect(folder.log.union == .write)
            #expect(gone.log.waitFor(.delete), "the link count is 0: delete is confirmed; got \(gone.log.values)")
            #expect(file.finish())
            #expect(folder.finish())
            #expect(gone.finish())
        }

        @Test func aRealQueueOverflowIsCountedAndEverySourceFires() throws {
            let limit = Int(lull_read_proc_integer("/proc/sys/fs/inotify/max_queued_events"))
            try #require(limit > 0 && limit <= 200_000, "max_queued_events is \(limit)")
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues, registersWithReactor: false)
            let directory = try FileSystemTestKit.TemporaryDirectory("overflow")
            defer { directory.remove() }
            try FileSystemTestKit.write(directory.at("bystander"), "x")
            let folder = WatchedObject(try FileSystemObjectSource(path: directory.path, eventMask: .all, queue: queue, hub: hub))
            let bystander = WatchedObject(try FileSystemObjectSource(path: directory.at("bystander"), eventMask: .all, queue: queue, hub: hub))
            // Nobody reads this hub's queue: more distinct events than it holds overflow it.
            let descriptor = try FileSystemTestKit.openDirectory(directory.path)
            defer { close(descriptor) }
            for index in 0..<(limit + 64) {
                let made = openat(descriptor, "f\(index)", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
                if made >= 0 { close(made) }
            }
            let overflowsBefore = FileSystemDiagnostics.overflowCount
            let readBefore = FileSystemDiagnostics.eventsRead
            hub.requestDrain()
            #expect(FileSystemDiagnostics.overflowCount == overflowsBefore + 1)
            #expect(FileSystemDiagnostics.eventsRead - readBefore >= limit)
            #expect(folder.log.waitFor([.write, .link, .attrib]), "got \(folder.log.values)")
            #expect(bystander.log.waitFor([.write, .attrib, .rename]), "got \(bystander.log.values)")
            #expect(!bystander.log.union.contains(.delete))

            // And the watches still work afterwards.
            bystander.log.reset()
            try FileSystemTestKit.check(chmod(directory.at("bystander"), 0o600), "chmod")
            hub.requestDrain()
            #expect(bystander.log.waitFor(.attrib))
            #expect(folder.finish())
            #expect(bystander.finish())
        }

        @Test func aStormOfChangesIsDrainedAndLosesNothingSilently() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("storm")
            defer { directory.remove() }
            try FileSystemTestKit.write(directory.at("sentinel"), "x")
            let folder = WatchedObject(try EventSource.makeFileSystemObjectSource(path: directory.path, eventMask: .write, queue: queue))
            let sentinel = WatchedObject(try EventSource.makeFileSystemObjectSource(path: directory.at("sentinel"), eventMask: .attrib, queue: queue))
            let handlerCalls = Counter()
            folder.source.setEventHandler { handlerCalls.increment() }
            let readBefore = FileSystemDiagnostics.eventsRead
            let overflowsBefore = FileSystemDiagnostics.overflowCount
            let descriptor = try FileSystemTestKit.openDirectory(directory.path)
            defer { close(descriptor) }
            // More events than the kernel's queue holds: the hub must keep draining while
            // they arrive, or count the overflow.
            let limit = Int(lull_read_proc_integer("/proc/sys/fs/inotify/max_queued_events"))
            try #require(limit > 0 && limit <= 200_000, "max_queued_events is \(limit)")
            let storm = limit + limit / 4
            for index in 0..<storm {
                let made = openat(descriptor, "f\(index)", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
                if made >= 0 { close(made) }
            }
            // The end of the storm arrives: the queue was drained up to it.
            try FileSystemTestKit.check(chmod(directory.at("sentinel"), 0o600), "chmod")
            #expect(sentinel.log.waitFor(.attrib))
            #expect(handlerCalls.value >= 1)
            // Every event was read, or the loss was counted (and reported as an overflow).
            let read = FileSystemDiagnostics.eventsRead - readBefore
            #expect(read >= storm || FileSystemDiagnostics.overflowCount > overflowsBefore,
                    "read \(read) of \(storm) events and no overflow counted")
            #expect(folder.finish())
            #expect(sentinel.finish())
        }

        // MARK: Bad input and limits

        @Test func aPathThatDoesNotExistThrowsWithThePathAndTheReason() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let missing = directory.at("missing/file")
            do {
                _ = try EventSource.makeFileSystemObjectSource(path: missing, eventMask: .all, queue: queue)
                Issue.record("no error for a path that does not exist")
            } catch {
                let text = "\(error)"
                #expect(text.contains(missing), "\(text)")
                #expect(text.contains(String(cString: strerror(ENOENT))), "\(text)")
                #expect((error as? EventSourceError)?.code == ENOENT)
            }
        }

        @Test func aDescriptorThatIsNotOpenCancelsTheSourceWithTheReason() throws {
            for bad in [Int32(-1), 9_998] {
                try #require(lull_fd_check(bad) != 0)
                let source = EventSource.makeFileSystemObjectSource(fileDescriptor: bad, eventMask: .all, queue: queue)
                let watched = WatchedObject(source, activate: false)
                let start = monotonicNanoseconds()
                source.activate()
                #expect(watched.cancelled.await())
                #expect(monotonicNanoseconds() - start < 1_000_000_000, "the cancel handler took more than a second")
                #expect(source.isCancelled)
                #expect(!watched.registered.isSet)
                let text = source.registrationError.map { "\($0)" } ?? ""
                #expect(text.contains("descriptor \(bad)"), "\(text)")
                #expect(text.contains(String(cString: strerror(EBADF))), "\(text)")
            }
        }

        @Test func aPermissionErrorThrowsWithThePathAndTheReason() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            try FileSystemTestKit.check(mkdir(directory.at("private"), 0o700), "mkdir")
            try FileSystemTestKit.write(directory.at("private/file"), "x")
            // No one may search the directory, not even its owner (this process when it is
            // not root); root reads everything, so its child drops to nobody below.
            try FileSystemTestKit.check(chmod(directory.at("private"), 0), "chmod")
            defer { chmod(directory.at("private"), 0o700) }
            try FileSystemTestKit.check(chmod(directory.path, 0o755), "chmod")
            let path = directory.at("private/file")
            let queue = queue
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues, registersWithReactor: false)
            _ = try? FileSystemObjectSource(path: directory.at("nothing"), eventMask: .all, queue: queue, hub: hub)  // warm up
            let answer = try FileSystemTestKit.inForkedChild {
                if getuid() == 0, setgid(65_534) != 0 || setuid(65_534) != 0 { return "setuid failed" }
                do throws(EventSourceError) {
                    _ = try FileSystemObjectSource(path: path, eventMask: .all, queue: queue, hub: hub)
                    return "no error"
                } catch {
                    return "\(error.code)|\(error)"
                }
            }
            let text = try #require(answer, "the child did not answer")
            #expect(text.hasPrefix("\(EACCES)|"), "\(text)")
            #expect(text.contains(path), "\(text)")
            #expect(text.contains(String(cString: strerror(EACCES))), "\(text)")
        }

        @Test func theWatchLimitThrowsNamingTheSysctlToRaise() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let path = directory.path
            let queue = queue
            _ = try? FileSystemObjectSource(path: directory.at("nothing"), eventMask: .all, queue: queue, hub: InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues, registersWithReactor: false))
            let answer = try FileSystemTestKit.inForkedChild {
                // inotify's limits are per user namespace: lower them in a new one.
                let entered = lull_unshare_user_namespace()
                guard entered == 0 else { return "unshare: \(entered)" }
                let limit = open("/proc/sys/user/max_inotify_watches", O_WRONLY | O_CLOEXEC)
                guard limit >= 0 else { return "open limit: \(errno)" }
                _ = Glibc.write(limit, "0", 1)
                close(limit)
                do throws(EventSourceError) {
                    _ = try FileSystemObjectSource(path: path, eventMask: .all, queue: queue, hub: InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues, registersWithReactor: false))
                    return "no error"
                } catch {
                    return "\(error.code)|\(error)"
                }
            }
            let text = try #require(answer, "the child did not answer")
            if text.hasPrefix("unshare:") || text.hasPrefix("open limit:") {
                // User namespaces are not available here: nothing to test.
                return
            }
            #expect(text.hasPrefix("\(ENOSPC)|"), "\(text)")
            #expect(text.contains(path), "\(text)")
            #expect(text.contains("fs.inotify.max_user_watches"), "\(text)")
            #expect(text.contains("sysctl"), "\(text)")
        }

        @Test func theInstanceLimitThrowsNamingTheSysctlToRaise() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory()
            defer { directory.remove() }
            let path = directory.path
            let queue = queue
            _ = try? FileSystemObjectSource(path: directory.at("nothing"), eventMask: .all, queue: queue, hub: InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues, registersWithReactor: false))
            let answer = try FileSystemTestKit.inForkedChild {
                let entered = lull_unshare_user_namespace()
                guard entered == 0 else { return "unshare: \(entered)" }
                let limit = open("/proc/sys/user/max_inotify_instances", O_WRONLY | O_CLOEXEC)
                guard limit >= 0 else { return "open limit: \(errno)" }
                _ = Glibc.write(limit, "0", 1)
                close(limit)
                do throws(EventSourceError) {
                    _ = try FileSystemObjectSource(path: path, eventMask: .all, queue: queue, hub: InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues, registersWithReactor: false))
                    return "no error"
                } catch {
                    return "\(error.code)|\(error)"
                }
            }
            let text = try #require(answer, "the child did not answer")
            if text.hasPrefix("unshare:") || text.hasPrefix("open limit:") { return }
            #expect(text.hasPrefix("\(EMFILE)|"), "\(text)")
            #expect(text.contains(path), "\(text)")
            #expect(text.contains("fs.inotify.max_user_instances"), "\(text)")
        }

        /// A strict unmount cannot happen under a pin, and a lazy one is seen in the mount
        /// table first (`aLazyUnmountIsRevoke`): IN_UNMOUNT itself is checked on the mapping.
        @Test func inUnmountIsRevokeOnce() {
            let watch = InotifyWatch(watchDescriptor: 1, status: lull_object_status())
            let unmount = InotifyEvent(watchDescriptor: 1, mask: .unmount, cookie: 0, name: nil)
            #expect(VnodeEventMapping.events(for: unmount, on: watch, internalMoves: []) == .revoke)
            #expect(VnodeEventMapping.events(for: unmount, on: watch, internalMoves: []) == [])
        }

        @Test func theEventHeaderLayoutIsTheKernels() {
            #expect(lull_inotify_event_header_size() == 16)
            let mounts = "22 1 8:1 / / rw - ext4 /dev/root rw\n35 22 0:31 / /tmp rw - tmpfs none rw\n"
            let ids = Array(mounts.utf8).withUnsafeBytes { MountTable.mountIDs($0) }
            #expect(ids == [22, 35])
        }
    }
}
