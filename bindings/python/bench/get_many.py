"""Batched lookups through Python against the same batch from Rust (issue 51's acceptance 3).

Loads N entries (16-byte keys, 32-byte values) into a durable table in batches of 100,000,
checkpoints, then times `Table.get_many` on batches of random keys (half present)
against `Table._rust_lookup_seconds`, the engine's batched lookup of the same keys timed
from Rust with no Python objects in the timed part, on the same table in the same process.
Prints both per key and their ratio (the acceptance bound is 1.5).

    python bench/get_many.py DIR [--entries 10000000] [--batch 1000] [--rounds 200]

DIR is created if missing and reused if it already holds the table (load skipped).
"""

import argparse
import os
import random
import time

import cairn


def key(i):
    return b"k%015d" % i


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--entries", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    rng = random.Random(7)
    with cairn.Session(args.dir) as s:
        t = s.table("bench")
        if t.get(key(args.entries - 1)) is None:
            start = time.perf_counter()
            step = 100_000
            for lo in range(0, args.entries, step):
                t.update_many((key(i), os.urandom(32)) for i in range(lo, min(lo + step, args.entries)))
            s.checkpoint()
            print(f"loaded {args.entries:,} entries in {time.perf_counter() - start:.1f} s")
        # Half the keys present, half absent (beyond the loaded range).
        batches = [[key(rng.randrange(args.entries * 2)) for _ in range(args.batch)]
                   for _ in range(args.rounds)]
        # Warm-up: the pages these batches touch, through both paths.
        for b in batches:
            t.get_many(b)
        # Passes over every batch, alternating the paths, each path's best pass kept: both
        # read pages the warm-up left in the caches, neither one favoured by the other.
        rust_s = py_s = float("inf")
        for _ in range(3):
            rust_s = min(rust_s, sum(t._rust_lookup_seconds(b, 1)[0] for b in batches))
            start = time.perf_counter()
            for b in batches:
                t.get_many(b)
            py_s = min(py_s, time.perf_counter() - start)
        keys = args.batch * args.rounds
        print(f"entries {args.entries:,}, batch {args.batch}, rounds {args.rounds}")
        print(f"rust   get_many: {rust_s / keys * 1e9:8.0f} ns/key")
        print(f"python get_many: {py_s / keys * 1e9:8.0f} ns/key")
        print(f"ratio python/rust: {py_s / rust_s:.2f} (bound 1.5)")


if __name__ == "__main__":
    main()
