import Synchronization
import Testing
@testable import Lull

/// A merge that arrives while the source's job gives its token back is never lost
/// (`SourceCore.post`): the giver and the merger each store and then load, so with release
/// and acquire alone both loads could miss the other's store, leaving data pending with no
/// job posted. Sources that ping-pong through each other's handlers on serial queues hit
/// that window once per round trip, from both sides, on every core; a lost merge stops the
/// ball for good. The window is a few nanoseconds wide, so one run shows a regression only
/// with some probability (about one stall in a million round trips on the project's 2-core
/// machine under load); what the test asserts, that every round trip arrives, never
/// depends on timing.
extension LullSuite {
    @Suite struct SourceHandoffTests {
        /// Two sources whose handlers merge into each other, `trips` round trips; returns the
        /// round trips that arrived before the timeout, and the sources' token state for the
        /// failure message.
        static func pingPong(trips: Int, pairs: Int,
                             make: (WorkQueue) -> any UserDataMerging) -> [(arrived: Int, state: String)] {
            let arrivals = (0..<pairs).map { _ in Counter() }
            var sources: [(any UserDataMerging, any UserDataMerging)] = []
            for pair in 0..<pairs {
                let ping = make(WorkQueue(label: "ping \(pair)"))
                let pong = make(WorkQueue(label: "pong \(pair)"))
                let arrived = arrivals[pair]
                ping.source.setEventHandler { pong.mergeOne() }
                pong.source.setEventHandler {
                    if arrived.increment() < trips { ping.mergeOne() }
                }
                ping.source.activate()
                pong.source.activate()
                sources.append((ping, pong))
            }
            for (ping, _) in sources { ping.mergeOne() }
            let results = arrivals.enumerated().map { pair, arrived in
                arrived.await { $0 >= trips }
                return (arrived.value, "ping: \(sources[pair].0.source.core.tokenDescription), pong: \(sources[pair].1.source.core.tokenDescription)")
            }
            for (ping, pong) in sources {
                ping.source.cancel()
                pong.source.cancel()
            }
            return results
        }

        @Test(arguments: [MergeRule.add, .or, .replace])
        func mergesThatRaceTheTokensGiveBackAreNeverLost(rule: MergeRule) {
            let trips = 6_000
            for result in Self.pingPong(trips: trips, pairs: 2, make: rule.make) {
                #expect(result.arrived == trips, "the ball stopped: \(result.state)")
            }
        }

        enum MergeRule: CustomTestStringConvertible, Sendable {
            case add, or, replace

            var testDescription: String {
                switch self {
                case .add: "add"
                case .or: "or"
                case .replace: "replace"
                }
            }

            func make(_ queue: WorkQueue) -> any UserDataMerging {
                switch self {
                case .add: EventSource.makeUserDataAddSource(queue: queue)
                case .or: EventSource.makeUserDataOrSource(queue: queue)
                case .replace: EventSource.makeUserDataReplaceSource(queue: queue)
                }
            }
        }
    }
}

/// The three user-data kinds, as the ping-pong merges into them.
protocol UserDataMerging: Sendable {
    var source: EventSourceBase { get }
    func mergeOne()
}

extension UserDataAddSource: UserDataMerging {
    var source: EventSourceBase { self }
    func mergeOne() { add(data: 1) }
}

extension UserDataOrSource: UserDataMerging {
    var source: EventSourceBase { self }
    func mergeOne() { or(data: 1) }
}

extension UserDataReplaceSource: UserDataMerging {
    var source: EventSourceBase { self }
    func mergeOne() { replace(data: 1) }
}
