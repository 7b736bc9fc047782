# A probe of buffered writes under a 1 GiB memory cgroup (see ../README.md, "Page format 3"): not part of cairn-bench.
import os, time, sys
mode = sys.argv[1]; n=int(sys.argv[2])
A = os.open("a.dat", os.O_CREAT|os.O_WRONLY|os.O_TRUNC)
B = os.open("b.dat", os.O_CREAT|os.O_WRONLY|os.O_TRUNC)
if mode == "falloc":
    os.posix_fallocate(A, 0, 47*(n+1)<<20)
if mode == "keep":
    import ctypes
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    r = libc.fallocate(A, 1, ctypes.c_long(0), ctypes.c_long(47*(n+1)<<20))  # FALLOC_FL_KEEP_SIZE
    assert r == 0
buf = os.urandom(47<<20)
wal = os.urandom(1<<20)
run = os.urandom(2<<20)
res = []
off = 0
for i in range(n):
    t0 = time.time()
    os.pwrite(A, buf, off); off += len(buf)
    t1 = time.time()
    time.sleep(0.13)
    t2 = time.time()
    C = os.open("c%d.dat" % i, os.O_CREAT|os.O_WRONLY|os.O_TRUNC)
    os.write(C, run); os.close(C)
    t3 = time.time()
    os.write(B, wal)
    os.fdatasync(B)
    t4 = time.time()
    res.append((round((t1-t0)*1e3), round((t3-t2)*1e3), round((t4-t3)*1e3)))
print(mode, res)
os.close(A); os.close(B); os.unlink("a.dat"); os.unlink("b.dat")
for i in range(n): os.unlink("c%d.dat" % i)
