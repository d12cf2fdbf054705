/// The environment through which `timerfires` asks a program it starts to record: the
/// trace file (which the tool has created) and the ring's capacity in records.
public enum DiagnosticsEnvironment {
    public static let traceFile = "LULL_DIAGNOSTICS_TRACE"
    public static let capacity = "LULL_DIAGNOSTICS_RECORDS"
}
