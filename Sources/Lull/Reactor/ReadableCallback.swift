/// A reactor handler that runs a closure when its descriptor becomes readable: how a layer
/// below the reactor (the diagnostics control socket) has a descriptor watched without
/// knowing the reactor's types.
final class ReadableCallback: ReactorEventHandler {
    private let readable: @Sendable () -> Void

    init(_ readable: @escaping @Sendable () -> Void) {
        self.readable = readable
    }

    func reactorEvent(readable: Bool, writable: Bool) {
        self.readable()
    }
}

extension Reactor {
    /// `ControlSocket`'s `WatchReadable` on this reactor.
    func watchReadable(_ descriptor: Int32, _ readable: @escaping @Sendable () -> Void) -> (@Sendable () -> Void)? {
        do throws(ReactorError) {
            let registration = try register(descriptor: descriptor, forWriting: false, handler: ReadableCallback(readable))
            return { registration.remove() }
        } catch {
            return nil
        }
    }
}
