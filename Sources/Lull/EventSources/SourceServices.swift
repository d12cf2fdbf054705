/// What the event sources of one runtime share: the reactor they register with, the table of
/// descriptors that read and write sources multiplex on, and the signal hub. The composition
/// root builds it; a source gets it at creation (timers reach the timer engine through their
/// queue's `QueueServices`). Nothing here opens a descriptor before a source needs it.
final class SourceServices: Sendable {
    let reactor: Reactor
    let descriptors: DescriptorTable
    let signals: SignalHub

    init(reactor: Reactor) {
        self.reactor = reactor
        descriptors = DescriptorTable(reactor: reactor, witness: OpenFileWitness())
        signals = SignalHub(reactor: reactor)
    }
}
