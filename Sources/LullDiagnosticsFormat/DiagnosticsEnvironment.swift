/// The environment of Lull's diagnostics: the switch of the control socket, and how
/// `timerfires` asks a program it starts to record (the trace file, which the tool has
/// created, and the ring's capacity in records).
public enum DiagnosticsEnvironment {
    public static let traceFile = "LULL_DIAGNOSTICS_TRACE"
    public static let capacity = "LULL_DIAGNOSTICS_RECORDS"
    /// `LULL_DIAGNOSTICS=off` (or `0`, `no`, `false`, in any case): the process binds no
    /// diagnostics control socket, so nothing can attach to it (`timerfires --pid`).
    /// Recording that is asked for explicitly (`LULL_DIAGNOSTICS_TRACE`, or
    /// `RuntimeDiagnostics.start()` in the program) is not affected.
    public static let socketSwitch = "LULL_DIAGNOSTICS"

    /// Whether `value` of `LULL_DIAGNOSTICS` turns the control socket off.
    public static func turnsSocketOff(_ value: String) -> Bool {
        ["off", "0", "no", "false"].contains(value.lowercased())
    }
}
