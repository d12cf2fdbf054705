/// Stops the program: a programmer error (a misuse of the API, which names the object), or
/// a failure the runtime cannot continue from. Every stop in Lull goes through here, with
/// one format:
///
///     Lull: <what failed>[: <call>: <ERRNO> (<text>)][. <what to do>]
///
/// for example "Lull: cannot read the monotonic clock: clock_gettime: EINVAL (Invalid
/// argument). The kernel lacks CLOCK_MONOTONIC_COARSE; Lull needs Linux 2.6.32 or later."
func lullFatal(_ what: String, error: SystemError? = nil, remedy: String? = nil,
               file: StaticString = #file, line: UInt = #line) -> Never {
    var message = "Lull: \(what)"
    if let error { message += ": \(error)" }
    if let remedy { message += ". \(remedy)" }
    fatalError(message, file: file, line: line)
}
