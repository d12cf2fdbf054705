/// A source's events as an asynchronous sequence: each element is one event handler
/// invocation's merged data (`data`, or the kind's typed events).
///
/// ```swift
/// let progress = EventSource.makeUserDataAddSource()
/// Task { for await done in progress.events { print("\(done) more items done") } }
/// progress.add(data: 1)
/// ```
///
/// - Iterating installs the source's event handler (the loop is its handler: setting
///   another one takes the events away from the loop) and activates the source.
/// - Backpressure: while the loop's body runs, the source is suspended, so events merge
///   exactly as for a suspended source: the next element is their sum (or OR, or last
///   value). Memory stays bounded and nothing is lost.
/// - Cancelling the source ends the loop after the source's cancel handler ran (a cancel
///   handler you set still runs, first). Cancelling the consuming task, or leaving the loop
///   early, cancels the source.
/// - A source is iterated at most once: a second iteration ends at once.
///
/// The sequence keeps its source alive, so a loop over a source nobody else references
/// runs until its task is cancelled.
public struct SourceEvents<Element>: AsyncSequence, Sendable {
    public typealias Failure = Never

    private let source: EventSourceBase
    private let element: @Sendable (UInt) -> Element

    init(_ source: EventSourceBase, element: @escaping @Sendable (UInt) -> Element) {
        self.source = source
        self.element = element
    }

    /// Claims the source and starts the loop; a second iterator of the same source (or of a
    /// source iterated before) ends at once.
    public func makeAsyncIterator() -> AsyncIterator {
        guard let channel = source.core.claimEventsIteration() else {
            return AsyncIterator(loop: nil, element: element)
        }
        channel.start()
        return AsyncIterator(loop: SourceEventsLoop(source: source, channel: channel), element: element)
    }

    /// Gives the source's elements one at a time; nil once the source was cancelled and its
    /// cancel handler ran.
    public struct AsyncIterator: AsyncIteratorProtocol {
        private let loop: SourceEventsLoop?
        private let element: @Sendable (UInt) -> Element

        fileprivate init(loop: SourceEventsLoop?, element: @escaping @Sendable (UInt) -> Element) {
            self.loop = loop
            self.element = element
        }

        /// The next invocation's merged data, waiting for it (the source runs meanwhile).
        public mutating func next(isolation actor: isolated (any Actor)? = #isolation) async -> Element? {
            guard let loop, let value = await loop.channel.next(isolation: actor) else { return nil }
            return element(value)
        }

        public mutating func next() async -> Element? {
            await next(isolation: nil)
        }
    }
}

extension SourceEvents where Element == UInt {
    /// The source's `data`.
    init(_ source: EventSourceBase) {
        self.init(source, element: { $0 })
    }
}

extension SourceEvents where Element: OptionSet & Sendable, Element.RawValue == UInt {
    /// The source's `data` as the kind's events (`FileSystemEvent`, `ProcessEvent`...).
    init(_ source: EventSourceBase) {
        self.init(source, element: { Element(rawValue: $0) })
    }
}

/// The one iteration of a source, owned by its iterator (and the iterator's copies): keeps
/// the source alive while the loop runs, and tells the channel when the loop is gone.
private final class SourceEventsLoop: Sendable {
    let source: EventSourceBase
    let channel: SourceEventsChannel

    init(source: EventSourceBase, channel: SourceEventsChannel) {
        self.source = source
        self.channel = channel
    }

    deinit {
        channel.consumerLeft()
    }
}

/// How a source class that also has a typed `events` accessor (the merged events, read
/// inside its handler) gets the `events` sequence: Swift lets two properties share a name
/// only when one of them comes from a protocol extension. Inside a handler (synchronous)
/// `source.events` is the typed value; `for await event in source.events` is the sequence.
/// An implementation detail of Lull's source classes, not meant to be adopted.
public protocol _TypedEventsSource: EventSourceBase {
    /// The kind's events type.
    associatedtype _Event: OptionSet & Sendable where _Event.RawValue == UInt
}

extension _TypedEventsSource {
    /// The source's events as an asynchronous sequence (see ``SourceEvents``).
    public var events: SourceEvents<_Event> { SourceEvents(self) }
}

extension ReadSource {
    /// Each handler invocation's `data` (bytes readable), as an asynchronous sequence (see
    /// ``SourceEvents``); read the bytes in the loop's body before asking for the next.
    public var events: SourceEvents<UInt> { SourceEvents(self) }
}

extension WriteSource {
    /// Each handler invocation's `data` (free buffer space), as an asynchronous sequence
    /// (see ``SourceEvents``).
    public var events: SourceEvents<UInt> { SourceEvents(self) }
}

extension TimerSource {
    /// The number of fires since the previous element, as an asynchronous sequence (see
    /// ``SourceEvents``).
    public var events: SourceEvents<UInt> { SourceEvents(self) }
}

extension UserDataAddSource {
    /// The sum of what was added since the previous element (see ``SourceEvents``).
    public var events: SourceEvents<UInt> { SourceEvents(self) }
}

extension UserDataOrSource {
    /// The OR of what was merged since the previous element (see ``SourceEvents``).
    public var events: SourceEvents<UInt> { SourceEvents(self) }
}

extension UserDataReplaceSource {
    /// The last value replaced since the previous element (see ``SourceEvents``).
    public var events: SourceEvents<UInt> { SourceEvents(self) }
}

extension SignalSource {
    /// The deliveries of the signal since the previous element (see ``SourceEvents``).
    public var events: SourceEvents<UInt> { SourceEvents(self) }
}

extension ProcessSource: _TypedEventsSource {
    public typealias _Event = ProcessEvent
}

extension MemoryPressureSource {
    /// Each memory-pressure level reported since the previous element, as an asynchronous
    /// sequence (see ``SourceEvents``).
    public var events: SourceEvents<MemoryPressureEvent> { SourceEvents(self) }
}
