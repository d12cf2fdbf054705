/// For a run of queued blocks, the position of the last block of each QoS class: a serial
/// queue runs every block at the highest class among it and the blocks behind it in the
/// run, so that a block of higher QoS never waits on blocks running below it (asynchronous
/// inversion avoidance), and drops back once it has run.
struct ClassMarks: Sendable {
    /// Per class rank (index 0, unspecified, unused): the last position, -1 for none.
    private var last: (Int32, Int32, Int32, Int32, Int32) = (-1, -1, -1, -1, -1)

    private func position(ofRank rank: Int) -> Int32 {
        switch rank {
        case 1: last.0
        case 2: last.1
        case 3: last.2
        case 4: last.3
        default: last.4
        }
    }

    private mutating func setPosition(_ value: Int32, ofRank rank: Int) {
        switch rank {
        case 1: last.0 = value
        case 2: last.1 = value
        case 3: last.2 = value
        case 4: last.3 = value
        default: last.4 = value
        }
    }

    mutating func note(_ qosClass: QoS.QoSClass, at index: Int) {
        guard qosClass != .unspecified, index >= 0 else { return }
        let rank = qosClass.rank
        if Int32(clamping: index) > position(ofRank: rank) { setPosition(Int32(clamping: index), ofRank: rank) }
    }

    /// The highest class among the blocks at `index` and after, and the last position at
    /// which that stays true; nil when no block is marked there.
    func level(at index: Int) -> (qosClass: QoS.QoSClass, until: Int)? {
        for rank in stride(from: 5, through: 1, by: -1) {
            let end = Int(position(ofRank: rank))
            if end >= index { return (QoS.QoSClass.byRank[rank], end) }
        }
        return nil
    }

    func highestClass(from index: Int) -> QoS.QoSClass? {
        level(at: index)?.qosClass
    }

    /// These marks, counted from position `start`, as marks of a run that begins there.
    func dropping(_ start: Int) -> ClassMarks {
        var result = ClassMarks()
        for rank in 1...5 {
            let end = Int(position(ofRank: rank))
            if end >= start { result.setPosition(Int32(clamping: end - start), ofRank: rank) }
        }
        return result
    }

    /// The marks of this run followed by `other`, a run that starts at `offset`.
    func followed(by other: ClassMarks, offset: Int) -> ClassMarks {
        var result = self
        for rank in 1...5 {
            let end = other.position(ofRank: rank)
            if end >= 0 { result.setPosition(Int32(clamping: Int(end) + offset), ofRank: rank) }
        }
        return result
    }
}
