import sys, collections
lo, hi, tid = float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
c = collections.Counter(); n=0
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) < 5: p += ['']*(5-len(p))
    t, th, st, w, sc = float(p[0]), p[1], p[2], p[3], p[4]
    if not (lo <= t <= hi) or (tid != 'all' and th != tid): continue
    n += 1
    if sc.startswith('sys87') or sc.startswith('sys77'): k = 'file removal (unlink/truncate)'
    elif w == 'futex_do_wait': k = 'waiting for the other thread (futex)'
    elif sc.startswith('sys426') or w in ('io_cqring_wait',): 
        k = 'io_uring: device queue full' if w == 'blk_mq_get_tag' else 'io_uring: waiting for reads'
    elif w == 'reclaim_throttle': k = 'memory reclaim (cgroup)'
    elif sc.startswith('sys17') or sc.startswith('sys0'): k = 'buffered read (pread)'
    elif sc.startswith('sys1') or sc.startswith('sys20'): k = 'buffered write'
    elif st == 'R' or (w in ('0','') and sc=='running'): k = 'on CPU'
    else: k = f'other ({st} {w} {sc})'
    c[k] += 1
for k, v in c.most_common(): print(f'{v*100/n:5.1f}%  {v:4d}  {k}')
print('samples', n)
