#!/usr/bin/env python3
"""Table of an auth A/B/C directory: per run, per variant medians, and ratios to A."""
import json, sys, glob, os, statistics as st
d = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(d, '*.json')), key=lambda p: int(''.join(c for c in os.path.basename(p) if c.isdigit()) or 0)):
    name = os.path.basename(f)[:-5]
    r = json.load(open(f))
    r = r[0] if isinstance(r, list) else r
    c = {(x['keys'], x['warm_up']): x for x in r['commits']}
    row = {
        '1k': c[(1000, False)]['total_us_per_key'], '1k+w': c[(1000, True)]['total_us_per_key'],
        '10k': c[(10000, False)]['total_us_per_key'], '10k+w': c[(10000, True)]['total_us_per_key'],
        '10k+w warm ms': c[(10000, True)]['breakdown']['warm_up_ms'],
        'KiB rd 10k': c[(10000, False)]['bytes_read'] / 1024, 'KiB rd 10k+w': c[(10000, True)]['bytes_read'] / 1024,
        'utxo': r['utxo']['ops_per_sec'], 'utxo p50': r['utxo']['p50_ms'], 'utxo warm ms': r['utxo']['breakdown']['warm_up_ms'],
        'utxo KiB rd': r['utxo']['bytes_read'] / 1024,
        'proofs/s': r['proofs']['proofs_per_sec'],
    }
    rows[name] = row
cols = list(next(iter(rows.values())).keys())
print('| run | ' + ' | '.join(cols) + ' |')
print('|---|' + '--:|' * len(cols))
for n, row in rows.items():
    print(f'| {n} | ' + ' | '.join(f'{row[k]:,.1f}' if row[k] < 1000 else f'{row[k]:,.0f}' for k in cols) + ' |')
vs = sorted({n[0] for n in rows})
med = {v: {k: st.median([row[k] for n, row in rows.items() if n[0] == v]) for k in cols} for v in vs}
print()
print('| median | ' + ' | '.join(cols) + ' |')
print('|---|' + '--:|' * len(cols))
for v in vs:
    print(f'| {v} | ' + ' | '.join(f'{med[v][k]:,.1f}' if med[v][k] < 1000 else f'{med[v][k]:,.0f}' for k in cols) + ' |')
for v in vs[1:]:
    print(f'| {v}/A | ' + ' | '.join(f'{med[v][k]/med["A"][k]:.3f}' for k in cols) + ' |')
