// activities: execution context and QoS propagation made visible.
//
// A request is served as an activity (`ExecutionContext.withActivity`) by blocks on several
// queues. Every block prints what it sees — `ExecutionContext.current` and `QoS.current` —
// next to what Lull's rules (Darwin's rules) say it should see, and the program exits 1
// if any line disagrees:
//   - async, group notifications and nested activities carry the request's activity;
//   - a block's QoS comes from its queue, else from the thread that submitted it;
//   - `.detached` work (a cleanup that must not be billed to the request) runs without it;
//   - source handlers and asyncAfter blocks are detached by default, and get their QoS from
//     their queue — unless their work item was made with `.assignCurrentContext`.

import ExampleSupport
import Lull
import Synchronization
#if ServiceContext
import ServiceContextModule
#endif

#if canImport(Glibc)
import Glibc
#endif

checkCommandLine(usage: """
    usage: activities

    Serves a request as an activity across queues; every block prints the execution context
    and QoS it sees next to what the rules say. Exits 1 if any line disagrees. Takes no
    options.

      --help   show this text
    """)

/// Prints a line at once (the output often goes to a pipe: the demo, the tests).
func say(_ line: String) {
    print(line)
    fflush(nil)
}

/// What a block should see.
enum ExpectedActivity {
    case none
    case same(as: ExecutionContext)
    case child(of: ExecutionContext)

    func holds(for context: ExecutionContext) -> Bool {
        switch self {
        case .none: context.activityID == 0
        case .same(let expected): context == expected
        case .child(let parent): context.activityID != 0 && context.parentActivityID == parent.activityID
        }
    }
}

let mismatches = Atomic(0)

func describe(_ context: ExecutionContext) -> String {
    guard context.activityID != 0 else { return "no activity" }
    var text = "activity #\(context.activityID) \"\(context.activityName ?? "")\""
    if context.parentActivityID != 0 { text += " in #\(context.parentActivityID)" }
    return text
}

func pad(_ text: String, _ width: Int) -> String {
    text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
}

/// Prints what the calling block sees, and whether it is what the rules say.
func show(_ who: String, expect activity: ExpectedActivity, qos: QoS.QoSClass) {
    let context = ExecutionContext.current
    let current = QoS.current
    let matches = activity.holds(for: context) && current.qosClass == qos
    if !matches { mismatches.add(1, ordering: .relaxed) }
    say("  \(pad(who, 56)) \(pad(describe(context), 40)) QoS \(pad("\(current)", 14)) "
        + (matches ? "ok" : "MISMATCH (expected QoS \(QoS(qosClass: qos, relativePriority: 0)))"))
}

/// Runs `step` and waits until the work it starts has left `group`.
func section(_ title: String, _ step: (WorkGroup) -> Void) {
    say("\n\(title)")
    let group = WorkGroup()
    step(group)
    group.wait()
}

/// The QoS a block gets from the thread that submitted it: `userInteractive` is lowered to
/// `userInitiated`, and a thread without QoS gives `default`.
func inferred(from submitter: QoS.QoSClass) -> QoS.QoSClass {
    switch submitter {
    case .userInteractive: .userInitiated
    case .unspecified: .default
    default: submitter
    }
}

let mainQoS = QoS.current.qosClass
let api = WorkQueue(label: "api", qos: .userInitiated)
let storage = WorkQueue(label: "storage")                  // no QoS of its own
let audit = WorkQueue(label: "audit", qos: .background)
let janitor = WorkQueue(label: "janitor", qos: .utility)
let reports = WorkQueue(label: "reports")                  // no QoS of its own

say("Lull activities: what each block sees (ExecutionContext.current, QoS.current)")
say("  \(pad("block", 56)) \(pad("ExecutionContext.current", 40)) QoS.current")

ExecutionContext.withActivity("GET /users/42") {
    let request = ExecutionContext.current
    show("main thread, inside withActivity", expect: .same(as: request), qos: mainQoS)

    section("1. The request's activity follows its work across queues") { group in
        group.enter()
        api.async {
            show("api (userInitiated): handle the request", expect: .same(as: request), qos: .userInitiated)
            group.enter()
            storage.async {
                // A queue without QoS runs the block at its submitter's QoS.
                show("storage (no QoS): read the row", expect: .same(as: request), qos: .userInitiated)
                ExecutionContext.withActivity("db query") {
                    show("storage: nested withActivity", expect: .child(of: request), qos: .userInitiated)
                }
                group.enter()
                audit.async {
                    show("audit (background): record the access", expect: .same(as: request), qos: .background)
                    group.leave()
                }
                group.leave()
            }
            group.leave()
        }
    }

    section("2. Notifications carry the activity; detached work does not") { group in
        let fanOut = WorkGroup()
        for shard in 0..<2 {
            storage.async(group: fanOut) {
                show("storage: shard \(shard) of a fan-out", expect: .same(as: request), qos: inferred(from: mainQoS))
            }
        }
        group.enter()
        fanOut.notify(queue: api) {
            show("api: WorkGroup.notify after the fan-out", expect: .same(as: request), qos: .userInitiated)
            group.leave()
        }
        group.enter()
        janitor.async(flags: .detached) {
            show("janitor (utility): cleanup, .detached", expect: .none, qos: .utility)
            group.leave()
        }
    }

    section("3. Timer handlers and asyncAfter are detached by default") { group in
        group.enter()
        api.asyncAfter(deadline: .now() + .milliseconds(5)) {
            show("api: asyncAfter block", expect: .none, qos: .userInitiated)
            group.leave()
        }
        // Both timers are set up by the request's handler on `api` (a user-initiated thread).
        group.enter()
        api.async {
            let plain = EventSource.makeTimerSource(queue: storage)
            let assigned = EventSource.makeTimerSource(queue: reports)
            group.enter()
            plain.setEventHandler {
                // Runs detached, at its queue's QoS: a queue without QoS gives `default`,
                // whatever the thread that set the handler ran at.
                show("storage: timer handler (a closure)", expect: .none, qos: .default)
                plain.cancel()
                group.leave()
            }
            group.enter()
            assigned.setEventHandler(handler: WorkItem(flags: .assignCurrentContext) {
                // The work item took the request's context and QoS when it was made.
                show("reports: timer handler (WorkItem, .assignCurrentContext)", expect: .same(as: request),
                     qos: .userInitiated)
                assigned.cancel()
                group.leave()
            })
            for timer in [plain, assigned] as [TimerSource] {
                timer.schedule(deadline: .now() + .milliseconds(10), leeway: .milliseconds(5))
                timer.activate()
            }
            group.leave()
        }
    }
}

section("4. Outside the activity") { _ in
    show("main thread, after withActivity", expect: .none, qos: mainQoS)
}

#if ServiceContext
/// A trace identifier, as a tracer keeps it in a `ServiceContext`.
enum TraceID: ServiceContextKey {
    typealias Value = String
}

/// Prints the trace the calling block sees in `ServiceContext.current`, and whether it is
/// the expected one.
func showTrace(_ who: String, expect expected: String?) {
    let trace = ServiceContext.current?[TraceID.self]
    if trace != expected { mismatches.add(1, ordering: .relaxed) }
    say("  \(pad(who, 56)) \(pad("trace \(trace ?? "none")", 40)) "
        + (trace == expected ? "ok" : "MISMATCH (expected \(expected ?? "none"))"))
}

// With the package trait ServiceContext: the activity carries a ServiceContext, which is
// `ServiceContext.current` in its blocks and tasks (what tracing spans and logging metadata
// providers read), and detached work drops it.
section("5. A ServiceContext rides with the activity (trait ServiceContext)") { group in
    var incoming = ServiceContext.topLevel
    incoming[TraceID.self] = "4bf92f3577b34da6"
    ExecutionContext.withActivity("GET /users/42/avatar", serviceContext: incoming) {
        group.enter()
        api.async {
            showTrace("api: handle the request", expect: "4bf92f3577b34da6")
            group.enter()
            storage.async {
                showTrace("storage: read the avatar", expect: "4bf92f3577b34da6")
                group.enter()
                Task {
                    showTrace("a Task created in the storage block", expect: "4bf92f3577b34da6")
                    group.leave()
                }
                group.leave()
            }
            group.enter()
            janitor.async(flags: .detached) {
                showTrace("janitor: .detached cleanup", expect: nil)
                group.leave()
            }
            group.leave()
        }
    }
}
#endif

let failed = mismatches.load(ordering: .relaxed)
say(failed == 0 ? "\nEvery block saw what the rules say." : "\n\(failed) block(s) saw something else: see MISMATCH above.")
exit(failed == 0 ? 0 : 1)
