#!/usr/bin/env python3
"""Generates a realistic leftover tree for the remover benchmark.

Shaped like what test suites leave in /tmp: many top-level sandboxes
(`app-<n>-<pid>`), each a small project with a few nested directories,
source files, a lease record, build artifacts of varied sizes, the odd
symlink and hard link. Deterministic for a given seed.

usage: gen_tree.py DIR [--dirs 5000] [--files 60000] [--seed 1]
"""

import argparse
import os
import random


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--dirs", type=int, default=5000, help="top-level directories")
    p.add_argument("--files", type=int, default=60000, help="files in all")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    rng = random.Random(args.seed)
    os.makedirs(args.dir, exist_ok=True)
    subdirs = ["src", "src/module", "target", "target/debug", "target/debug/deps",
               "target/debug/build", "target/debug/.fingerprint", "tests", "data"]
    blobs = {size: os.urandom(size) for size in (0, 64, 512, 2048, 8192, 32768)}
    sizes = list(blobs)
    weights = [5, 30, 30, 20, 10, 5]

    made = 0
    for top in range(args.dirs):
        root = os.path.join(args.dir, f"app-{top % 7}-{100000 + top}")
        os.mkdir(root)
        dirs = [root]
        for sub in rng.sample(subdirs, rng.randint(2, len(subdirs))):
            path = os.path.join(root, sub)
            os.makedirs(path, exist_ok=True)
            dirs.append(path)
        # Spread the files evenly over the top-level directories.
        want = (args.files * (top + 1)) // args.dirs - made
        first = None
        for i in range(want):
            d = rng.choice(dirs)
            path = os.path.join(d, f"f{i}.{rng.choice(['rs', 'o', 'rlib', 'json', 'txt'])}")
            kind = rng.random()
            if kind < 0.03 and first is not None:
                os.link(first, path)
            elif kind < 0.06:
                os.symlink("../../../../etc/passwd", path)
            else:
                size = rng.choices(sizes, weights)[0]
                with open(path, "wb") as f:
                    f.write(blobs[size])
                first = first or path
        made += want


if __name__ == "__main__":
    main()
