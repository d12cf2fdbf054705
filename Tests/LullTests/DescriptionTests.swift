import Testing
@testable import Lull

/// `Deadline`, `WallDeadline` and `ExecutionContext` print readably.
extension IndependentSuite {
    @Suite(.serialized) struct DescriptionTests {
        @Test func deadlinePrintsItsUptimeToTheNanosecond() {
            #expect("\(Deadline(uptimeNanoseconds: 12_000_000_345))" == "uptime 12.000000345 s")
            #expect(Deadline(uptimeNanoseconds: 0).description == "uptime 0.000000000 s")
            #expect(Deadline.distantFuture.description == "distantFuture")
            #expect(Deadline.distantFuture.debugDescription == "Deadline(distantFuture)")
        }

        @Test func deadlineDebugDescriptionSaysHowFarFromNow() {
            let later = Deadline.now() + .seconds(3_600)
            #expect(later.debugDescription.hasPrefix("Deadline(\(later), in 3599."), "\(later.debugDescription)")
            #expect(later.debugDescription.hasSuffix(" s)"))
            let earlier = Deadline(uptimeNanoseconds: Deadline.now().uptimeNanoseconds - 2_000_000_000)
            #expect(earlier.debugDescription.hasPrefix("Deadline(\(earlier), 2."), "\(earlier.debugDescription)")
            #expect(earlier.debugDescription.hasSuffix(" s ago)"))
            #expect(String(reflecting: earlier).hasPrefix("Deadline(\(earlier), "))
        }

        @Test func wallDeadlinePrintsISO8601InUTC() {
            let instant = WallDeadline(nanosecondsSinceEpoch: 1_795_675_512 * 1_000_000_000 + 123_456_789)
            #expect("\(instant)" == "2026-11-26T06:45:12.123456789Z")
            #expect(WallDeadline(nanosecondsSinceEpoch: 0).description == "1970-01-01T00:00:00.000000000Z")
            #expect(WallDeadline(nanosecondsSinceEpoch: 951_782_400 * 1_000_000_000).description
                    == "2000-02-29T00:00:00.000000000Z")
            #expect(WallDeadline.distantFuture.description == "distantFuture")
            #expect(instant.debugDescription.hasPrefix("WallDeadline(2026-11-26T06:45:12.123456789Z, "))
            let later = WallDeadline.now() + .seconds(90)
            #expect(later.debugDescription.contains(", in 89.") || later.debugDescription.contains(", in 90."),
                    "\(later.debugDescription)")
        }

        @Test func executionContextPrintsItsActivity() {
            #expect(ExecutionContext.empty.description == "no activity")
            #expect(ExecutionContext.empty.debugDescription == "ExecutionContext(no activity)")
            ExecutionContext.withActivity("GET /users/42") {
                let outer = ExecutionContext.current
                #expect("\(outer)" == "activity #\(outer.activityID) \"GET /users/42\"")
                ExecutionContext.withActivity("db query") {
                    let inner = ExecutionContext.current
                    #expect("\(inner)" == "activity #\(inner.activityID) \"db query\" in #\(outer.activityID)")
                    #expect(String(reflecting: inner) == "ExecutionContext(\(inner))")
                }
            }
        }
    }
}
