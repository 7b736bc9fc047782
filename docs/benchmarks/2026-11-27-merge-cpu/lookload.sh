#!/bin/bash
# lookup-only on the 100M table alone, then with fio sequential I/O beside it like a merge's (reads R, writes W), then alone
bin=/work/bench/lk/cb-bloom; d=/work/bench/fioload; mkdir -p $d
one() {
  sync; echo 3 > /proc/sys/vm/drop_caches
  $bin utxo run --db /work/bench/100m --mode lookup-only --batches 3000 --warmup-batches 500 --memory-limit 1G > /tmp/ll.tmp 2>&1
  echo "$1 $(grep -E '^ops/s|^p50 batch|^CPU' /tmp/ll.tmp | tr -s ' ' | tr '\n' ' ')"
}
one alone
one alone
fio --name=sw --directory=$d --size=4g --bs=1m --rw=write --direct=1 --ioengine=io_uring --iodepth=4 --rate=${W:-90m} --runtime=200 --time_based=1 --name=sr --directory=$d --size=4g --bs=1m --rw=read --direct=1 --ioengine=io_uring --iodepth=4 --rate=${R:-70m} --runtime=200 --time_based=1 --output=/tmp/fioload.json > /dev/null 2>&1 &
sleep 8
one "with fio"
one "with fio"
kill %1 2>/dev/null; wait
one alone
rm -rf $d
