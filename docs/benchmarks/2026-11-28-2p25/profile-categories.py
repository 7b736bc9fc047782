"""Sorts `perf script -F time,ip,sym` samples taken between two times into categories.

Usage: profile-categories.py SCRIPT_OUTPUT FROM TO            (samples by category)
       profile-categories.py SCRIPT_OUTPUT FROM TO KERNEL_SYM (samples whose kernel call chain
                                                               holds KERNEL_SYM, by the user
                                                               functions they came from)
A kernel sample goes by the syscall or fault on its call chain, a user sample by its function.
"""
import collections
import re
import sys


def read_samples(path):
    samples, cur = [], None
    for line in open(path):
        if re.match(r'^\d+\.\d+:', line):
            if cur:
                samples.append(cur)
            cur = [float(line.split(':')[0]), []]
        elif line.strip() and cur is not None:
            parts = line.split(None, 1)
            cur[1].append((parts[0], parts[1].strip() if len(parts) > 1 else ''))
    if cur:
        samples.append(cur)
    return samples


def classify(frames):
    if not frames:
        return 'unknown'
    ip, sym = frames[0]
    if ip.startswith('ffffffff'):
        j = ' '.join(s for _, s in frames)
        if 'io_uring' in j: return 'kernel: io_uring reads (trie pages, lookups)'
        if '__x64_sys_pread64' in j: return 'kernel: pread (buffered reads: cleaning scans, runs)'
        if 'exc_page_fault' in j: return 'kernel: page faults (fresh memory)'
        if 'sys_writev' in j or 'sys_write' in j or 'sys_pwrite' in j: return 'kernel: writes (page log, runs, WAL)'
        if 'unlink' in j or 'truncate' in j: return 'kernel: file removal'
        if 'fsync' in j or 'fdatasync' in j: return 'kernel: fsync'
        if 'munmap' in j or 'madvise' in j or 'mmap' in j: return 'kernel: mmap/munmap'
        if 'futex' in j or 'schedule' in j: return 'kernel: futex/scheduling'
        if 'sysvec' in j or 'irq' in j.lower() or 'softirq' in j: return 'kernel: interrupts'
        m = re.search(r'__x64_sys_(\w+)', j)
        if m: return 'kernel: sys_' + m.group(1)
        return 'kernel: other'
    s = sym
    if 'sha2::' in s or 'HashKind::hash' in s or 'blake3' in s: return 'user: hashing'
    if 'scan_blocks' in s or 'relocate' in s or 'scan_range' in s: return 'user: cleaning (scan, relocate)'
    if 'crc32c' in s: return 'user: crc32c'
    if re.search(r'malloc|free|realloc|_int_|unlink_chunk|consolidate|tcache', s): return 'user: allocator'
    if 'memmove' in s or 'memcpy' in s or 'memset' in s: return 'user: memcpy/memset'
    if 'memcmp' in s or 'bcmp' in s: return 'user: memcmp'
    if 'cairn::trie::' in s: return 'user: trie (walk, rehash, encode/decode pages)'
    if 'imbl::' in s or 'archery' in s or 'hashbrown' in s: return 'user: maps (imbl, hashbrown)'
    if re.search(r'cairn::(run|merge|index|lookup|write_buffer|kmerge|bloom|table|flush|schedule|wal|durable|sorted)', s):
        return 'user: LSM table (lookups, merges, log)'
    if 'cairn' in s: return 'user: cairn other'
    return 'user: other (' + s[:40] + ')'


def main():
    lo, hi = float(sys.argv[2]), float(sys.argv[3])
    key = sys.argv[4] if len(sys.argv) > 4 else None
    counts, n = collections.Counter(), 0
    for t, frames in read_samples(sys.argv[1]):
        if not lo <= t <= hi:
            continue
        if key is None:
            n += 1
            counts[classify(frames)] += 1
        elif any(key in s for _, s in frames):
            n += 1
            user = [s for ip, s in frames if not ip.startswith('ffffffff')]
            counts[' <- '.join(u[:50] for u in user[:2])] += 1
    for k, v in counts.most_common(25 if key is None else 15):
        print(f'{v * 100 / n:5.1f}%  {k}' if key is None else f'{v} {k}')
    print('samples', n)


main()
