/// The contract's rules for the QoS a block runs at, in two steps.
///
/// At submission, `propagated` folds what the block brings: the item's QoS (`WorkItem(qos:)`,
/// `async(qos:)`) unless `.noQoS`, else the submitting thread's QoS for work that is not
/// detached, with user-interactive lowered to user-initiated (`.inheritQoS` prefers the
/// thread's over the item's).
///
/// Where the block is queued, `effective` applies the queue: its own QoS, or that of a
/// global target other than the default one, wins — unless `.enforceQoS` and the block's
/// is higher. Without either, `default`.
enum QoSResolution {
    static func propagated(itemQoS: QoS, flags: WorkItemFlags, submitter: QoS?) -> QoS {
        let item: QoS? = (itemQoS.isUnspecified || flags.contains(.noQoS)) ? nil : itemQoS
        var inferred: QoS?
        if let submitter, !submitter.isUnspecified, !flags.contains(.detached) {
            inferred = self.inferred(from: submitter)
        }
        if flags.contains(.inheritQoS), let inferred { return inferred }
        return item ?? inferred ?? .unspecified
    }

    /// What a thread's QoS propagates to the work it submits: user-interactive is for the
    /// thread that handles events and draws, never for work handed elsewhere.
    static func inferred(from submitter: QoS) -> QoS {
        submitter.qosClass == .userInteractive ? .userInitiated : submitter
    }

    static func effective(_ propagated: QoS, flags: WorkItemFlags, floor: QoS) -> QoS {
        if !floor.isUnspecified {
            if flags.contains(.enforceQoS), !propagated.isUnspecified, propagated.qosClass > floor.qosClass {
                return propagated
            }
            return floor
        }
        return propagated.isUnspecified ? .default : propagated
    }

    /// The class of `effective`, with the floor given by its class's rank (0: none), as a
    /// serial queue publishes it for its producers.
    @inline(__always)
    static func effectiveClass(_ propagated: QoS, flags: WorkItemFlags, floorRank: Int) -> QoS.QoSClass {
        if floorRank != 0 {
            if flags.contains(.enforceQoS), !propagated.isUnspecified, propagated.qosClass.rank > floorRank {
                return propagated.qosClass
            }
            return QoS.QoSClass.byRank[floorRank]
        }
        return propagated.isUnspecified ? .default : propagated.qosClass
    }
}
