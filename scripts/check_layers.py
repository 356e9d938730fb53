#!/usr/bin/env python3
"""Fails when the source tree's includes run in a circle.

Reads every `#include "..."` outside tests and build folders and draws three graphs:
  folders  src/core, src/wire, weightstore, relay, ... each a node; an include from one folder
           into another an arrow;
  modules  a header and the source file of the same name (relay/relay_state.hpp and
           relay/relay_state.cpp) are one node, so an include runs back up inside a folder when
           a.cpp includes b.hpp while b.hpp (or b.cpp) includes a.hpp;
  files    each file a node (a header that includes itself, through any chain).
Any graph with a circle fails, each circle listed with the includes that close it. With no circle
the folders are printed in layers, each above everything it includes, and the number of modules.

    scripts/check_layers.py [ROOT]    exit 0: no circle; 1: circles, each listed; 2: bad usage
"""
import os
import re
import sys

SOURCE_ENDINGS = (".cpp", ".hpp", ".h", ".cc", ".cu")
SKIP_TOP = {"tests", ".git", ".ci", "docs", "examples", "scripts", "gpu-bundle", "runs"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(rel):
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return "src/" + parts[1]
    if parts[0] == "python" and len(parts) > 2:
        return "python/" + parts[1]
    return parts[0]


def module_of(rel):
    return os.path.splitext(rel)[0]


def source_files(root):
    for top in sorted(os.listdir(root)):
        if top in SKIP_TOP or top.startswith("build") or not os.path.isdir(os.path.join(root, top)):
            continue
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(x for x in dirs if x not in ("tests", "build", "__pycache__"))
            for f in sorted(files):
                if f.endswith(SOURCE_ENDINGS):
                    yield os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")


def resolve(root, rel, target, known):
    # The build's include folders: the file's own folder, the root and src/.
    for base in (os.path.dirname(rel), "", "src"):
        cand = os.path.normpath(os.path.join(base, target)).replace(os.sep, "/")
        if cand in known:
            return cand
    return None


def circles(graph):
    """Each strongly connected part of more than one node, or a node with an arrow to itself."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1 or v in graph.get(v, ()):
                out.append(sorted(part))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(argv):
    if len(argv) > 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    files = list(source_files(root))
    known = set(files)
    file_graph, module_graph, folder_graph, why = {}, {}, {}, {}
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for line in f:
                m = INCLUDE.match(line)
                if not m:
                    continue
                to = resolve(root, rel, m.group(1), known)
                if to is None:
                    continue  # a system or generated header
                file_graph.setdefault(rel, set()).add(to)
                why.setdefault((rel, to), f"{rel} includes {to}")
                ma, mb = module_of(rel), module_of(to)
                if ma != mb:
                    module_graph.setdefault(ma, set()).add(mb)
                    why.setdefault((ma, mb), f"{rel} includes {to}")
                a, b = folder_of(rel), folder_of(to)
                if a != b:
                    folder_graph.setdefault(a, set()).add(b)
                    why.setdefault((a, b), f"{rel} includes {to}")
    found = [("folders in a circle", folder_graph),
             ("modules in a circle (a header and its source file are one)", module_graph),
             ("files in a circle", file_graph)]
    bad = False
    for title, graph in found:
        for part in circles(graph):
            bad = True
            print(f"{title}: " + ", ".join(part))
            for a in part:
                for b in part:
                    if (a, b) in why:
                        print(f"  {a} -> {b}: {why[(a, b)]}")
    if bad:
        return 1
    # Layers: a folder's is one more than the highest it includes.
    layer = {}

    def height(v):
        if v not in layer:
            layer[v] = 1 + max((height(w) for w in folder_graph.get(v, ())), default=-1)
        return layer[v]

    folders = sorted({folder_of(f) for f in files})
    for v in folders:
        height(v)
    modules = {module_of(f) for f in files}
    print(f"check_layers: {len(files)} files, {len(modules)} modules in {len(folders)} folders, "
          "no circle; folders from the top:")
    for h in sorted(set(layer.values()), reverse=True):
        print(f"  {h}: " + ", ".join(v for v in folders if layer[v] == h))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
