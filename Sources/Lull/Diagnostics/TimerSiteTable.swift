import CLullShims
import Synchronization

/// Timer creation sites by number, so that a timer core keeps 31 bits where a site takes
/// twelve bytes (a million idle timers are mostly their cores). Sites are `#fileID`
/// literals and line numbers: a program has as many as it has calls of `makeTimerSource`,
/// looked up once per thread and site thanks to a thread-local cache.
enum TimerSiteTable {
    /// Numbers fit in 31 bits (the core's 32nd is the `.strict` flag); past this many
    /// distinct sites (only a program passing computed line numbers gets there), timers
    /// get 0 and are named "?" in diagnostics.
    static let capacity = 1 << 20

    private struct Key: Hashable {
        let file: UnsafePointer<UInt8>
        let line: UInt32
    }

    private struct Table {
        var numbers: [Key: UInt32] = [:]
        /// Index `n - 1` is site number `n`.
        var sites: [TimerSite] = []
    }

    /// The pointers are to program literals (see `TimerSite`).
    private static let table = Mutex<Table>(Table())

    /// The number of `site` (1...capacity), or 0 when the table is full.
    static func number(for site: TimerSite) -> UInt32 {
        let cached = lull_site_cache_get(site.file, site.line)
        if cached != 0 { return cached }
        let number = table.locked { table -> UInt32 in
            let key = Key(file: site.file, line: site.line)
            if let number = table.numbers[key] { return number }
            guard table.sites.count < capacity else { return 0 }
            table.sites.append(site)
            let number = UInt32(table.sites.count)
            table.numbers[key] = number
            return number
        }
        if number != 0 { lull_site_cache_put(site.file, site.line, number) }
        return number
    }

    /// The site numbered `number`, nil for 0 (a full table).
    static func site(_ number: UInt32) -> TimerSite? {
        guard number != 0 else { return nil }
        return table.locked { table in Int(number) <= table.sites.count ? table.sites[Int(number) - 1] : nil }
    }
}
