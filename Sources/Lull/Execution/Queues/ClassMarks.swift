/// For a run of queued blocks, the position of the last block of each QoS class: a serial
/// queue runs every block at the highest class among it and the blocks behind it in the
/// run, so that a block of higher QoS never waits on blocks running below it (asynchronous
/// inversion avoidance), and drops back once it has run.
struct ClassMarks: Sendable {
    /// Per class rank (index 0, unspecified, unused): the last position, -1 for none.
    private var last: (Int32, Int32, Int32, Int32, Int32) = (-1, -1, -1, -1, -1)

    /// The five positions are read and written in place, by rank (1...5 → bytes 0, 4, ...
    /// 16 of the tuple): every block queued on a serial queue notes its class here, under
    /// the queue's lock, and a switch per access costs more than the lock.
    @inline(__always)
    private func position(ofRank rank: Int) -> Int32 {
        assert((1...5).contains(rank), "ClassMarks: rank \(rank) out of 1...5")
        return withUnsafeBytes(of: last) { $0.load(fromByteOffset: (rank - 1) &* 4, as: Int32.self) }
    }

    @inline(__always)
    private mutating func setPosition(_ value: Int32, ofRank rank: Int) {
        assert((1...5).contains(rank), "ClassMarks: rank \(rank) out of 1...5")
        withUnsafeMutableBytes(of: &last) { $0.storeBytes(of: value, toByteOffset: (rank - 1) &* 4, as: Int32.self) }
    }

    @inline(__always)
    mutating func note(_ qosClass: QoS.QoSClass, at index: Int) {
        guard qosClass != .unspecified, index >= 0 else { return }
        let rank = qosClass.rank
        let value = Int32(clamping: index)
        if value > position(ofRank: rank) { setPosition(value, ofRank: rank) }
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
