package main

// Tests of the server mode against a real immudb v1.11.1 server, started from
// the binary named by IMMUDB_SERVER_BIN (build it with build-server.sh); they
// are skipped when it is not set. The config checks need no server.

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codenotary/immudb/pkg/api/schema"
)

// startImmudbServer starts IMMUDB_SERVER_BIN on a free loopback port in a
// temporary directory and returns "127.0.0.1:port" once it accepts
// connections; the server is killed at the end of the test.
func startImmudbServer(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("IMMUDB_SERVER_BIN")
	if bin == "" {
		t.Skip("IMMUDB_SERVER_BIN is not set: build immudb v1.11.1 with build-server.sh OUTDIR and set IMMUDB_SERVER_BIN=OUTDIR/immudb")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("IMMUDB_SERVER_BIN=%s: %v", bin, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--dir", filepath.Join(dir, "data"), "--address", "127.0.0.1", "--port", fmt.Sprint(port),
		"--pgsql-server=false", "--metrics-server=false", "--web-server=false", "--max-sessions", "64")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("immudb server at %s did not start: %v (log in %s)", addr, err, logf.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serverInput is a SmallBank protocol stream in server mode.
func serverInput(cfg map[string]any, work []genTx, tail ...string) string {
	var in strings.Builder
	cb, _ := json.Marshal(cfg)
	in.Write(cb)
	in.WriteString("\nLOAD\n")
	for _, g := range work {
		in.WriteString(g.line() + "\n")
	}
	for _, l := range tail {
		in.WriteString(l + "\n")
	}
	return in.String()
}

// TestServerSmallBank runs 200 SmallBank transactions on 20 accounts (so that
// preconditions fail and transactions rerun) with 4 clients against a real
// immudb server, immediate on defaultdb and none on a database the peer
// creates, and checks the dump against the model replay of the log; then
// tampered VerifiableGet and VerifiableSet answers (exit 3) and the commands
// the server mode refuses (exit 2).
func TestServerSmallBank(t *testing.T) {
	addr := startImmudbServer(t)
	const accounts, clients, n = 20, 4, 200
	for _, tc := range []struct{ mode, db string }{{"immediate", "defaultdb"}, {"none", "cairntest"}} {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			dumpPath := filepath.Join(dir, "dump.txt")
			work := genWorkload(46, accounts, clients, n)
			cfg := map[string]any{"dir": filepath.Join(dir, "clients"), "accounts": accounts, "clients": clients,
				"verify": tc.mode, "server": addr, "server_database": tc.db}
			code, replies := runProtocol(t, serverInput(cfg, work, "DUMP "+dumpPath, "END"), true)
			if code != exitOK {
				t.Fatalf("exit code %d, replies %v", code, replies)
			}
			if len(replies) != 3 || replies[0]["event"] != "loaded" || replies[1]["event"] != "dumped" || replies[2]["event"] != "result" {
				t.Fatalf("unexpected replies: %v", replies)
			}
			res := replies[2]
			num := func(k string) int64 { return int64(res[k].(float64)) }
			log := checkAgainstModel(t, work, res, dumpPath, accounts, n)
			reads, writes := num("verified_reads"), num("verified_writes")
			if tc.mode == "none" {
				if reads != 0 || writes != 0 || num("proof_bytes") != 0 {
					t.Fatalf("verify none verified something: %v", res)
				}
			} else if reads == 0 || writes < int64(len(log)) || num("proof_bytes") == 0 {
				t.Fatalf("verify %s: counters %v", tc.mode, res)
			}
			if uint64(num("last_tx_id")) < log[len(log)-1][2] || !strings.HasPrefix(res["sync"].(string), "synced") {
				t.Fatalf("last_tx_id / sync: %v", res)
			}
			for _, sub := range []string{"client-0", fmt.Sprintf("client-%d", clients-1)} {
				if _, err := os.Stat(filepath.Join(dir, "clients", sub)); err != nil {
					t.Fatalf("client state directory: %v", err)
				}
			}
			t.Logf("%s: %.0f tx/s, %d conflict retries, %d verified reads, %d verified writes, %.0f proof bytes per read",
				tc.mode, res["tx_per_second"], num("conflict_retries"), reads, writes, res["proof_bytes_per_verified_read"])
		})
	}

	t.Run("tampered", func(t *testing.T) {
		var mu sync.Mutex
		t.Cleanup(func() { tamperForTest = nil })
		for _, target := range []string{"get inclusion", "get dual", "set entry", "set dual"} {
			n := 0
			tamperForTest = func(p any) {
				mu.Lock()
				defer mu.Unlock()
				switch p := p.(type) {
				case *schema.VerifiableEntry:
					if !strings.HasPrefix(target, "get") {
						return
					}
					if n++; n != 3 {
						return
					}
					if target == "get inclusion" {
						tamperInclusion(p.InclusionProof)
					} else {
						flip(p.VerifiableTx.DualProof.TargetBlTxAlh)
					}
				case *schema.VerifiableTx:
					if !strings.HasPrefix(target, "set") {
						return
					}
					if n++; n != 2 {
						return
					}
					if target == "set entry" {
						flip(p.Tx.Entries[0].HValue)
					} else {
						flip(p.DualProof.TargetBlTxAlh)
					}
				}
			}
			work := genWorkload(7, 10, 2, 20)
			cfg := map[string]any{"dir": filepath.Join(t.TempDir(), "clients"), "accounts": 10, "clients": 2,
				"verify": "immediate", "server": addr}
			code, replies := runProtocol(t, serverInput(cfg, work, "END"), true)
			if code != exitRejected || replies[len(replies)-1]["event"] != "error" {
				t.Fatalf("%s: exit %d, replies %v", target, code, replies)
			}
			t.Logf("%s: %v", target, replies[len(replies)-1]["message"])
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, bad := range []string{"STORE 10 10", "RLOAD 100", "R 0 0 0 1"} {
			cfg := map[string]any{"dir": filepath.Join(t.TempDir(), "clients"), "accounts": 10, "clients": 2,
				"verify": "none", "server": addr}
			code, replies := runProtocol(t, serverInput(cfg, nil, bad, "END"), true)
			if code != exitMalformed || replies[len(replies)-1]["event"] != "error" {
				t.Fatalf("%q: exit %d, replies %v", bad, code, replies)
			}
		}
	})
}

// TestServerConfigRefused checks the configs the server mode refuses (no
// server needed: they fail before connecting).
func TestServerConfigRefused(t *testing.T) {
	for _, cfg := range []string{
		`{"dir": "/tmp/x", "accounts": 10, "clients": 1, "verify": "deferred", "deferred_delay_ms": 5, "server": "127.0.0.1:3322"}`,
		`{"dir": "/tmp/x", "accounts": 10, "clients": 1, "audit_block": 10, "server": "127.0.0.1:3322"}`,
		`{"dir": "/tmp/x", "accounts": 10, "clients": 1, "server": "127.0.0.1"}`,
		`{"dir": "/tmp/x", "accounts": 10, "clients": 1, "server": "127.0.0.1:0"}`,
		`{"dir": "/tmp/x", "accounts": 10, "clients": 1, "server_dir": "/tmp/y"}`,
		`{"dir": "/tmp/x", "accounts": 10, "clients": 1, "server": "127.0.0.1:3322", "server_port": 1}`,
	} {
		code, replies := runProtocol(t, cfg+"\n", true)
		if code != exitMalformed || len(replies) != 1 || replies[0]["event"] != "error" {
			t.Fatalf("%s: exit %d, replies %v", cfg, code, replies)
		}
	}
}
