#!/usr/bin/env python3
"""Import circles between the modules (files) of each crate, from their `crate::` paths.

Usage: scripts/import-cycles.py [crate-src-dir ...]   (default: every server/*/src)
Prints each circle (strongly connected set of files) and exits 1 when there is one.
A file's module is its path (`a/b.rs` and `a/b/mod.rs` → `a::b`); a `crate::x::y::Z`
path names the deepest module of it that exists. `#[cfg(test)]` modules are left out.
"""
import os
import re
import sys


def modules(src):
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            mods["::".join(rel)] = os.path.join(dirpath, f)
    return mods


def text_without_tests(path):
    text = open(path, encoding="utf-8").read()
    m = re.search(r"#\[cfg\(test\)\]\s*mod \w+\s*\{", text)
    return text[: m.start()] if m else text


def edges(mods):
    out = {m: set() for m in mods}
    for m, path in mods.items():
        text = re.sub(r"//[^\n]*", "", text_without_tests(path))
        parent = m.rsplit("::", 1)[0] if "::" in m else ""
        refs = re.findall(r"\bcrate((?:::\w+)+)", text)
        refs += [
            (("::" + parent) if parent else "") + r
            for r in re.findall(r"\bsuper((?:::\w+)+)", text)
        ]
        for r in refs:
            parts = r.strip(":").split("::")
            for n in range(len(parts), 0, -1):
                cand = "::".join(parts[:n])
                if cand in mods:
                    # A module and its own descendants are one room.
                    if cand != m and not m.startswith(cand + "::") and not cand.startswith(m + "::"):
                        out[m].add(cand)
                    break
    return out


def sccs(graph):
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dirs = sys.argv[1:] or sorted(
        os.path.join(root, "server", c, "src")
        for c in os.listdir(os.path.join(root, "server"))
        if os.path.isdir(os.path.join(root, "server", c, "src"))
    )
    bad = 0
    for src in dirs:
        for comp in sccs(edges(modules(src))):
            bad += 1
            print(f"{os.path.relpath(src, root)}: circle of {len(comp)}: {', '.join(comp)}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
