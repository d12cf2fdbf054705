extension DirectoryTreeWatcher {
    /// Checks that `path` is a directory that can be watched; watching starts at
    /// `activate()`. Throws an `EventSourceError` naming the path and the reason. Changes are
    /// delivered on `queue` (nil: the default-QoS global queue), through the process's
    /// inotify hub.
    public convenience init(path: String, latency: Duration = .milliseconds(100), queue: WorkQueue? = nil) throws {
        try self.init(path: path, latency: latency, queue: Runtime.shared.queue(queue), hub: Runtime.shared.inotify)
    }
}
