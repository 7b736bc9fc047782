#!/bin/bash
# CPU A/B on a tmpfs copy of a 10M table: each run from a fresh copy; usage: cpuab.sh MODE (A_BIN, B_BIN)
mode=$1
for v in A B A B A B; do
  rm -rf /dev/shm/r; cp -a /dev/shm/m /dev/shm/r
  if [ $v = B ]; then bin=$B_BIN; else bin=$A_BIN; fi
  /usr/bin/time -f "%U %S" -o /tmp/cpuab.time $bin utxo run --db /dev/shm/r --cached --mode $mode --batches ${BATCHES:-5000} --warmup-batches 0 --background-merges ${BG:-false} > /tmp/cpuab.tmp 2>&1
  echo "$v $(grep -E '^ops/s|^CPU' /tmp/cpuab.tmp | tr -s ' ' | tr '\n' ' ') user/sys $(cat /tmp/cpuab.time)"
done
