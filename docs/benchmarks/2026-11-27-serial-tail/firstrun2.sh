#!/bin/bash
# firstrun2.sh BIN TAG: 100M setup, then 3 serial runs right after, a 5-minute pause, 3 more
BIN=$1; TAG=$2
DB=/work/bench/fr-db
rm -rf $DB; mkdir -p $DB
$BIN utxo setup --engine cairn --db $DB --entries 100000000 --json /work/bench/fr-$TAG-setup.json --filters-for-hits true > /work/bench/fr-$TAG-setup.log 2>&1
date +%s.%N > /work/bench/fr-$TAG-setupend.txt
( while true; do echo "$(date +%s.%N) $(cat /sys/block/vda/stat)"; sleep 0.1; done ) > /work/bench/fr-$TAG-stat.txt &
SP=$!
for i in 1 2 3 p 4 5 6; do
  if [ $i = p ]; then sleep 300; continue; fi
  sync; echo 3 > /proc/sys/vm/drop_caches
  $BIN utxo run --engine cairn --db $DB --mode serial --batches 3000 --warmup-batches 500 --check --background-merges true --filters-for-hits true --memory-limit 1G --batch-log /work/bench/fr-$TAG-r$i.csv --json /work/bench/fr-$TAG-r$i.json > /work/bench/fr-$TAG-r$i.log 2>&1
  echo "r$i $(date +%T) $(python3 /work/bench/slow.py /work/bench/fr-$TAG-r$i.csv) max $(python3 -c "import csv; print(max(float(r['batch_ms']) for r in csv.DictReader(open('/work/bench/fr-$TAG-r$i.csv'))))")"
done
kill $SP
