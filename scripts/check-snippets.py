#!/usr/bin/env python3
"""Builds every documented Swift snippet, so that none can rot (`make check-snippets`,
part of `make test`).

Every fenced block whose info string starts with `swift`, in the Markdown files git knows
(README.md, the DocC articles, docs/*.md, the examples' READMEs, ...), is one of:

    ```swift                    a whole program: it must compile as written (imports included)

    <!-- snippet: run -->       the same, and it must also run to a zero exit status (20 s
    ```swift                    at most)

    <!-- snippet: fragment -->  part of a program, or a declaration listing: not built
    ```swift

The marker is an HTML comment on the line before the fence, which GitHub and DocC do not
show (an info string such as `swift fragment` would be taken whole for the language and
lose the highlighting).

Each built block becomes an executable target of one generated package,
.build-snippets/ (it depends on Lull by path), and one `swift build` builds them all:
incremental, since a snippet's file is rewritten only when its text changes. Compiler
messages point at the Markdown file and line (#sourceLocation). A block that declares
`@main` is compiled as a file of its own rather than as main.swift.

Environment: SWIFT (default swift), SWIFTFLAGS (extra build flags). Exit status 1 when a
snippet does not build or a runnable one fails.
"""

import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PACKAGE = os.path.join(ROOT, ".build-snippets")
RUN_TIMEOUT_SECONDS = 20
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(.*)$")
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*([a-z]+)\s*-->\s*$")
KINDS = ("run", "fragment")


class Snippet:
    def __init__(self, path, line, kind, text):
        self.path = path          # relative to ROOT
        self.line = line          # line number of the first line of code (1-based)
        self.kind = kind          # "program", "run" or "fragment"
        self.text = text

    @property
    def target(self):
        stem = re.sub(r"[^A-Za-z0-9]+", "_", self.path).strip("_")
        return f"Snippet_{stem}_{self.line}"

    @property
    def runs(self):
        return self.kind == "run"


def markdown_files():
    listed = subprocess.run(["git", "ls-files", "-z", "--", "*.md"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode()
    files = [path for path in listed.split("\0") if path]
    # Also files not yet added to git, so that a new page is checked before its commit.
    untracked = subprocess.run(["git", "ls-files", "-z", "--others", "--exclude-standard", "--", "*.md"],
                               cwd=ROOT, capture_output=True, check=True).stdout.decode()
    files += [path for path in untracked.split("\0") if path]
    return sorted(set(files))


def snippets_in(path):
    """The Swift blocks of one Markdown file, fragments included (their words say so)."""
    found = []
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        indent, fence, info = match.groups()
        words = info.split()
        marker = MARKER.match(lines[index - 1]) if index > 0 else None
        kind = marker.group(1) if marker else "program"
        if kind not in KINDS + ("program",):
            raise SystemExit(f"check-snippets: {path}:{index}: unknown marker '{kind}' "
                             f"(the markers are {', '.join(KINDS)})")
        body = []
        index += 1
        start = index + 1
        while index < len(lines):
            closing = FENCE.match(lines[index])
            if closing and closing.group(2).startswith(fence[0]) and len(closing.group(2)) >= len(fence) \
                    and not closing.group(3).strip():
                break
            line = lines[index]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            index += 1
        index += 1
        if words and words[0].lower() == "swift":
            found.append(Snippet(path, start, kind, "\n".join(body) + "\n"))
    return found


def write_if_changed(path, text):
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def generate(snippets):
    """Writes the snippet package: one executable target per snippet; removes stale ones."""
    sources = os.path.join(PACKAGE, "Sources")
    os.makedirs(sources, exist_ok=True)
    wanted = {snippet.target for snippet in snippets}
    for name in os.listdir(sources):
        if name not in wanted:
            shutil.rmtree(os.path.join(sources, name))
    for snippet in snippets:
        file_name = "Snippet.swift" if re.search(r"^\s*@main\b", snippet.text, re.M) else "main.swift"
        directory = os.path.join(sources, snippet.target)
        for stale in ("Snippet.swift", "main.swift"):
            if stale != file_name and os.path.exists(os.path.join(directory, stale)):
                os.remove(os.path.join(directory, stale))
        location = f'#sourceLocation(file: "{os.path.join(ROOT, snippet.path)}", line: {snippet.line})\n'
        write_if_changed(os.path.join(directory, file_name), location + snippet.text)
    targets = "\n".join(
        f'        .executableTarget(name: "{snippet.target}", '
        f'dependencies: [.product(name: "Lull", package: "Lull")]),'
        for snippet in snippets)
    manifest = f"""// swift-tools-version: 6.2
// Generated by scripts/check-snippets.py: every documented Swift snippet, one target each.
import PackageDescription

let package = Package(
    name: "LullSnippets",
    dependencies: [.package(name: "Lull", path: "{ROOT}")],
    targets: [
{targets}
    ],
    swiftLanguageModes: [.v6]
)
"""
    write_if_changed(os.path.join(PACKAGE, "Package.swift"), manifest)


def main():
    swift = os.environ.get("SWIFT", "swift")
    flags = os.environ.get("SWIFTFLAGS", "").split()
    snippets = []
    fragments = 0
    files = 0
    for path in markdown_files():
        found = snippets_in(path)
        if found:
            files += 1
        for snippet in found:
            if snippet.kind == "fragment":
                fragments += 1
            else:
                snippets.append(snippet)
    if not snippets:
        print(f"check-snippets: no Swift snippet to build ({fragments} fragments)")
        return 0
    generate(snippets)
    print(f"check-snippets: building {len(snippets)} Swift snippets from {files} Markdown files "
          f"({fragments} fragments not built) in .build-snippets")
    build = subprocess.run([swift, "build", "--package-path", PACKAGE] + flags,
                           capture_output=True, text=True)
    if build.returncode != 0:
        lines = (build.stdout + build.stderr).splitlines()
        shown = [line for line in lines if not re.match(r"^\[\d+/\d+\]|^Building|^Compiling|^Write|^Planning", line)]
        print("\n".join(shown))
        print("check-snippets: FAILED: a documented snippet does not build (the messages above name "
              "its file and line; mark a block that is not a whole program <!-- snippet: fragment -->)")
        return 1
    bin_path = os.path.join(PACKAGE, ".build", "debug")
    failures = 0
    ran = 0
    for snippet in snippets:
        if not snippet.runs:
            continue
        ran += 1
        where = f"{snippet.path}:{snippet.line}"
        try:
            result = subprocess.run([os.path.join(bin_path, snippet.target)], capture_output=True,
                                    text=True, timeout=RUN_TIMEOUT_SECONDS, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            print(f"check-snippets: FAILED: {where} did not finish within {RUN_TIMEOUT_SECONDS} s")
            failures += 1
            continue
        if result.returncode != 0:
            print(f"check-snippets: FAILED: {where} exited with status {result.returncode}:")
            print(result.stdout + result.stderr)
            failures += 1
    if failures:
        return 1
    print(f"check-snippets: {len(snippets)} snippets built, {ran} ran to a zero exit status")
    return 0


if __name__ == "__main__":
    sys.exit(main())
