import Synchronization

/// A key for values stored on a queue (`DispatchSpecificKey`): `setSpecific(key:value:)`
/// stores one on a queue, `getSpecific(key:)` reads it back, and the static
/// `WorkQueue.getSpecific(key:)` finds it from a block running on the queue or on any queue
/// that targets it.
///
/// Each key is distinct, whatever its address: a key made after another was released never
/// finds the old one's values.
public final class SpecificKey<Value: Sendable>: Sendable {
    let id: UInt64

    /// A new key, distinct from every other.
    public init() {
        id = SpecificKeyIDs.next.wrappingAdd(1, ordering: .relaxed).oldValue
    }
}

/// Where keys' identifiers come from (a generic class cannot have a stored static).
enum SpecificKeyIDs {
    static let next = Atomic<UInt64>(1)
}

/// A queue's specific values, by key identifier. Few per queue: a list.
///
/// Values are held as `any Sendable`; a key's `Value` is fixed, so the cast back on reading
/// always succeeds for the key that stored the value.
struct SpecificValues: ~Copyable {
    private var entries: [(key: UInt64, value: any Sendable)] = []

    /// Replaces the value for `key` (nil removes it); returns the old one, to be released
    /// after the lock.
    mutating func set(_ value: (any Sendable)?, for key: UInt64) -> (any Sendable)? {
        if let index = entries.firstIndex(where: { $0.key == key }) {
            let old = entries[index].value
            if let value {
                entries[index].value = value
            } else {
                entries.remove(at: index)
            }
            return old
        }
        if let value { entries.append((key, value)) }
        return nil
    }

    func value(for key: UInt64) -> (any Sendable)? {
        entries.first(where: { $0.key == key })?.value
    }
}

extension WorkQueue {
    /// Stores `value` on this queue under `key` (nil removes it). The queue holds the value
    /// until it is replaced or removed, or the queue is released.
    public func setSpecific<Value>(key: SpecificKey<Value>, value: Value?) {
        let old = specifics.locked { $0.set(value, for: key.id) }
        _ = old  // released here, after the lock: a value's deinit may use the queue
    }

    /// The value stored on this queue under `key`, or nil.
    public func getSpecific<Value>(key: SpecificKey<Value>) -> Value? {
        specifics.locked { $0.value(for: key.id) } as? Value
    }

    /// The value under `key` on the queue `thread` runs a block of, or else on the nearest
    /// of its targets that has one (Dispatch's lookup); nil outside every queue.
    static func specific<Value>(key: SpecificKey<Value>, for thread: ThreadState, roots: RootQueues) -> Value? {
        var queue = innermost(of: thread, roots: roots)
        while let current = queue {
            if let value = current.getSpecific(key: key) { return value }
            queue = current.target
        }
        return nil
    }
}
