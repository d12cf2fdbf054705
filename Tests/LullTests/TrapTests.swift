import Glibc
import Testing
@testable import Lull

extension IndependentSuite {
    @Suite(.serialized) struct TrapTests {
        @Test func overResumeStopsTheProgramNamingTheQueue() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let queue = WorkQueue(label: "lull.test.trap.over-resume-label")
                queue.resume()
            }
            let message = standardErrorText(result)
            #expect(message.contains("over-resume"), "stderr: \(message)")
            #expect(message.contains("lull.test.trap.over-resume-label"), "stderr: \(message)")
        }

        @Test func resumeBeyondTheSuspensionsStopsTheProgram() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let queue = WorkQueue(label: "lull.test.trap.balanced-then-over", attributes: .concurrent)
                queue.suspend()
                queue.suspend()
                queue.resume()
                queue.resume()
                queue.resume()
            }
            let message = standardErrorText(result)
            #expect(message.contains("over-resume"), "stderr: \(message)")
            #expect(message.contains("lull.test.trap.balanced-then-over"), "stderr: \(message)")
        }

        @Test func overResumeOfAnActivatedQueueStopsTheProgram() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let queue = WorkQueue(label: "lull.test.trap.activated", attributes: .initiallyInactive)
                queue.resume()  // activates it
                queue.resume()  // one too many
            }
            let message = standardErrorText(result)
            #expect(message.contains("over-resume"), "stderr: \(message)")
            #expect(message.contains("lull.test.trap.activated"), "stderr: \(message)")
        }

        @Test func balancedSuspendAndResumeDoNotStopTheProgram() async {
            await #expect(processExitsWith: .success) {
                let queue = WorkQueue(label: "lull.test.trap.balanced")
                queue.suspend()
                queue.suspend()
                queue.resume()
                queue.resume()
                let inactive = WorkQueue(label: "lull.test.trap.inactive", attributes: .initiallyInactive)
                inactive.resume()
                let ran = Flag()
                queue.async { ran.set() }
                inactive.async { ran.set() }
                _ = ran.await()
            }
        }

        @Test func syncOntoTheSerialQueueRunningTheBlockStopsTheProgram() async {
            await #expect(processExitsWith: .failure) {
                let queue = WorkQueue(label: "lull.test.trap.deadlock")
                WorkQueue.global().async {
                    queue.sync {
                        queue.sync { }
                    }
                }
                // Without the trap, the caller would hang; give it time, then report success,
                // which fails the expectation.
                sleep(10)
            }
        }

        @Test func syncFromAnAsyncBlockOntoItsOwnSerialQueueStopsTheProgram() async {
            await #expect(processExitsWith: .failure) {
                let queue = WorkQueue(label: "lull.test.trap.deadlock-async")
                queue.async {
                    queue.sync { }
                }
                sleep(10)
            }
        }

        @Test func syncOntoAQueueFunnelledThroughTheRunningSerialQueueStopsTheProgram() async {
            await #expect(processExitsWith: .failure) {
                let target = WorkQueue(label: "lull.test.trap.deadlock-target")
                let child = WorkQueue(label: "lull.test.trap.deadlock-child", target: target)
                target.async {
                    child.sync { }
                }
                sleep(10)
            }
        }

        @Test func syncOntoAnotherSerialQueueDoesNotStopTheProgram() async {
            await #expect(processExitsWith: .success) {
                let outer = WorkQueue(label: "lull.test.trap.outer")
                let inner = WorkQueue(label: "lull.test.trap.inner")
                let concurrent = WorkQueue(label: "lull.test.trap.concurrent", attributes: .concurrent)
                outer.sync {
                    inner.sync { }
                    concurrent.sync { concurrent.sync { } }
                }
            }
        }

        @Test func leaveWithoutEnterStopsTheProgram() async {
            await #expect(processExitsWith: .failure) {
                WorkGroup().leave()
            }
        }

        @Test func moreLeavesThanEntersStopTheProgram() async {
            await #expect(processExitsWith: .failure) {
                let group = WorkGroup()
                group.enter()
                group.enter()
                group.leave()
                group.leave()
                group.leave()
            }
        }
    }
}
