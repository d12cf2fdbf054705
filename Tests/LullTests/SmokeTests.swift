import Testing
@testable import Lull

@Test func smoke() {
    let queue = WorkQueue(label: "smoke")
    let value = queue.sync { 42 }
    #expect(value == 42)
}
