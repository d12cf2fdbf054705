import CLullShims

/// How inotify's events become kqueue's EVFILT_VNODE events (Darwin's rules, from XNU's
/// vnode operations), for one watch; the table, with the test of each row, is in
/// docs/FileSystem.md. Runs with the hub's `state` lock held, on the draining thread (the
/// status it reads through the pin is the one system call made under that lock).
enum VnodeEventMapping {
    /// The inotify events a watch needs for sources that want `mask`.
    static func kernelMask(for mask: FileSystemEvent, isDirectory: Bool) -> InotifyMask {
        var needed = InotifyMask.selfChanges
        if isDirectory {
            if !mask.isDisjoint(with: [.write, .link]) { needed.formUnion(.entryChanges) }
        } else if !mask.isDisjoint(with: [.write, .extend]) {
            needed.insert(.modify)
        }
        return needed
    }

    /// The events inotify's `event` means for the object of `watch` itself. `internalMoves`
    /// holds the cookies of moves whose both halves were seen in this directory (a rename
    /// inside it, which does not change its link count).
    static func events(for event: InotifyEvent, on watch: InotifyWatch, internalMoves: Set<UInt32>) -> FileSystemEvent {
        let mask = event.mask
        if event.name != nil {
            // An event about an entry of a watched directory.
            guard watch.isDirectory, !mask.isDisjoint(with: .entryChanges) else { return [] }
            var result: FileSystemEvent = .write
            if mask.contains(.isDirectory) {
                let isMove = !mask.isDisjoint(with: [.movedFrom, .movedTo])
                if !isMove || !internalMoves.contains(event.cookie) { result.insert(.link) }
            }
            return result
        }
        var result: FileSystemEvent = []
        if mask.contains(.modify) {
            result.insert(.write)
            if let status = watch.currentStatus() {
                if status.size > watch.size { result.insert(.extend) }
                watch.size = status.size
            }
        }
        if mask.contains(.attrib) {
            result.formUnion(linkCountChange(of: watch) ?? .attrib)
        }
        if mask.contains(.moveSelf) { result.insert(.rename) }
        if mask.contains(.deleteSelf), !watch.deleteReported {
            watch.deleteReported = true
            result.insert(.delete)
        }
        if mask.contains(.unmount), !watch.revokeReported {
            watch.revokeReported = true
            result.insert(.revoke)
        }
        return result
    }

    /// `.link` (and `.delete` when it fell) if the link count changed since the baseline,
    /// with `.attrib` too if the mode or owner changed as well (the kernel merges two
    /// IN_ATTRIB in a row into one); nil when the link count did not change (or cannot be
    /// read).
    static func linkCountChange(of watch: InotifyWatch) -> FileSystemEvent? {
        guard let status = watch.currentStatus() else { return nil }
        let before = watch.linkCount
        let ownershipBefore = watch.ownership
        watch.linkCount = status.link_count
        watch.size = status.size
        watch.ownership = (status.mode, status.owner, status.group)
        if status.link_count == before { return nil }
        var result: FileSystemEvent
        if status.link_count > before {
            result = .link
        } else {
            // Darwin posts DELETE | LINK on every unlink of the object, also of one of its links.
            if status.link_count == 0 { watch.deleteReported = true }
            result = [.delete, .link]
        }
        if ownershipBefore != watch.ownership { result.insert(.attrib) }
        return result
    }

    /// For a directory watched through its parent: `.delete` + `.link` when it was removed
    /// (its link count is 0), once.
    static func removalOfDirectory(_ watch: InotifyWatch) -> FileSystemEvent {
        guard !watch.deleteReported, let status = watch.currentStatus(), status.link_count == 0 else { return [] }
        watch.deleteReported = true
        watch.linkCount = 0
        return [.delete, .link]
    }

    /// After the kernel's queue overflowed: what may have happened to the object. Everything
    /// but `.delete` and `.revoke` is reported (it cannot be ruled out); `.delete` only when
    /// the link count is 0 now and `.revoke` only when the file system is known gone.
    static func conservativeEvents(for watch: InotifyWatch) -> FileSystemEvent {
        var result: FileSystemEvent = [.write, .extend, .attrib, .link, .rename]
        if let status = watch.currentStatus() {
            watch.size = status.size
            watch.linkCount = status.link_count
            if status.link_count == 0 {
                watch.deleteReported = true
                result.insert(.delete)
            }
        }
        if watch.revokeReported { result.insert(.revoke) }
        return result
    }
}
