import csv,sys,bisect
csvf,statf,logf=sys.argv[1:4]
rows=list(csv.DictReader(open(csvf)))
b=sorted(float(r['batch_ms']) for r in rows); p50=b[len(b)//2]
st=[]
for l in open(statf):
    p=l.split(); st.append((float(p[0]),[int(x) for x in p[1:]]))
ts=[s[0] for s in st]
diag=[]
for l in open(logf):
    if l.startswith('DIAG'):
        p=l.split(); diag.append((float(p[1]),' '.join(p[2:])))
t0=float(rows[0]['start_unix_s']); t1=float(rows[-1]['start_unix_s'])
def dev(a,z):
    i=max(0,bisect.bisect_left(ts,a)-1); j=min(len(st)-1,bisect.bisect_right(ts,z))
    d=[y-x for x,y in zip(st[i][1],st[j][1])]
    return 'dt %.2fs rd %d io %.1fMB wr %d io %.1fMB disc %d io %.1fMB flush %d' % (ts[j]-ts[i], d[0], d[2]/2048, d[4], d[6]/2048, d[11], d[13]/2048, d[15])
print('window', dev(t0,t1), 'p50', p50)
top=sorted(rows,key=lambda r:-float(r['batch_ms']))[:8]
for r in top:
    s=float(r['start_unix_s']); ms=float(r['batch_ms'])
    print('batch',r['batch'],'ms',ms,'look',r['lookup_ms'],'upd',r['update_ms'],'|',dev(s,s+ms/1e3))
    for t,w in diag:
        if s-0.005<=t<=s+ms/1e3+0.005: print('    %.1fms'%((t-s)*1e3),w)
