import Glibc
import LullDiagnosticsFormat
import Testing

extension IndependentSuite {
    /// The diagnostics control socket's off switch and its access rule, on child Lull
    /// programs (the timer example, whose timers keep its reactor polled).
    @Suite(.serialized) struct DiagnosticsSocketAccessTests {
        /// A running timer example, killed at the end.
        struct Program {
            let pid: pid_t

            init(environment: [String] = []) throws {
                let devNull = open("/dev/null", O_WRONLY | O_CLOEXEC)
                defer { close(devNull) }
                pid = try ToolProcess.spawn(try ToolProcess.executable("timer-coalescing"),
                                            ["--leeway-ms", "20", "--rounds", "30"], output: (devNull, devNull),
                                            environment: environment)
            }

            func end() {
                kill(pid, SIGKILL)
                _ = ToolProcess.reap(pid)
            }

            /// Whether its runtime runs: a worker thread (named `lull.<class>`) exists, so the
            /// composition root, which binds the socket last, has finished.
            var runtimeStarted: Bool {
                guard let directory = opendir("/proc/\(pid)/task") else { return false }
                defer { closedir(directory) }
                while let entry = readdir(directory) {
                    let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                    guard !name.hasPrefix(".") else { continue }
                    let comm = ProcessFile.read("/proc/\(pid)/task/\(name)/comm") ?? ""
                    if comm.hasPrefix("lull.") { return true }
                }
                return false
            }

            var hasSocket: Bool {
                (ProcessFile.read("/proc/net/unix") ?? "").contains("@\(ControlSocketAddress.name(pid: pid))")
            }
        }

        enum ProcessFile {
            static func read(_ path: String) -> String? {
                let descriptor = open(path, O_RDONLY | O_CLOEXEC)
                guard descriptor >= 0 else { return nil }
                defer { close(descriptor) }
                var bytes: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 65_536)
                while true {
                    let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
                    if count < 0 && errno == EINTR { continue }
                    guard count > 0 else { break }
                    bytes += chunk[0..<count]
                }
                return String(decoding: bytes, as: UTF8.self)
            }
        }

        @Test func offInTheEnvironmentBindsNoSocket() throws {
            let on = try Program()
            defer { on.end() }
            let off = try Program(environment: ["\(DiagnosticsEnvironment.socketSwitch)=off"])
            defer { off.end() }
            #expect(waitFor(seconds: 10) { on.hasSocket && off.runtimeStarted })
            #expect(!off.hasSocket, "LULL_DIAGNOSTICS=off, and the program bound its diagnostics socket")
            let attach = try ToolProcess.run(try ToolProcess.executable("timerfires"),
                                             ["--pid", "\(off.pid)", "--seconds", "0.2"], timeoutSeconds: 20)
            // Nothing to attach to: the tool says why and reads the kernel's tracepoints
            // instead, which need root and tracefs.
            #expect(attach.standardError.contains("turned its diagnostics socket off"), "\(attach.standardError)")
            if attach.status == 0 {
                #expect(attach.standardOutput.hasPrefix("Kernel wake-ups of pid \(off.pid)"), "\(attach.standardOutput)")
            } else {
                #expect(attach.standardError.contains("root") || attach.standardError.contains("tracefs"),
                        "\(attach.standardError)")
            }
            #expect(DiagnosticsEnvironment.turnsSocketOff("OFF") && DiagnosticsEnvironment.turnsSocketOff("0"))
            #expect(!DiagnosticsEnvironment.turnsSocketOff("on") && !DiagnosticsEnvironment.turnsSocketOff(""))
        }

        /// A client of another user is closed unanswered; the same user (root here) gets its
        /// answer. Needs root (to become nobody), setpriv and python3 (a plain socket client).
        @Test func onlyTheSameUserOrRootIsAnswered() throws {
            guard geteuid() == 0, access("/usr/bin/setpriv", X_OK) == 0, access("/usr/bin/python3", X_OK) == 0 else {
                print("DiagnosticsSocketAccessTests: needs root, setpriv and python3; skipped")
                return
            }
            let program = try Program()
            defer { program.end() }
            #expect(waitFor(seconds: 10) { program.hasSocket })
            let client = """
                import socket, sys
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(10)
                s.connect("\\0lull-diagnostics." + sys.argv[1])
                try:
                    s.sendall(b"stop\\n")
                    answer = s.recv(100)
                except (ConnectionResetError, BrokenPipeError):
                    answer = b""
                print("answered" if answer else "refused", answer)
                """
            let owner = try ToolProcess.run("/usr/bin/python3", ["-c", client, "\(program.pid)"], timeoutSeconds: 20)
            #expect(owner.standardOutput.hasPrefix("answered b'ok\\n'"), "\(owner.standardOutput) \(owner.standardError)")
            let stranger = try ToolProcess.run("/usr/bin/setpriv",
                                               ["--reuid=65534", "--regid=65534", "--clear-groups",
                                                "/usr/bin/python3", "-c", client, "\(program.pid)"], timeoutSeconds: 20)
            #expect(stranger.standardOutput.hasPrefix("refused"), "\(stranger.standardOutput) \(stranger.standardError)")
        }
    }
}
