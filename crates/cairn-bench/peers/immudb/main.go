// Command cairn-immudb-peer is the immudb peer of Cairn's LedgerBench benchmark
// (`cairn-bench ledger`, issue 46).
//
// It embeds immudb v1.11.1 (package github.com/codenotary/immudb/embedded/store),
// runs the SmallBank workload that the Rust benchmark streams to it over a pipe,
// and verifies what it reads and writes the way immudb's own client verifies
// VerifiableGet / VerifiableSet answers (inclusion proof against the
// transaction's Eh, dual proof against the client's trusted state), either at
// once ("immediate"), in batches ("deferred") or not at all ("none").
//
// The protocol (one text line per command on stdin, one JSON object per line
// on stdout, progress text on stderr) is described in README.md beside this
// file. In short:
//
//	{"dir": "...", "accounts": N, "clients": C, "verify": "immediate", ...}
//	LOAD
//	T <client> <seq> <type> <a> <b> <amount>
//	...
//	DUMP <path>        (optional)
//	END
//
// and the other workloads: STORE <count> <batch> (storage growth), RLOAD
// <keys> and R <client> <seq> <lo> <count> (range reads), and auditing while
// SmallBank runs (config "audit_block").
//
// Exit codes: 0 success, 1 an immudb or I/O error, 2 a malformed line, 3 a
// proof that did not verify.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Exit codes.
const (
	exitOK        = 0
	exitInternal  = 1
	exitMalformed = 2
	exitRejected  = 3
)

// peerError is a failure with the exit code it maps to.
type peerError struct {
	code int
	msg  string
}

// Error implements error.
func (e *peerError) Error() string { return e.msg }

// malformed builds an exit-2 error for a bad input line.
func malformed(format string, args ...any) *peerError {
	return &peerError{code: exitMalformed, msg: fmt.Sprintf(format, args...)}
}

// rejected builds an exit-3 error for a proof that did not verify.
func rejected(format string, args ...any) *peerError {
	return &peerError{code: exitRejected, msg: fmt.Sprintf(format, args...)}
}

// internal wraps an immudb or I/O error as an exit-1 error, unless it already
// is a peerError (then its code is kept).
func internal(context string, err error) *peerError {
	var pe *peerError
	if errors.As(err, &pe) {
		return pe
	}
	return &peerError{code: exitInternal, msg: fmt.Sprintf("%s: %v", context, err)}
}

// withContext prefixes err's message with context, keeping the exit code of
// a peerError (exit 1 for any other error).
func withContext(context string, err error) *peerError {
	var pe *peerError
	if errors.As(err, &pe) {
		return &peerError{code: pe.code, msg: context + ": " + pe.msg}
	}
	return &peerError{code: exitInternal, msg: fmt.Sprintf("%s: %v", context, err)}
}

// main parses the flags and runs the protocol on stdin/stdout.
func main() {
	synced := flag.Bool("synced", true, "fsync every commit group (immudb's default); -synced=false turns sync off")
	flag.Parse()
	os.Exit(run(os.Stdin, os.Stdout, os.Stderr, *synced))
}

// writeJSON writes one JSON object and a newline to out.
func writeJSON(out io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"event": "error", "message": "encoding reply: " + err.Error()})
	}
	b = append(b, '\n')
	_, _ = out.Write(b)
}

// errorReply is the JSON object written before a non-zero exit.
type errorReply struct {
	Event   string `json:"event"`
	Message string `json:"message"`
}

// run executes the whole protocol: config line, then commands until END.
// It returns the process exit code; every failure writes an error JSON first.
// syncedFlag is the command-line -synced flag (sync is on only if both it and
// the config's "synced" are true).
func run(in io.Reader, out io.Writer, logw io.Writer, syncedFlag bool) int {
	bw := bufio.NewWriter(out)
	defer bw.Flush()
	fail := func(pe *peerError) int {
		writeJSON(bw, errorReply{Event: "error", Message: pe.msg})
		return pe.code
	}

	// A reader goroutine turns stdin into lines, so that the main loop can
	// also watch for failures reported by the client goroutines.
	lines := make(chan string, 1024)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
		for sc.Scan() {
			lines <- sc.Text()
		}
		readErr <- sc.Err()
		close(lines)
	}()

	first, ok := <-lines
	if !ok {
		return fail(malformed("no config line on stdin"))
	}
	cfg, pe := parseConfig(first)
	if pe != nil {
		return fail(pe)
	}
	cfg.Synced = cfg.Synced && syncedFlag

	var p *Peer
	var err error
	if cfg.Server != "" {
		p, err = openServerPeer(cfg, logw)
		if err != nil {
			return fail(internal("connecting to the immudb server "+cfg.Server, err))
		}
	} else {
		p, err = openPeer(cfg, logw)
		if err != nil {
			return fail(internal("opening immudb store", err))
		}
	}
	// From here on, a failure also stops the clients and closes the store
	// (waiting at most shutdownTimeout) once the error has been written.
	failOpen := fail
	fail = func(pe *peerError) int {
		code := failOpen(pe)
		bw.Flush()
		p.shutdown(shutdownTimeout)
		return code
	}

	for {
		var line string
		select {
		case <-p.failed:
			return fail(p.failure())
		case l, ok := <-lines:
			if !ok {
				if err := <-readErr; err != nil {
					return fail(internal("reading stdin", err))
				}
				return fail(malformed("input ended before END"))
			}
			line = l
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			// Blank lines are ignored.
		case line == "LOAD":
			if cfg.Accounts == 0 {
				return fail(malformed("LOAD with \"accounts\": 0"))
			}
			res, err := p.load()
			if err != nil {
				return fail(internal("LOAD", err))
			}
			writeJSON(bw, res)
			bw.Flush()
		case strings.HasPrefix(line, "T "):
			req, pe := parseTx(line, cfg)
			if pe != nil {
				return fail(pe)
			}
			if !p.dispatch(req) {
				return fail(p.failure())
			}
		case cfg.Server != "" && (strings.HasPrefix(line, "R ") || line == "R" ||
			strings.HasPrefix(line, "STORE ") || line == "STORE" || strings.HasPrefix(line, "RLOAD ") || line == "RLOAD"):
			return fail(malformed("%q is not supported in server mode", truncate(line, 200)))
		case strings.HasPrefix(line, "R "):
			req, pe := parseRange(line, cfg, p.rangeKeys)
			if pe != nil {
				return fail(pe)
			}
			if !p.dispatch(req) {
				return fail(p.failure())
			}
		case strings.HasPrefix(line, "STORE ") || line == "STORE":
			count, batch, pe := parseStore(line)
			if pe != nil {
				return fail(pe)
			}
			if p.started {
				return fail(malformed("STORE after a T or R line"))
			}
			res, err := p.storeRecords(count, batch)
			if err != nil {
				return fail(internal("STORE", err))
			}
			writeJSON(bw, res)
			bw.Flush()
		case strings.HasPrefix(line, "RLOAD ") || line == "RLOAD":
			keys, pe := parseRLoad(line, p.rangeKeys)
			if pe != nil {
				return fail(pe)
			}
			res, err := p.rload(keys)
			if err != nil {
				return fail(internal("RLOAD", err))
			}
			writeJSON(bw, res)
			bw.Flush()
		case strings.HasPrefix(line, "DUMP "):
			path := strings.TrimSpace(strings.TrimPrefix(line, "DUMP "))
			if path == "" {
				return fail(malformed("DUMP needs a path"))
			}
			if err := p.dump(path); err != nil {
				return fail(internal("DUMP", err))
			}
			writeJSON(bw, map[string]string{"event": "dumped"})
			bw.Flush()
		case line == "END":
			res, err := p.finish()
			if err != nil {
				return fail(internal("END", err))
			}
			writeJSON(bw, res)
			return exitOK
		default:
			return fail(malformed("unknown command line: %q", truncate(line, 200)))
		}
	}
}

// shutdownTimeout bounds the clean-up after a failure.
const shutdownTimeout = 10 * time.Second

// truncate shortens s to at most n bytes for error messages.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Config is the first line of the protocol.
type Config struct {
	Dir             string `json:"dir"`
	Accounts        uint64 `json:"accounts"`
	Clients         int    `json:"clients"`
	Verify          string `json:"verify"`
	DeferredDelayMs int    `json:"deferred_delay_ms"`
	Synced          bool   `json:"synced"`
	AuditBlock      uint64 `json:"audit_block"`

	// Server mode (server.go): "server" is immudb's gRPC address
	// (host:port); empty is the embedded mode. The rest only apply to it.
	Server         string `json:"server"`
	ServerUser     string `json:"server_user"`
	ServerPassword string `json:"server_password"`
	ServerDatabase string `json:"server_database"`
	ServerDir      string `json:"server_dir"`
}

// parseConfig decodes and checks the JSON config line. Unknown fields are an
// error; "synced" defaults to true and "verify" to "immediate". "accounts"
// may be 0 for the workloads without accounts (STORE, RLOAD and R); LOAD then
// is an error, and so is any T line (no account is in range).
func parseConfig(line string) (Config, *peerError) {
	cfg := Config{Synced: true, Verify: "immediate",
		ServerUser: "immudb", ServerPassword: "immudb", ServerDatabase: "defaultdb"}
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, malformed("config line: %v", err)
	}
	switch {
	case cfg.Dir == "":
		return cfg, malformed("config: \"dir\" is required")
	case cfg.Clients < 1 || cfg.Clients > 4096:
		return cfg, malformed("config: \"clients\" must be in 1..4096")
	}
	switch cfg.Verify {
	case "immediate", "none":
	case "deferred":
		if cfg.DeferredDelayMs < 1 {
			return cfg, malformed("config: \"deferred_delay_ms\" must be >= 1 with verify \"deferred\"")
		}
	default:
		return cfg, malformed("config: \"verify\" must be immediate, deferred or none, not %q", cfg.Verify)
	}
	if cfg.Server != "" {
		return checkServerConfig(cfg)
	}
	if cfg.ServerDir != "" {
		return cfg, malformed("config: \"server_dir\" without \"server\"")
	}
	return cfg, nil
}

// parseTx parses `T <client> <seq> <type> <a> <b> <amount>` and checks the
// client and account numbers against the config.
func parseTx(line string, cfg Config) (txReq, *peerError) {
	f := strings.Fields(line)
	var r txReq
	if len(f) != 7 {
		return r, malformed("transaction line needs 7 fields: %q", truncate(line, 200))
	}
	c, err := strconv.Atoi(f[1])
	if err != nil || c < 0 || c >= cfg.Clients {
		return r, malformed("bad client %q (clients: %d) in %q", f[1], cfg.Clients, truncate(line, 200))
	}
	seq, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return r, malformed("bad seq %q in %q", f[2], truncate(line, 200))
	}
	typ, ok := parseTxType(f[3])
	if !ok {
		return r, malformed("unknown transaction type %q in %q", f[3], truncate(line, 200))
	}
	a, err := strconv.ParseUint(f[4], 10, 64)
	if err != nil || a >= cfg.Accounts {
		return r, malformed("bad account a %q (accounts: %d) in %q", f[4], cfg.Accounts, truncate(line, 200))
	}
	b, err := strconv.ParseUint(f[5], 10, 64)
	if err != nil || (typ.usesB() && b >= cfg.Accounts) {
		return r, malformed("bad account b %q (accounts: %d) in %q", f[5], cfg.Accounts, truncate(line, 200))
	}
	amount, err := strconv.ParseInt(f[6], 10, 64)
	if err != nil {
		return r, malformed("bad amount %q in %q", f[6], truncate(line, 200))
	}
	return txReq{client: c, seq: seq, typ: typ, a: a, b: b, amount: amount}, nil
}

// maxIDs bounds RLOAD and STORE counts (far below 2^64, so that no id sum
// overflows).
const maxIDs = 1 << 40

// parseRange parses `R <client> <seq> <lo> <count>` against the config and
// the keys RLOAD wrote: ids lo..lo+count-1 must all exist.
func parseRange(line string, cfg Config, keys uint64) (txReq, *peerError) {
	f := strings.Fields(line)
	var r txReq
	if len(f) != 5 {
		return r, malformed("range line needs 5 fields: %q", truncate(line, 200))
	}
	if keys == 0 {
		return r, malformed("R before RLOAD: %q", truncate(line, 200))
	}
	c, err := strconv.Atoi(f[1])
	if err != nil || c < 0 || c >= cfg.Clients {
		return r, malformed("bad client %q (clients: %d) in %q", f[1], cfg.Clients, truncate(line, 200))
	}
	seq, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return r, malformed("bad seq %q in %q", f[2], truncate(line, 200))
	}
	lo, err := strconv.ParseUint(f[3], 10, 64)
	if err != nil || lo >= keys {
		return r, malformed("bad lo %q (keys: %d) in %q", f[3], keys, truncate(line, 200))
	}
	count, err := strconv.ParseUint(f[4], 10, 64)
	if err != nil || count == 0 || count > keys-lo {
		return r, malformed("bad count %q (lo %d, keys: %d) in %q", f[4], lo, keys, truncate(line, 200))
	}
	return txReq{client: c, seq: seq, typ: txRange, lo: lo, count: count}, nil
}

// parseStore parses `STORE <count> <batch>`: count >= 0 new records (0 only
// measures), batch in 1..maxStoreBatch records per transaction.
func parseStore(line string) (count, batch uint64, pe *peerError) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return 0, 0, malformed("STORE needs a count and a batch: %q", truncate(line, 200))
	}
	count, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || count > maxIDs {
		return 0, 0, malformed("bad STORE count %q", f[1])
	}
	batch, err = strconv.ParseUint(f[2], 10, 64)
	if err != nil || batch < 1 || batch > maxStoreBatch {
		return 0, 0, malformed("bad STORE batch %q (1..%d)", f[2], maxStoreBatch)
	}
	return count, batch, nil
}

// parseRLoad parses `RLOAD <keys>`: 1..maxIDs keys, once.
func parseRLoad(line string, loaded uint64) (uint64, *peerError) {
	f := strings.Fields(line)
	if len(f) != 2 {
		return 0, malformed("RLOAD needs a key count: %q", truncate(line, 200))
	}
	if loaded > 0 {
		return 0, malformed("RLOAD twice")
	}
	keys, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || keys < 1 || keys > maxIDs {
		return 0, malformed("bad RLOAD key count %q", f[1])
	}
	return keys, nil
}
