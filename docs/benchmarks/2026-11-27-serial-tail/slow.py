import csv,sys
for f in sys.argv[1:]:
    rows=list(csv.DictReader(open(f)))
    b=[float(r['batch_ms']) for r in rows]
    s=sorted(b); p50=s[len(s)//2]; p999=s[int(len(s)*.999)]
    slow=[(int(r['batch']),round(float(r['lookup_ms'])),round(float(r['update_ms']))) for r in rows if float(r['batch_ms'])>3*p50]
    print(f, 'p50 %.1f p99.9 %.1f ratio %.2f'%(p50,p999,p999/p50), len(slow), slow[:40])
