// qos-demo: queues at several QoS classes compete for the CPU.
//
// Each class gets the same CPU-bound job, split into chunks on a concurrent queue of that
// class. With more runnable threads than cores, the kernel shares the CPU by the nice
// values Lull gives each class, so the higher classes finish first. Then a serial queue, a
// group and a delayed block show the rest of the foundation at work.
import ExampleSupport
import Lull
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

checkCommandLine(usage: """
    usage: qos-demo

    Queues at five QoS classes run the same CPU-bound job at once; with more runnable
    threads than cores, the higher classes finish first. Then a serial queue, a group and a
    delayed block. Takes no options.

      --help   show this text
    """)

@inline(never)
func countPrimes(in range: Range<Int>) -> Int {
    var count = 0
    for candidate in range where candidate > 1 {
        var isPrime = true
        var divisor = 2
        while divisor * divisor <= candidate {
            if candidate % divisor == 0 { isPrime = false; break }
            divisor += 1
        }
        if isPrime { count += 1 }
    }
    return count
}

func threadNice() -> Int32 {
    errno = 0
    return getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
}

func pad(_ text: String, _ width: Int) -> String {
    text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
}

func fixed(_ value: Double, _ decimals: Int) -> String {
    var scale = 1.0
    for _ in 0..<decimals { scale *= 10 }
    let rounded = (value * scale).rounded() / scale
    var text = "\(rounded)"
    let fraction = text.split(separator: ".").last.map(\.count) ?? 0
    if fraction < decimals { text += String(repeating: "0", count: decimals - fraction) }
    return text
}

let classes: [QoS.QoSClass] = [.userInteractive, .userInitiated, .default, .utility, .background]
let chunks = 8
// QOS_DEMO_CHUNK_SIZE makes the work smaller or larger (the tests run a small one).
let chunkSize = getenv("QOS_DEMO_CHUNK_SIZE").flatMap { Int(String(cString: $0)) } ?? 400_000
let start = Deadline.now()
let finished = Mutex<[(QoS.QoSClass, Double, Int32, String)]>([])
let group = WorkGroup()

print("Lull qos-demo: \(classes.count) QoS classes x \(chunks) CPU-bound chunks, started together\n")
for qosClass in classes {
    let queue = WorkQueue(label: "demo.\(qosClass)", qos: QoS(qosClass: qosClass, relativePriority: 0),
                          attributes: .concurrent)
    let remaining = Atomic<Int>(chunks)
    for chunk in 0..<chunks {
        queue.async(group: group) {
            let lower = chunk * chunkSize
            _ = countPrimes(in: lower..<(lower + chunkSize))
            if remaining.subtract(1, ordering: .relaxed).newValue == 0 {
                let elapsed = Double(Deadline.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
                finished.withLock { $0.append((qosClass, elapsed, threadNice(), "\(QoS.current)")) }
            }
        }
    }
}
group.wait()

print("class              finished after   nice   QoS.current in the block")
for (qosClass, elapsed, nice, current) in finished.withLock({ $0 }) {
    let name = pad("\(QoS(qosClass: qosClass, relativePriority: 0))", 18)
    print("\(name) \(pad(fixed(elapsed, 3) + " s", 16)) \(pad("\(nice)", 6)) \(current)")
}

// A serial queue keeps order; a delayed block runs after its deadline, detached.
let serial = WorkQueue(label: "demo.serial", qos: .utility)
let order = Mutex<[Int]>([])
for index in 0..<1_000 { serial.async { order.withLock { $0.append(index) } } }
let inOrder = serial.sync { order.withLock { $0 == Array(0..<1_000) } }
print("\nserial queue ran 1,000 blocks in order: \(inOrder)")

let delayed = WorkGroup()
delayed.enter()
let asked = Deadline.now() + .milliseconds(50)
WorkQueue.global(qos: .utility).asyncAfter(deadline: asked) {
    let late = Double(Deadline.now().uptimeNanoseconds - asked.uptimeNanoseconds) / 1e6
    print("asyncAfter(50 ms) ran \(fixed(late, 2)) ms after its deadline (leeway 5 ms), at \(QoS.current)")
    delayed.leave()
}
delayed.wait()
