extension EventSource {
    /// A source that reports changes of the memory pressure on the process (see
    /// ``MemoryPressureSource`` for the levels and their thresholds). Where the kernel has no
    /// pressure-stall information or refuses its triggers, the source cancels at activation
    /// with the reason in `registrationError`.
    public static func makeMemoryPressureSource(eventMask: MemoryPressureEvent,
                                                queue: WorkQueue? = nil) -> MemoryPressureSource {
        MemoryPressureSource(eventMask: eventMask, queue: Runtime.shared.queue(queue), services: Runtime.shared.sources)
    }
}
