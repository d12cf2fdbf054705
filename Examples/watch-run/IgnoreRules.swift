#if canImport(Glibc)
import Glibc
#endif

/// Which changed paths to ignore, from `.gitignore`-style patterns, one per line:
///
/// - blank lines and lines starting with `#` are skipped (`\#` for a literal `#`);
/// - `*`, `?` and `[...]` match within one path component, `**` any number of components;
/// - a pattern without a `/` (other than a trailing one) matches a name at any depth;
///   one with a `/` is anchored at the watched root (`/build`, `docs/*.html`);
/// - a trailing `/` matches directories only;
/// - `!pattern` re-includes what an earlier pattern ignored (the last match wins), except
///   below an ignored directory (as in git).
///
/// Ignoring a directory ignores everything below it.
struct IgnoreRules: Sendable {
    private struct Rule: Sendable {
        let isNegated: Bool
        let isDirectoryOnly: Bool
        let isAnchored: Bool
        /// The pattern's components; `**` stands for any number of components.
        let segments: [String]
    }

    /// What watch-run ignores unless told not to: version control metadata and editors'
    /// temporary files.
    static let defaultPatterns = [".git/", ".hg/", ".svn/", "*.swp", "*.swx", "*~", ".#*", "4913"]

    private var rules: [Rule] = []

    init(patterns: [String] = []) {
        add(patterns)
    }

    /// Adds patterns (lines of an ignore file, or `--ignore` options); later ones win.
    mutating func add(_ patterns: [String]) {
        for line in patterns {
            if let rule = Self.parse(line) { rules.append(rule) }
        }
    }

    var isEmpty: Bool { rules.isEmpty }

    /// Whether `relativePath` (below the watched root, "/"-separated) is ignored.
    func isIgnored(_ relativePath: String, isDirectory: Bool) -> Bool {
        let components = relativePath.split(separator: "/").map(String.init)
        guard !components.isEmpty else { return false }
        for depth in 1...components.count {
            let prefix = Array(components[0..<depth])
            let isLast = depth == components.count
            let ignored = verdict(for: prefix, isDirectory: isLast ? isDirectory : true)
            if ignored && !isLast { return true }  // an ignored directory hides all below it
            if isLast { return ignored }
        }
        return false
    }

    /// The last matching rule's verdict for one path (not looking at its parents).
    private func verdict(for components: [String], isDirectory: Bool) -> Bool {
        var ignored = false
        for rule in rules where !rule.isDirectoryOnly || isDirectory {
            let matches = rule.isAnchored
                ? Self.match(rule.segments[...], components[...])
                : Self.matchName(rule.segments[0], components[components.count - 1])
            if matches { ignored = !rule.isNegated }
        }
        return ignored
    }

    private static func parse(_ line: String) -> Rule? {
        var pattern = Substring(line)
        while pattern.last == " " || pattern.last == "\r" { pattern.removeLast() }
        guard !pattern.isEmpty, !pattern.hasPrefix("#") else { return nil }
        var isNegated = false
        if pattern.hasPrefix("!") {
            isNegated = true
            pattern.removeFirst()
        } else if pattern.hasPrefix("\\#") || pattern.hasPrefix("\\!") {
            pattern.removeFirst()
        }
        var isDirectoryOnly = false
        while pattern.hasSuffix("/") {
            isDirectoryOnly = true
            pattern.removeLast()
        }
        let segments = pattern.split(separator: "/").map(String.init)
        guard !segments.isEmpty else { return nil }
        // A slash at the start or in the middle anchors the pattern at the root.
        let isAnchored = pattern.contains("/") || segments == ["**"]
        return Rule(isNegated: isNegated, isDirectoryOnly: isDirectoryOnly, isAnchored: isAnchored, segments: segments)
    }

    /// Matches pattern segments against path components; `**` takes zero or more of them.
    private static func match(_ segments: ArraySlice<String>, _ components: ArraySlice<String>) -> Bool {
        guard let first = segments.first else { return components.isEmpty }
        if first == "**" {
            let rest = segments.dropFirst()
            var remaining = components
            while true {
                if match(rest, remaining) { return true }
                guard !remaining.isEmpty else { return false }
                remaining = remaining.dropFirst()
            }
        }
        guard let component = components.first, matchName(first, component) else { return false }
        return match(segments.dropFirst(), components.dropFirst())
    }

    /// One glob against one name (`*` also matches a leading dot, as in git).
    private static func matchName(_ pattern: String, _ name: String) -> Bool {
        fnmatch(pattern, name, 0) == 0
    }
}
