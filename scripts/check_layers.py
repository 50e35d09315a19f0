#!/usr/bin/env python3
"""check_layers.py - the include graph of src/ against the layers in docs/ARCHITECTURE.md.

The document's ```layers block lists the folders of src/ from the top layer down, one
layer per line (folders on one line are siblings). A file may include headers of its own
folder and of layers below its own; anything else (a lower layer including a higher one,
a sibling including a sibling) is a violation. Project headers are named by their folder
("base/budget.h"); a relative or bare project include is a violation too, because the
check could not see which layer it reaches. Every folder of src/ must appear in the
table, so the document cannot fall behind the tree.

Usage: check_layers.py [REPO_ROOT]   (exit 0: clean; 1: violations, listed; 2: bad table)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_layers(doc_path):
    text = open(doc_path, encoding="utf-8").read()
    m = re.search(r"```layers\n(.*?)```", text, re.S)
    if not m:
        raise ValueError("%s has no ```layers block" % doc_path)
    rows = [line.split() for line in m.group(1).splitlines() if line.strip()]
    rank = {}
    for i, row in enumerate(rows):
        for folder in row:
            if folder in rank:
                raise ValueError("%s: folder %s listed twice" % (doc_path, folder))
            rank[folder] = len(rows) - i  # the bottom layer has rank 1
    return rank


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    src = os.path.join(root, "src")
    try:
        rank = read_layers(os.path.join(root, "docs", "ARCHITECTURE.md"))
    except (OSError, ValueError) as e:
        print("check_layers: %s" % e)
        return 2
    problems = []
    folders = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    for d in folders:
        if d not in rank:
            problems.append("src/%s/ is not in docs/ARCHITECTURE.md's layer table" % d)
    for d in folders:
        for dirpath, _, files in os.walk(os.path.join(src, d)):
            for name in sorted(files):
                if not name.endswith((".c", ".h", ".inl", ".inc", ".cu")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                for no, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    if inc == "tierllm.h":  # the public API, visible to every layer
                        continue
                    target = inc.split("/")[0]
                    if "/" not in inc or target not in rank:
                        problems.append("%s:%d: include \"%s\" is not a project header "
                                        "named by its folder" % (rel, no, inc))
                        continue
                    if not os.path.exists(os.path.join(src, inc)):
                        problems.append("%s:%d: include \"%s\" does not exist" % (rel, no, inc))
                        continue
                    if target != d and rank.get(d, 0) <= rank[target]:
                        problems.append("%s:%d: %s/ includes %s, a layer %s it" % (
                            rel, no, d, inc,
                            "beside" if rank.get(d, 0) == rank[target] else "above"))
    for p in problems:
        print(p)
    if problems:
        print("check_layers: %d violation(s) of docs/ARCHITECTURE.md" % len(problems))
        return 1
    print("check_layers: %d folders, includes follow the layers" % len(folders))
    return 0


if __name__ == "__main__":
    sys.exit(main())
