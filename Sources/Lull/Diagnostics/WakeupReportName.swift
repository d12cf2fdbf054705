import LullWakeupReport

/// What woke a Lull program and where its CPU time went (see `LullWakeupReport`'s
/// `WakeupReport`): the report `RuntimeDiagnostics` returns, built by the same code as the
/// report of `timerfires`.
public typealias WakeupReport = LullWakeupReport.WakeupReport
