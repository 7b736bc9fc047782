#!/usr/bin/env python3
"""Medians per mode and version of the A/B records in the directories given (ops/s, CPU
microseconds per operation, p99.9 batch ms, peak RSS) and B/A ratios of the medians."""
import json, os, statistics, sys

for d in sys.argv[1:]:
    runs = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith('.json') or f.startswith(('fio', 'setup')):
            continue
        mode, version = f.rsplit('-', 2)[0], f.rsplit('-', 2)[1]
        r = json.load(open(os.path.join(d, f)))
        ops = r['ops_per_sec'] * r['seconds']
        runs.setdefault((mode, version), []).append(
            (r['ops_per_sec'], r['cpu_seconds'] / ops * 1e6, r['p999_batch_ms'],
             r['peak_rss_bytes'] / 2**20, r['mismatches']))
    print(f'## {d}\n')
    print('| mode | A ops/s (runs) | B ops/s (runs) | B/A ops/s | A / B CPU µs per op | B/A CPU | A / B p99.9 ms | A / B peak RSS MiB | mismatches |')
    print('|---|---|---|--:|--:|--:|--:|--:|--:|')
    for mode in sorted({m for m, _ in runs}):
        a, b = runs.get((mode, 'A'), []), runs.get((mode, 'B'), [])
        med = lambda rs, i: statistics.median(x[i] for x in rs)
        fmt = lambda rs: ' / '.join(f'{x[0]:,.0f}' for x in rs)
        print(f'| {mode} | {fmt(a)} | {fmt(b)} | {med(b,0)/med(a,0):.3f} | '
              f'{med(a,1):.2f} / {med(b,1):.2f} | {med(b,1)/med(a,1):.3f} | '
              f'{med(a,2):.1f} / {med(b,2):.1f} | {med(a,3):.1f} / {med(b,3):.1f} | '
              f'{sum(x[4] for x in a + b)} |')
    print()
