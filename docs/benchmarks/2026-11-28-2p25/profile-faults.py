import sys, collections, re
lo, hi, key = float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
samples = []; cur = None
for line in open(sys.argv[1]):
    if re.match(r'^\d+\.\d+:', line):
        if cur: samples.append(cur)
        cur = [float(line.split(':')[0]), []]
    elif line.strip() and cur is not None:
        parts = line.split(None, 1)
        cur[1].append((parts[0], parts[1].strip() if len(parts) > 1 else ''))
if cur: samples.append(cur)
c = collections.Counter(); n=0
for t, fr in samples:
    if not (lo <= t <= hi): continue
    syms = [s for _, s in fr]
    if not any(key in s for s in syms): continue
    n += 1
    user = [s for ip, s in fr if not ip.startswith('ffffffff')]
    c[' <- '.join(u[:50] for u in user[:2])] += 1
for k, v in c.most_common(15): print(v, k)
print('n', n)
