/// How a context prints: the activity, its name and its parent, as in
/// `activity #3 "GET /users/42" in #1`, or `no activity` for ``ExecutionContext/empty``.
extension ExecutionContext: CustomStringConvertible, CustomDebugStringConvertible {
    /// `activity #<id> "<name>"`, followed by ` in #<parent>` when it has a parent.
    public var description: String {
        guard hasActivity else { return "no activity" }
        var text = "activity #\(activityID)"
        if let activityName { text += " \"\(activityName)\"" }
        if parentActivityID != 0 { text += " in #\(parentActivityID)" }
        return text
    }

    /// `ExecutionContext(<description>)`.
    public var debugDescription: String {
        "ExecutionContext(\(description))"
    }
}
