#!/usr/bin/env bash
# Smoke test of the immudb peer: builds it, pipes short SmallBank streams
# through it (1 and 4 clients with immediate verification, 4 clients deferred
# and unverified), checks each result JSON and the DUMP, prints the rates, and
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

# gen DIR CLIENTS VERIFY DUMP: a seeded SmallBank stream on stdout.
gen() {
    python3 - "$1" "$2" "$3" "$4" "$accounts" "$ntx" <<'PY'
import json, random, sys
d, clients, verify, dump, accounts, ntx = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
r = random.Random(46)
print(json.dumps({"dir": d, "accounts": accounts, "clients": clients, "verify": verify,
                  "deferred_delay_ms": 20, "synced": True}))
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

# check OUT VERIFY DUMP: validates the replies, prints the rate.
check() {
    python3 - "$1" "$2" "$3" "$accounts" "$ntx" <<'PY'
import json, sys
out, verify, dump, accounts, ntx = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
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
print(f"smoke: verify={verify:9s} clients={res['clients']}: {res['tx_per_second']:.0f} tx/s, "
      f"{res['committed']} committed, {res['aborted']} aborted, {res['conflict_retries']} retries, "
      f"{res['proof_bytes_per_verified_read']:.0f} proof bytes/read, {res['disk_bytes']} bytes on disk")
PY
}

for spec in "1 immediate" "4 immediate" "4 deferred" "4 none"; do
    set -- $spec
    run="$tmp/run-$1-$2"
    mkdir -p "$run"
    gen "$run/db" "$1" "$2" "$run/dump" > "$run/in"
    if ! "$peer" < "$run/in" > "$run/out" 2> "$run/err"; then
        echo "smoke: FAILED: peer exited non-zero ($spec):" >&2
        cat "$run/out" >&2
        tail -20 "$run/err" >&2
        exit 1
    fi
    check "$run/out" "$2" "$run/dump"
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
