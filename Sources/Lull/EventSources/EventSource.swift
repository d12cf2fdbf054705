/// Makes event sources. Every source starts inactive: set its handlers, then `activate()`.
/// `queue: nil` means the default-QoS global queue; every handler runs on `queue`. The
/// factories are in Runtime/EventSource+Runtime.swift: they make sources on the process's runtime.
public enum EventSource {}
