/// inotify's event bits (linux/inotify.h), spelled out here because Glibc's Swift module
/// does not carry <sys/inotify.h>.
struct InotifyMask: OptionSet, Hashable, Sendable {
    let rawValue: UInt32

    static let access = InotifyMask(rawValue: 0x0000_0001)
    static let modify = InotifyMask(rawValue: 0x0000_0002)
    static let attrib = InotifyMask(rawValue: 0x0000_0004)
    static let closeWrite = InotifyMask(rawValue: 0x0000_0008)
    static let closeNoWrite = InotifyMask(rawValue: 0x0000_0010)
    static let open = InotifyMask(rawValue: 0x0000_0020)
    static let movedFrom = InotifyMask(rawValue: 0x0000_0040)
    static let movedTo = InotifyMask(rawValue: 0x0000_0080)
    static let create = InotifyMask(rawValue: 0x0000_0100)
    static let delete = InotifyMask(rawValue: 0x0000_0200)
    static let deleteSelf = InotifyMask(rawValue: 0x0000_0400)
    static let moveSelf = InotifyMask(rawValue: 0x0000_0800)
    static let unmount = InotifyMask(rawValue: 0x0000_2000)
    static let queueOverflow = InotifyMask(rawValue: 0x0000_4000)
    static let ignored = InotifyMask(rawValue: 0x0000_8000)
    static let onlyDirectory = InotifyMask(rawValue: 0x0100_0000)
    static let dontFollow = InotifyMask(rawValue: 0x0200_0000)
    static let excludeUnlinked = InotifyMask(rawValue: 0x0400_0000)
    static let maskAdd = InotifyMask(rawValue: 0x2000_0000)
    static let isDirectory = InotifyMask(rawValue: 0x4000_0000)

    /// The entry events of a directory watch.
    static let entryChanges: InotifyMask = [.create, .delete, .movedFrom, .movedTo]
    /// The events of an object about itself, always watched for a source (they keep the
    /// link-count baseline right and are rare).
    static let selfChanges: InotifyMask = [.attrib, .moveSelf, .deleteSelf]
    /// The flags of inotify_add_watch that are not events.
    static let watchFlags: InotifyMask = [.onlyDirectory, .dontFollow, .excludeUnlinked, .maskAdd]
}

/// One event as read from the inotify descriptor.
struct InotifyEvent: Sendable {
    let watchDescriptor: Int32
    let mask: InotifyMask
    let cookie: UInt32
    /// The entry's name for events of a directory about one of its entries, else nil: the
    /// bytes as the kernel gave them (not necessarily UTF-8; see `PathEncoding`).
    let name: [UInt8]?
}

extension InotifyEvent {
    /// Parses a buffer filled by read(2) on an inotify descriptor: a sequence of
    /// `struct inotify_event` (int wd; uint32 mask, cookie, len; char name[len]).
    static func parse(_ bytes: UnsafeRawBufferPointer, into events: inout [InotifyEvent]) {
        let header = 16
        var offset = 0
        while offset + header <= bytes.count {
            let descriptor = bytes.loadUnaligned(fromByteOffset: offset, as: Int32.self)
            let mask = bytes.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
            let cookie = bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt32.self)
            let length = Int(bytes.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
            let nameStart = offset + header
            guard nameStart + length <= bytes.count else { break }
            var name: [UInt8]?
            if length > 0 {
                // The name is NUL-padded to an alignment boundary.
                let raw = UnsafeRawBufferPointer(rebasing: bytes[nameStart..<(nameStart + length)])
                let end = raw.firstIndex(of: 0) ?? raw.count
                name = Array(raw[0..<end])
            }
            events.append(InotifyEvent(watchDescriptor: descriptor, mask: InotifyMask(rawValue: mask),
                                       cookie: cookie, name: name))
            offset = nameStart + length
        }
    }
}
