import Glibc
import Testing
@testable import Lull

extension IndependentSuite {
    @Suite(.serialized) struct TimeTests {
        // MARK: Deadline

        @Test func deadlineNowReadsTheMonotonicClock() {
            for _ in 0..<100 {
                let before = monotonicNanoseconds()
                let now = Deadline.now()
                let after = monotonicNanoseconds()
                #expect(before <= now.uptimeNanoseconds)
                #expect(now.uptimeNanoseconds <= after)
            }
        }

        @Test func deadlineNowNeverGoesBackwards() {
            var previous = Deadline.now()
            for _ in 0..<10_000 {
                let next = Deadline.now()
                #expect(next >= previous)
                previous = next
            }
        }

        @Test func deadlineKeepsItsUptimeNanoseconds() {
            for value: UInt64 in [0, 1, 999, 1_000_000_007, UInt64.max / 2, UInt64.max - 1, UInt64.max] {
                #expect(Deadline(uptimeNanoseconds: value).uptimeNanoseconds == value)
            }
        }

        @Test func distantFutureIsTheLargestDeadline() {
            #expect(Deadline.distantFuture.uptimeNanoseconds == UInt64.max)
            #expect(Deadline.distantFuture > Deadline.now())
            #expect(Deadline.distantFuture > Deadline(uptimeNanoseconds: UInt64.max - 1))
            #expect(Deadline.distantFuture == Deadline(uptimeNanoseconds: .max))
        }

        @Test func deadlineAdditionAndSubtraction() {
            let base = Deadline(uptimeNanoseconds: 10_000_000_000)
            #expect((base + .nanoseconds(1)).uptimeNanoseconds == 10_000_000_001)
            #expect((base + .microseconds(3)).uptimeNanoseconds == 10_000_003_000)
            #expect((base + .milliseconds(250)).uptimeNanoseconds == 10_250_000_000)
            #expect((base + .seconds(2)).uptimeNanoseconds == 12_000_000_000)
            #expect((base + .zero) == base)
            #expect((base - .nanoseconds(1)).uptimeNanoseconds == 9_999_999_999)
            #expect((base - .milliseconds(1_500)).uptimeNanoseconds == 8_500_000_000)
            #expect((base - .seconds(10)).uptimeNanoseconds == 0)
            #expect((base - .zero) == base)
            // Negative durations move the other way.
            #expect((base + .seconds(-3)).uptimeNanoseconds == 7_000_000_000)
            #expect((base - .seconds(-3)).uptimeNanoseconds == 13_000_000_000)
            #expect(base + .seconds(1) - .seconds(1) == base)
        }

        @Test func deadlineSaturatesAtZero() {
            let zero = Deadline(uptimeNanoseconds: 0)
            #expect(zero - .seconds(1) == zero)
            #expect(zero - .nanoseconds(1) == zero)
            #expect(zero + .seconds(-1) == zero)
            let small = Deadline(uptimeNanoseconds: 5)
            #expect(small - .nanoseconds(6) == zero)
            #expect(small - .seconds(Int64.max) == zero)
            #expect(small + .seconds(Int64.min) == zero)
            #expect(Deadline.now() - .seconds(Int64.max) == zero)
        }

        @Test func deadlineSaturatesAtDistantFuture() {
            let nearEnd = Deadline(uptimeNanoseconds: UInt64.max - 10)
            #expect(nearEnd + .nanoseconds(10) == .distantFuture)
            #expect(nearEnd + .nanoseconds(11) == .distantFuture)
            #expect(nearEnd + .seconds(1) == .distantFuture)
            #expect(Deadline.now() + .seconds(Int64.max) == .distantFuture)
            #expect(Deadline(uptimeNanoseconds: 0) + .seconds(Int64.max) == .distantFuture)
            #expect(Deadline(uptimeNanoseconds: 1) - .seconds(Int64.min) == .distantFuture)
        }

        /// Durations whose seconds do not even fit in an `Int64` are valid `Duration`s: adding
        /// them saturates like any other. Checked in a child process, as an overflow traps.
        @Test func durationsBeyondInt64SecondsSaturateWithoutTrapping() async {
            await #expect(processExitsWith: .success) {
                let huge = Duration.seconds(Int64.max) + .seconds(Int64.max)
                let negativeHuge = Duration.zero - huge
                guard Deadline.now() + huge == .distantFuture else { exit(1) }
                guard Deadline.now() - huge == Deadline(uptimeNanoseconds: 0) else { exit(2) }
                guard Deadline.now() + negativeHuge == Deadline(uptimeNanoseconds: 0) else { exit(3) }
                guard Deadline.now() - negativeHuge == .distantFuture else { exit(4) }
                guard WallDeadline.now() + huge == .distantFuture else { exit(5) }
                guard (WallDeadline.now() + negativeHuge).nanosecondsSinceEpoch == 0 else { exit(6) }
            }
        }

        @Test func distantFutureAbsorbsArithmetic() {
            #expect(Deadline.distantFuture + .seconds(1) == .distantFuture)
            #expect(Deadline.distantFuture + .nanoseconds(1) == .distantFuture)
            #expect(Deadline.distantFuture + .seconds(Int64.max) == .distantFuture)
            #expect(Deadline.distantFuture - .seconds(1) == .distantFuture)
            #expect(Deadline.distantFuture + .seconds(-1) == .distantFuture)
        }

        @Test func deadlinesCompareAndHashByTheirValue() {
            let a = Deadline(uptimeNanoseconds: 1)
            let b = Deadline(uptimeNanoseconds: 2)
            let c = Deadline(uptimeNanoseconds: 2)
            #expect(a < b)
            #expect(!(b < a))
            #expect(b == c)
            #expect(!(b < c) && !(c < b))
            #expect(a <= b && b >= a && b <= c)
            #expect([b, .distantFuture, a].sorted() == [a, b, .distantFuture])
            #expect(Set([a, b, c]).count == 2)
            #expect(b.hashValue == c.hashValue)
        }

        // MARK: WallDeadline

        @Test func wallDeadlineNowReadsTheRealtimeClock() {
            for _ in 0..<100 {
                let before = realtimeNanoseconds()
                let now = WallDeadline.now()
                let after = realtimeNanoseconds()
                #expect(before <= now.nanosecondsSinceEpoch)
                #expect(now.nanosecondsSinceEpoch <= after)
            }
        }

        @Test func wallDeadlineArithmeticAndOrder() {
            let now = WallDeadline.now()
            #expect(now + .seconds(1) > now)
            #expect(now + .seconds(-1) < now)
            #expect(now + .zero == now)
            #expect(now + .milliseconds(1) < now + .milliseconds(2))
            #expect(now + .seconds(1) + .seconds(-1) == now)
            #expect((now + .seconds(2)).nanosecondsSinceEpoch == now.nanosecondsSinceEpoch + 2_000_000_000)
            #expect(Set([now, now + .zero, now + .seconds(1)]).count == 2)
            #expect([now + .seconds(3), now, .distantFuture].sorted() == [now, now + .seconds(3), .distantFuture])
        }

        @Test func wallDeadlineSaturates() {
            #expect(WallDeadline.distantFuture > WallDeadline.now())
            #expect(WallDeadline.distantFuture + .seconds(1) == .distantFuture)
            #expect(WallDeadline.distantFuture + .seconds(-1) == .distantFuture)
            #expect(WallDeadline.now() + .seconds(Int64.max) == .distantFuture)
            #expect(WallDeadline.now() + .seconds(Int64.max) + .seconds(Int64.max) == .distantFuture)
            #expect(WallDeadline.distantFuture + .seconds(Int64.min) == .distantFuture)
            let epoch = WallDeadline.now() + .seconds(Int64.min)
            #expect(epoch.nanosecondsSinceEpoch == 0)
            #expect(epoch + .seconds(-1) == epoch)
        }
    }
}
