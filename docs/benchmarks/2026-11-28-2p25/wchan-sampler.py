import os, sys, time, collections
pid = int(sys.argv[1]); dur = float(sys.argv[2]); out = sys.argv[3]
hz = 20
end = time.time() + dur
f = open(out, 'w')
fdcache = {}
def fdpath(fd):
    try:
        p = os.readlink(f'/proc/{pid}/fd/{fd}')
    except OSError:
        return '?'
    if p.endswith('.pages'): return 'pages'
    if '/wal' in p or p.endswith('.log') or 'log' in os.path.basename(p): return 'log:' + os.path.basename(p)
    return os.path.basename(p)
while time.time() < end:
    t = time.time()
    try:
        tids = os.listdir(f'/proc/{pid}/task')
    except OSError:
        break
    for tid in tids:
        try:
            st = open(f'/proc/{pid}/task/{tid}/stat').read().rsplit(')',1)[1].split()[0]
            w = open(f'/proc/{pid}/task/{tid}/wchan').read().strip()
            sc = open(f'/proc/{pid}/task/{tid}/syscall').read().split()
        except OSError:
            continue
        what = ''
        if sc and sc[0] not in ('running', '-1'):
            nr = int(sc[0]);
            what = f'sys{nr}'
            if nr in (0,1,17,18,19,20,295,296,74,75,221) and len(sc) > 1:
                what += ':' + fdpath(int(sc[1],16))
        elif sc: what = sc[0]
        f.write(f'{t:.2f} {tid} {st} {w} {what}\n')
    time.sleep(max(0, 1/hz - (time.time()-t)))
