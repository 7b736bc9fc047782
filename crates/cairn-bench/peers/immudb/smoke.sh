#!/usr/bin/env bash
# Smoke test of the immudb peer: builds it, pipes short SmallBank streams
# through it (1 and 4 clients with immediate verification, 4 clients deferred
# and unverified, 4 clients immediate with an audit every 50 transactions),
# checks each result JSON and the DUMP, prints the rates; then three STOREs
# (10k, 20k, 40k records) and 200 ranges of 100 keys in each verify mode; and
# checks that a malformed line exits with code 2.
#
#   crates/cairn-bench/peers/immudb/smoke.sh [TRANSACTIONS]   (default 400)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ntx="${1:-400}"
accounts=1000
tmp="$(mktemp -d "${TMPDIR:-/tmp}/cairn-immudb-smoke.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

"$here/build.sh" "$tmp/bin"
peer="$tmp/bin/cairn-immudb-peer"

# gen DIR CLIENTS VERIFY DUMP AUDIT_BLOCK: a seeded SmallBank stream on stdout.
gen() {
    python3 - "$1" "$2" "$3" "$4" "$accounts" "$ntx" "$5" <<'PY'
import json, random, sys
d, clients, verify, dump, accounts, ntx = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
audit = int(sys.argv[7])
r = random.Random(46)
print(json.dumps({"dir": d, "accounts": accounts, "clients": clients, "verify": verify,
                  "deferred_delay_ms": 20, "synced": True, "audit_block": audit}))
print("LOAD")
types = ["Balance", "DepositChecking", "TransactSavings", "Amalgamate", "WriteCheck", "SendPayment"]
for i in range(ntx):
    t = r.choice(types)
    a = r.randrange(accounts)
    b = r.randrange(accounts) if t in ("Amalgamate", "SendPayment") else 0
    amount = {"Balance": 0, "Amalgamate": 0, "DepositChecking": r.randint(1, 100),
              "TransactSavings": r.randint(-200, 200), "WriteCheck": r.randint(1, 200),
              "SendPayment": r.randint(1, 100)}[t]
    print(f"T {i % clients} {i} {t} {a} {b} {amount}")
print(f"DUMP {dump}")
print("END")
PY
}

# check OUT VERIFY DUMP AUDIT_BLOCK: validates the replies, prints the rate.
check() {
    python3 - "$1" "$2" "$3" "$accounts" "$ntx" "$4" <<'PY'
import json, sys
out, verify, dump, accounts, ntx = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
audit = int(sys.argv[6])
replies = [json.loads(l) for l in open(out)]
events = [r["event"] for r in replies]
assert events == ["loaded", "dumped", "result"], events
res = replies[2]
assert res["transactions"] == ntx, res["transactions"]
assert res["committed"] + res["aborted"] == ntx
assert res["verify"] == verify and res["sync"].startswith("synced")
assert set(res["per_type"]) <= {"Balance", "DepositChecking", "TransactSavings", "Amalgamate", "WriteCheck", "SendPayment"}
assert sum(t["count"] for t in res["per_type"].values()) == ntx
ids = [e[2] for e in res["log"]]
assert ids == sorted(ids) and len(set(ids)) == len(ids), "log tx ids not increasing"
if verify == "none":
    assert res["verified_reads"] == 0 and res["proof_bytes"] == 0
else:
    assert res["verified_reads"] > 0 and res["verified_writes"] >= len(res["log"]) and res["proof_bytes"] > 0
if verify == "deferred":
    assert res["deferred"]["batches"] > 0
rows = [l.split() for l in open(dump)]
assert len(rows) == accounts and [int(r[0]) for r in rows] == list(range(accounts))
if audit:
    a, f = res["audit"], res["full_audit"]
    assert a["blocks"] > 0 and f["txs"] == res["last_tx_id"], (a, f)
else:
    assert res["audit"] is None and res["full_audit"] is None
print(f"smoke: verify={verify:9s} clients={res['clients']}: {res['tx_per_second']:.0f} tx/s, "
      f"{res['committed']} committed, {res['aborted']} aborted, {res['conflict_retries']} retries, "
      f"{res['proof_bytes_per_verified_read']:.0f} proof bytes/read, {res['disk_bytes']} bytes on disk")
if audit:
    print(f"smoke:   audit every {a['block']}: {a['blocks']} blocks, {a['txs']} txs, block p50 "
          f"{a['latency_ms_p50']:.1f} ms, p99 {a['latency_ms_p99']:.1f} ms; full audit of {f['txs']} txs "
          f"({f['entries']} entries) in {f['seconds']:.3f} s")
PY
}

for spec in "1 immediate 0" "4 immediate 0" "4 deferred 0" "4 none 0" "4 immediate 50"; do
    set -- $spec
    run="$tmp/run-$1-$2-$3"
    mkdir -p "$run"
    gen "$run/db" "$1" "$2" "$run/dump" "$3" > "$run/in"
    if ! "$peer" < "$run/in" > "$run/out" 2> "$run/err"; then
        echo "smoke: FAILED: peer exited non-zero ($spec):" >&2
        cat "$run/out" >&2
        tail -20 "$run/err" >&2
        exit 1
    fi
    check "$run/out" "$2" "$run/dump" "$3"
done

# Storage growth: 10k, 20k, 40k records, synced, 1,000 per transaction.
run="$tmp/store"
mkdir -p "$run"
printf '{"dir": "%s", "accounts": 0, "clients": 1, "verify": "none"}\nSTORE 10000 1000\nSTORE 10000 1000\nSTORE 20000 1000\nEND\n' \
    "$run/db" | "$peer" > "$run/out" 2> "$run/err" || { echo "smoke: FAILED: STORE" >&2; cat "$run/out" >&2; exit 1; }
python3 - "$run/out" <<'PY'
import json, sys
replies = [json.loads(l) for l in open(sys.argv[1])]
assert [r["event"] for r in replies] == ["stored"] * 3 + ["result"], replies
last = 0
for r, n in zip(replies, [10000, 20000, 40000]):
    assert r["records"] == n and r["disk_bytes"] > last and sum(r["disk_split"].values()) == r["disk_bytes"], r
    last = r["disk_bytes"]
    split = ", ".join(f"{k} {v / n:.1f}" for k, v in sorted(r["disk_split"].items()) if v >= n)
    print(f"smoke: STORE {n} records: {r['disk_bytes'] / n:.0f} bytes/record ({split}), {r['seconds']:.2f} s")
PY

# Ranges: 20,000 keys, 200 ranges of 100 keys, 4 clients, each verify mode.
for verify in immediate deferred none; do
    run="$tmp/range-$verify"
    mkdir -p "$run"
    python3 - "$run/db" "$verify" > "$run/in" <<'PY'
import json, random, sys
r = random.Random(46)
print(json.dumps({"dir": sys.argv[1], "accounts": 0, "clients": 4, "verify": sys.argv[2], "deferred_delay_ms": 20}))
print("RLOAD 20000")
for i in range(200):
    print(f"R {i % 4} {i} {r.randrange(20000 - 100)} 100")
print("END")
PY
    "$peer" < "$run/in" > "$run/out" 2> "$run/err" || { echo "smoke: FAILED: ranges ($verify)" >&2; cat "$run/out" >&2; exit 1; }
    python3 - "$run/out" "$verify" <<'PY'
import json, sys
replies = [json.loads(l) for l in open(sys.argv[1])]
verify = sys.argv[2]
assert [r["event"] for r in replies] == ["rloaded", "result"], replies
res = replies[1]
assert res["transactions"] == 200 and res["entries_read"] == 20000, res
assert res["verified_reads"] == (0 if verify == "none" else 20000), res
t = res["per_type"]["Range"]
print(f"smoke: ranges verify={verify:9s}: {res['tx_per_second']:.0f} ranges/s (100 keys each), p50 "
      f"{t['p50_us'] / 1000:.1f} ms, p99 {t['p99_us'] / 1000:.1f} ms, "
      f"{res['proof_bytes_per_verified_read']:.0f} proof bytes/entry")
PY
done

# A malformed line must end the run with exit code 2 and an error reply.
bad="$tmp/bad"
mkdir -p "$bad"
set +e
printf '{"dir": "%s", "accounts": 10, "clients": 1, "verify": "none"}\nLOAD\nT 0 0 Withdraw 1 0 5\nEND\n' "$bad/db" \
    | "$peer" > "$bad/out" 2> "$bad/err"
code=$?
set -e
if [ "$code" -ne 2 ] || ! grep -q '"event":"error"' "$bad/out"; then
    echo "smoke: FAILED: malformed line gave exit $code and: $(cat "$bad/out")" >&2
    exit 1
fi
echo "smoke: malformed line -> exit 2: ok"
echo "smoke: ok"
