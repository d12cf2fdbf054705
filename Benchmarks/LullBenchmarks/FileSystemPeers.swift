// The peers of the file-system benchmarks (Apple's Dispatch has no file-system sources on
// Linux): a raw inotify read loop on a thread blocked in poll(2), the floor of what any
// runtime can do, and Debian's `inotifywait -r` (inotify-tools) as a separate process.
// Also the scratch trees the benchmarks watch, and what /proc says about a process's
// memory and inotify watches.

import Glibc
import Synchronization

// MARK: - Raw inotify

/// A thread blocked in poll(2) on an inotify descriptor that reads each batch of events as
/// it comes and hands every event to `onEvent`, with nothing in between.
final class RawInotifyReader: Sendable {
    /// One inotify event: its mask and its name (empty for an event about the watch itself).
    typealias EventHandler = @Sendable (_ mask: UInt32, _ name: UnsafeRawBufferPointer) -> Void

    let descriptor: Int32
    /// A pipe whose write end, written once, tells the reading thread to end.
    private let wakeUp: (read: Int32, write: Int32)
    private let ended = Countdown(1)
    private let started = Atomic<Bool>(false)

    /// Nil when inotify_init1 or pipe fails (the error is in errno).
    init?() {
        let descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard descriptor >= 0 else { return nil }
        guard let ends = Descriptors.closeOnExecPipe() else {
            let saved = errno
            _ = Glibc.close(descriptor)
            errno = saved
            return nil
        }
        self.descriptor = descriptor
        wakeUp = ends
    }

    /// inotify_add_watch: false (errno set) when it fails.
    func watch(_ path: String, mask: UInt32) -> Bool {
        inotify_add_watch(descriptor, path, mask) >= 0
    }

    /// Starts the reading thread; false if it could not be created.
    func start(_ onEvent: @escaping EventHandler) -> Bool {
        started.store(true, ordering: .relaxed)
        let descriptor = descriptor
        let wakeUpRead = wakeUp.read
        let ended = ended
        let ok = ThreadStarter.start {
            let bufferSize = 64 * 1024
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: bufferSize, alignment: 8)
            defer {
                buffer.deallocate()
                ended.countDown()
            }
            var descriptors = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0),
                               pollfd(fd: wakeUpRead, events: Int16(POLLIN), revents: 0)]
            while true {
                let ready = poll(&descriptors, 2, -1)
                if ready < 0 && errno == EINTR { continue }
                if ready < 0 || descriptors[1].revents != 0 { return }
                while true {
                    let count = read(descriptor, buffer, bufferSize)
                    if count < 0 && errno == EINTR { continue }
                    if count <= 0 { break }  // EAGAIN: drained
                    var offset = 0
                    let header = MemoryLayout<inotify_event>.size
                    while offset + header <= count {
                        let event = (buffer + offset).assumingMemoryBound(to: inotify_event.self)
                        let nameLength = Int(event.pointee.len)
                        let nameStart = buffer + offset + header
                        let name = UnsafeRawBufferPointer(start: nameStart, count: Self.nameLength(nameStart, max: nameLength))
                        onEvent(event.pointee.mask, name)
                        offset += header + nameLength
                    }
                }
            }
        }
        if !ok { ended.countDown() }
        return ok
    }

    /// The length of a NUL-padded inotify name.
    private static func nameLength(_ start: UnsafeRawPointer, max: Int) -> Int {
        var length = 0
        while length < max && start.load(fromByteOffset: length, as: UInt8.self) != 0 { length += 1 }
        return length
    }

    /// Ends the reading thread (if started) and closes the descriptors, each once.
    func stop() {
        var byte: UInt8 = 1
        _ = write(wakeUp.write, &byte, 1)
        if started.load(ordering: .relaxed) { _ = ended.wait(seconds: 5) }
        Descriptors.close([descriptor, wakeUp.read, wakeUp.write])
    }
}

// MARK: - inotifywait

/// Debian's `inotifywait` (package inotify-tools), started as a monitor of a tree.
enum InotifyWait {
    static let missingMessage = "skipped: install inotify-tools (apt-get install inotify-tools; "
        + "`make bench` installs it) to compare with inotifywait -r"

    /// The path of `inotifywait` in PATH, or nil.
    static func executable() -> String? {
        let searchPath = getenv("PATH").map { String(cString: $0) } ?? "/usr/bin:/bin"
        for directory in searchPath.split(separator: ":") where !directory.isEmpty {
            let candidate = "\(directory)/inotifywait"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }

    /// A running inotifywait that has said "Watches established.".
    struct Ready {
        let pid: pid_t
        /// From just before posix_spawn to reading "Watches established." on its stderr.
        let seconds: Double
    }

    /// Starts `inotifywait -m -r` on `path` for the events Lull's tree watcher asks for,
    /// and waits until it says its watches are established.
    /// Why it could not be had: the text for the report.
    struct Failure: Error {
        let message: String
    }

    static func start(_ executable: String, watching path: String, timeout: Double) -> Result<Ready, Failure> {
        guard let pipe = Descriptors.closeOnExecPipe() else { return .failure(Failure(message: "pipe failed: \(Descriptors.lastError())")) }
        let ends = [pipe.read, pipe.write]
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, ends[1], 2)
        let arguments = [executable, "-m", "-r",
                         "-e", "modify,attrib,close_write,move,create,delete,delete_self,move_self", path]
        var cArguments: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        var pid: pid_t = 0
        let start = Clock.now()
        let spawnError = posix_spawn(&pid, executable, &actions, nil, &cArguments, environ)
        posix_spawn_file_actions_destroy(&actions)
        _ = close(ends[1])
        defer { _ = close(ends[0]) }
        guard spawnError == 0 else { return .failure(Failure(message: "posix_spawn \(executable): \(String(cString: strerror(spawnError)))")) }

        let marker = Array("Watches established.".utf8)
        var text: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        let deadline = start &+ UInt64(timeout * 1e9)
        while true {
            let now = Clock.now()
            guard now < deadline else {
                stop(pid)
                return .failure(Failure(message: "inotifywait had not established its watches after \(Format.seconds(timeout))"))
            }
            var descriptor = pollfd(fd: ends[0], events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Int32(min((deadline - now) / 1_000_000 + 1, 1000)))
            if ready < 0 && errno == EINTR { continue }
            if ready <= 0 { continue }
            let count = chunk.withUnsafeMutableBytes { read(ends[0], $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 {
                stop(pid)
                return .failure(Failure(message: "inotifywait ended before establishing its watches: "
                    + String(decoding: text, as: UTF8.self).split(separator: "\n").joined(separator: " | ")))
            }
            text += chunk[0..<count]
            if contains(text, marker) {
                return .success(Ready(pid: pid, seconds: Clock.seconds(from: start, to: Clock.now())))
            }
        }
    }

    /// Ends it (SIGTERM, by its pid) and reaps it.
    static func stop(_ pid: pid_t) {
        kill(pid, SIGTERM)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }

    private static func contains(_ text: [UInt8], _ marker: [UInt8]) -> Bool {
        guard text.count >= marker.count else { return false }
        for start in 0...(text.count - marker.count) where text[start] == marker[0] {
            if Array(text[start..<(start + marker.count)]) == marker { return true }
        }
        return false
    }
}

// MARK: - /proc

enum ProcessFacts {
    /// The inotify watches `pid` (nil: this process) holds, over all its inotify
    /// descriptors: the "inotify wd:" lines of /proc/PID/fdinfo/*.
    static func inotifyWatches(of pid: pid_t? = nil) -> Int {
        let directoryPath = pid.map { "/proc/\($0)/fdinfo" } ?? "/proc/self/fdinfo"
        guard let directory = opendir(directoryPath) else { return 0 }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if let first = name.first, first.isNumber { names.append(name) }
        }
        var watches = 0
        for name in names {
            guard let text = ThreadSwitches.readFile("\(directoryPath)/\(name)"), text.contains("inotify wd:") else { continue }
            watches += text.split(separator: "\n").lazy.filter { $0.hasPrefix("inotify wd:") }.count
        }
        return watches
    }
}

// MARK: - Scratch trees

enum ScratchTree {
    /// A new empty directory under $TMPDIR (or /tmp), or with `inMemory` under /dev/shm (a
    /// tmpfs) when there is one; nil if it cannot be made.
    static func makeDirectory(_ label: String, inMemory: Bool = false) -> String? {
        let base = inMemory && access("/dev/shm", W_OK | X_OK) == 0
            ? "/dev/shm" : getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp"
        var template = Array("\(base)/lull-bench-\(label).XXXXXX".utf8CString)
        return template.withUnsafeMutableBufferPointer { buffer in
            mkdtemp(buffer.baseAddress!).map { String(cString: $0) }
        }
    }

    /// Makes `top` directories under `root`, each with `below` subdirectories:
    /// top × (1 + below) directories in all. False (errno set) if a mkdir fails.
    static func makeDirectories(under root: String, top: Int, below: Int) -> Bool {
        for index in 0..<top {
            let directory = "\(root)/d\(index)"
            guard mkdir(directory, 0o755) == 0 else { return false }
            for subindex in 0..<below {
                guard mkdir("\(directory)/s\(subindex)", 0o755) == 0 else { return false }
            }
        }
        return true
    }

    /// Removes `path` and everything below it (best effort; symbolic links are not followed).
    static func remove(_ path: String) {
        removeContents(AT_FDCWD, path)
        _ = rmdir(path)
    }

    private static func removeContents(_ parent: Int32, _ name: String) {
        let descriptor = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        guard let stream = fdopendir(descriptor) else {
            _ = close(descriptor)
            return
        }
        defer { closedir(stream) }
        var directories: [String] = []
        while let entry = readdir(stream) {
            let entryName = withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if entryName == "." || entryName == ".." { continue }
            if entry.pointee.d_type == UInt8(DT_DIR) {
                directories.append(entryName)
            } else if unlinkat(descriptor, entryName, 0) != 0 && errno == EISDIR {
                directories.append(entryName)
            }
        }
        for directory in directories {
            removeContents(descriptor, directory)
            _ = unlinkat(descriptor, directory, AT_REMOVEDIR)
        }
    }
}
