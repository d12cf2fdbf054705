#!/usr/bin/env python3
"""Checks that the folders of Sources/Lull are layers.

Folder A depends on folder B when a Swift file in A names a type, function or static that
is declared in a file of B (and in no other folder). The script prints every such edge with
the names behind it, finds the cycles, and checks each edge against LAYERS: a folder may
depend only on the folders listed before it.

Exit status: 0 when there is no cycle and no upward edge, 1 otherwise (also when a folder
is missing from LAYERS).

    scripts/check-layers.py            every edge, with one place per name
    scripts/check-layers.py --all      every edge, with every place of every name
    scripts/check-layers.py --quiet    only the problems
"""

import os
import re
import sys
from collections import defaultdict

# The layers, bottom to top: each folder may use only the folders before it. This list is
# the one statement of the order; docs/ARCHITECTURE.md draws it.
LAYERS = [
    "Support",
    "Time",
    "QoS",
    "Context",
    "Diagnostics",
    "Timers",
    "Reactor",
    "Execution",
    "EventSources",
    "FileSystem",
    "Runtime",
]

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Sources", "Lull")

# Names too common to tell a dependency: a method or static of this name in one folder
# does not make every use of the word elsewhere (an array's `remove`, a local `count`) a
# reference to it. Names the standard library also declares (`TaskLocal.withValue`,
# `Clock.Instant`) are in it for the same reason.
GENERIC = set("""
    init deinit description debugDescription hash hashValue rawValue
    run start stop cancel resume suspend activate close open read write remove add insert
    append contains count value name label kind first last next previous isEmpty reset
    load store get set lock unlock locked wait signal notify wake fire fired schedule
    register unregister make shared current now none main empty default zero some
    min max make update apply body action handler result state flags mask data
    removeAll removeFirst removeLast forEach isSet
    enqueue dequeue push pop drain perform submit touch check clear take put
    deadline leeway interval queue target qos source event events descriptor path
    error errno code status message log warning once fatal
    withValue Instant Duration
""".split())

DECLARATION = re.compile(
    r"\b(?:class|struct|enum|protocol|actor|typealias)\s+([A-Za-z_][A-Za-z0-9_]*)"
    r"|\bfunc\s+([A-Za-z_][A-Za-z0-9_]*)"
    r"|\bstatic\s+(?:(?:private|fileprivate|internal|public|package|nonisolated|final|override|lazy)"
    r"(?:\([a-z]+\))?\s+)*(?:let|var)\s+([A-Za-z_][A-Za-z0-9_]*)"
)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_telling(name):
    """Whether a use of `name` tells which declaration it means: a type's name (capitalised),
    or a function's or static's name made of several words (`fireIfDue`). A one-word member
    name (`root`, `bytes`, `pending`) is as often a local variable or a property of another
    type: uses of what it names are caught through its type's name."""
    if name in GENERIC or len(name) < 3:
        return False
    return name[0].isupper() or any(char.isupper() for char in name[1:])


def code_only(text):
    """The text with comments and string literals blanked (newlines kept, so that line
    numbers hold); the code inside a string's interpolations `\\( ... )` is kept."""
    out = []
    i, n = 0, len(text)
    # Each entry is what the lexer is inside: ("code", parens) for code (the top level, or
    # an interpolation that ends at its closing parenthesis), or ("string", quotes, hashes).
    stack = [("code", 0)]

    def blank(segment):
        out.append("".join(c if c == "\n" else " " for c in segment))

    while i < n:
        top = stack[-1]
        if top[0] == "code":
            if text.startswith("//", i):
                end = text.find("\n", i)
                end = n if end < 0 else end
                blank(text[i:end])
                i = end
                continue
            if text.startswith("/*", i):
                depth, j = 1, i + 2
                while j < n and depth:
                    if text.startswith("/*", j):
                        depth, j = depth + 1, j + 2
                    elif text.startswith("*/", j):
                        depth, j = depth - 1, j + 2
                    else:
                        j += 1
                blank(text[i:j])
                i = j
                continue
            match = re.compile(r'(#*)("""|")').match(text, i)
            if match and (match.group(1) or text[i] == '"'):
                stack.append(("string", match.group(2), match.group(1)))
                blank(match.group(0))
                i = match.end()
                continue
            char = text[i]
            if char == "(":
                stack[-1] = ("code", top[1] + 1)
            elif char == ")":
                if top[1] == 0 and len(stack) > 1:
                    stack.pop()  # the end of an interpolation: back into its string
                    out.append(" ")
                    i += 1
                    continue
                stack[-1] = ("code", top[1] - 1)
            out.append(char)
            i += 1
        else:
            _, quotes, hashes = top
            if text.startswith(quotes + hashes, i):
                stack.pop()
                blank(quotes + hashes)
                i += len(quotes) + len(hashes)
            elif text.startswith("\\" + hashes + "(", i):
                stack.append(("code", 0))
                blank("\\" + hashes + "(")
                i += len(hashes) + 2
            elif text.startswith("\\" + hashes, i) and i + len(hashes) + 1 < n:
                blank(text[i:i + len(hashes) + 2])
                i += len(hashes) + 2
            else:
                blank(text[i])
                i += 1
    return "".join(out)


def swift_files():
    """(folder, path relative to ROOT, code) for every Swift file under ROOT."""
    for folder in sorted(os.listdir(ROOT)):
        directory = os.path.join(ROOT, folder)
        if not os.path.isdir(directory):
            continue
        for base, _, names in os.walk(directory):
            for name in sorted(names):
                if name.endswith(".swift"):
                    path = os.path.join(base, name)
                    with open(path, encoding="utf-8") as handle:
                        yield folder, os.path.relpath(path, ROOT), code_only(handle.read())


def main():
    show_all = "--all" in sys.argv
    quiet = "--quiet" in sys.argv
    files = list(swift_files())
    folders = sorted({folder for folder, _, _ in files})

    declared = defaultdict(set)  # name -> folders declaring it
    for folder, _, code in files:
        for match in DECLARATION.finditer(code):
            name = next(group for group in match.groups() if group)
            declared[name].add(folder)
    home = {name: next(iter(homes)) for name, homes in declared.items()
            if len(homes) == 1 and is_telling(name)}

    # (from, to) -> name -> [file:line]
    edges = defaultdict(lambda: defaultdict(list))
    for folder, path, code in files:
        for number, line in enumerate(code.split("\n"), 1):
            for token in IDENTIFIER.findall(line):
                target = home.get(token)
                if target and target != folder:
                    edges[(folder, target)][token].append(f"{path}:{number}")

    problems = 0
    unknown = [folder for folder in folders if folder not in LAYERS]
    for folder in unknown:
        print(f"error: folder {folder} is not in LAYERS (scripts/check-layers.py)")
        problems += 1
    rank = {folder: index for index, folder in enumerate(LAYERS)}

    upward = []
    print("Folder dependencies (A -> B: A names what B declares):")
    for (source, target) in sorted(edges, key=lambda edge: (rank.get(edge[0], 99), rank.get(edge[1], 99))):
        names = edges[(source, target)]
        is_upward = rank.get(target, 99) >= rank.get(source, 99)
        if is_upward:
            upward.append((source, target))
        if quiet and not is_upward:
            continue
        mark = "  UPWARD" if is_upward else ""
        print(f"\n{source} -> {target}{mark}  ({len(names)} names)")
        for name in sorted(names):
            places = names[name]
            shown = ", ".join(places) if show_all else places[0] + (f" (+{len(places) - 1})" if len(places) > 1 else "")
            print(f"    {name}: {shown}")

    cycles = strongly_connected(folders, edges)
    print()
    for component in cycles:
        print("CYCLE among " + ", ".join(component) + ":\n    " + describe_cycle(component, edges).replace("; ", "\n    "))
        problems += 1
    for source, target in upward:
        print(f"UPWARD: {source} -> {target} ({target} is not below {source} in LAYERS)")
        problems += 1
    if problems:
        print(f"\n{len(cycles)} group(s) of folders in cycles, {len(upward)} upward edge(s), {len(unknown)} unknown folder(s)")
        return 1
    print("The folders are layers: no cycle, no upward edge.")
    return 0


def strongly_connected(nodes, edges):
    """The components of more than one folder (Tarjan), each sorted by LAYERS."""
    successors = defaultdict(list)
    for source, target in edges:
        successors[source].append(target)
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in successors[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                order = {folder: position for position, folder in enumerate(LAYERS)}
                components.append(sorted(component, key=lambda folder: order.get(folder, 99)))

    for node in nodes:
        if node not in index:
            visit(node)
    return components


def describe_cycle(component, edges):
    """Each upward edge inside the component closed into a shortest cycle: the upward edge,
    then the shortest path back through the component."""
    rank = {folder: index for index, folder in enumerate(LAYERS)}
    inside = {(source, target) for (source, target) in edges if source in component and target in component}
    cycles = []
    for source, target in sorted(inside):
        if rank.get(target, 99) < rank.get(source, 99):
            continue
        path = shortest_path(target, source, inside)
        if path:
            cycles.append(" -> ".join([source] + path))
    return "; ".join(cycles)


def shortest_path(start, end, inside):
    """The folders from `start` to `end` along the edges `inside` (breadth first)."""
    previous = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for source, target in sorted(inside):
                if source == node and target not in previous:
                    previous[target] = node
                    following.append(target)
        frontier = following
    if end not in previous:
        return None
    path = [end]
    while previous[path[-1]] is not None:
        path.append(previous[path[-1]])
    return list(reversed(path))


if __name__ == "__main__":
    sys.exit(main())
