import Glibc
import Testing
@testable import Lull

extension LullSuite {
    /// Names that are not UTF-8 (Linux allows any byte but "/" and NUL): watched, and
    /// reported as paths that name the files.
    @Suite struct TreeWatcherNameTests {
        let queue = WorkQueue(label: "lull.test.fs.watcher.names")

        /// `base` (a String path without escapes) and `name` as a C path.
        private func cPath(_ base: String, _ components: [UInt8]...) -> [CChar] {
            var bytes = Array(base.utf8)
            for component in components { bytes += [UInt8(ascii: "/")] + component }
            return bytes.map { CChar(bitPattern: $0) } + [0]
        }

        private func createdPath(_ log: TreeChangeLog, _ path: [CChar]) -> DirectoryTreeWatcher.Change? {
            log.all.first { $0.kind == .created && DirectoryTreeWatcher.fileSystemRepresentation(of: $0.path) == path }
        }

        @Test func directoriesWhoseNamesAreNotUTF8AreWatchedAndTheirPathsNameTheFiles() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            let existing: [UInt8] = [0xFF, 0xFE]              // never UTF-8
            let file: [UInt8] = [0x66, 0xC3, 0x28]            // "f" and a broken two-byte sequence
            let later: [UInt8] = [0x63, 0x61, 0x66, 0xE9]     // "café" in Latin-1
            let escapeLookalike: [UInt8] = [0xEE, 0xBE, 0x80] // U+EF80 in valid UTF-8
            try FileSystemTestKit.check(mkdir(cPath(directory.path, existing), 0o755), "mkdir")
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            let watcher = try DirectoryTreeWatcher(path: directory.path, latency: .milliseconds(20), queue: queue, hub: hub)
            defer { watcher.cancel() }
            let log = TreeChangeLog()
            watcher.setEventHandler { log.record($0) }
            watcher.activate()
            #expect(hub.snapshot.watches == 3, "the root, \\xFF\\xFE and the root's parent: \(hub.snapshot.watches)")

            // A file made in the directory found by the walk.
            let filePath = cPath(directory.path, existing, file)
            let descriptor = open(filePath, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
            try FileSystemTestKit.check(descriptor >= 0 ? 0 : -1, "open")
            close(descriptor)
            #expect(waitUntil { createdPath(log, filePath) != nil }, "\(log.summary)")
            let change = try #require(createdPath(log, filePath))
            #expect(!change.path.contains("\u{FFFD}"), "\(change.path)")
            let reopened = open(DirectoryTreeWatcher.fileSystemRepresentation(of: change.path), O_RDONLY | O_CLOEXEC)
            #expect(reopened >= 0, "the reported path opens the file")
            if reopened >= 0 { close(reopened) }
            #expect(change.path == DirectoryTreeWatcher.path(fileSystemRepresentation: filePath.dropLast().map { UInt8(bitPattern: $0) }))

            // Directories made later, and one whose UTF-8 spells an escape: watched too.
            for name in [later, escapeLookalike] {
                try FileSystemTestKit.check(mkdir(cPath(directory.path, name), 0o755), "mkdir")
                #expect(waitUntil { createdPath(log, cPath(directory.path, name)) != nil }, "\(log.summary)")
                let inner = cPath(directory.path, name, existing)
                try FileSystemTestKit.check(mkdir(inner, 0o755), "mkdir")
                #expect(waitUntil { createdPath(log, inner) != nil }, "\(log.summary)")
            }
            #expect(waitUntil { hub.snapshot.watches == 7 }, "\(hub.snapshot.watches) watches")
            #expect(watcher.error == nil)
            // Different names are different paths.
            let paths = Set(log.all.map(\.path))
            #expect(paths.count == Set(log.all.map { DirectoryTreeWatcher.fileSystemRepresentation(of: $0.path) }).count)
        }

        @Test func aRootWhoseNameIsNotUTF8IsGivenInTheSameForm() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            let name: [UInt8] = [0x72, 0x80, 0x6F, 0x6F, 0x74]
            try FileSystemTestKit.check(mkdir(cPath(directory.path, name), 0o755), "mkdir")
            let root = DirectoryTreeWatcher.path(fileSystemRepresentation: Array(directory.path.utf8) + [UInt8(ascii: "/")] + name)
            let watcher = try DirectoryTreeWatcher(path: root, latency: .milliseconds(20), queue: queue)
            defer { watcher.cancel() }
            let log = TreeChangeLog()
            watcher.setEventHandler { log.record($0) }
            watcher.activate()
            #expect(watcher.path == root)
            let file = cPath(directory.path, name, [0x78])
            let descriptor = open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
            try FileSystemTestKit.check(descriptor >= 0 ? 0 : -1, "open")
            close(descriptor)
            #expect(log.waitFor(.created, root + "/x"), "\(log.summary)")
        }

        @Test func theStringFormGivesBackEveryByteSequence() {
            var generator = SeededBytes(seed: 0x5EED_1234)
            let alphabet: [UInt8] = [0x41, 0x80, 0xBF, 0xC2, 0xC3, 0xE0, 0xED, 0xEE, 0xEF, 0xBE, 0xF0, 0xF4, 0x90, 0xA0, 0xFF]
            let samples = (0..<5_000).map { _ in
                (0..<generator.next(below: 12)).map { _ in alphabet[generator.next(below: alphabet.count)] }
            }
            let lost = samples.first { PathEncoding.bytes(of: PathEncoding.string(of: $0)) != $0 }
            #expect(lost == nil, "not given back (seed 0x5EED_1234)")
            // UTF-8 names are themselves, byte for byte (no normalization).
            for name in ["plain", "café", "cafe\u{301}", "日本語", "🙂"] {
                #expect(PathEncoding.string(of: Array(name.utf8)) == name)
                #expect(PathEncoding.bytes(of: name) == Array(name.utf8))
            }
        }
    }
}

/// A small seeded generator (xorshift), so that a failure replays.
struct SeededBytes {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next(below bound: Int) -> Int {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        return Int(state % UInt64(bound))
    }
}
