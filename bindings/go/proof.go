package cairn

/*
#include "cairn.h"
*/
import "C"

import "unsafe"

// RootBytes is the length of a state root in bytes.
const RootBytes = C.CAIRN_ROOT_BYTES

// Root is an authenticated table's state root at one version.
type Root struct {
	// Hash is the root hash.
	Hash [RootBytes]byte
	// Version is the table's version when the root was taken.
	Version uint64
	// Auth is the hash used: AuthSHA256 or AuthBLAKE3.
	Auth Auth
}

// Proof proves the presence or absence of some keys in a table at one root.
type Proof struct {
	// Bytes is the encoded multiproof (what a light client receives).
	Bytes []byte
	// Root is the root the proof verifies against.
	Root Root
}

// Claim is what a proof is checked to show about one key: present with Value, or absent.
type Claim struct {
	// Key is the key the claim is about.
	Key []byte
	// Value is the value claimed (ignored when Present is false).
	Value []byte
	// Present says the key is claimed present (true) or absent (false).
	Present bool
}

// Root commits the table's pending updates and returns its state root; ErrNotAuthenticated
// for a table opened without authentication.
func (t *Table) Root() (Root, error) {
	var r Root
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.ptr == nil {
		return r, closedError("table")
	}
	var version C.uint64_t
	var auth C.int
	var cerr *C.cairn_error
	code := C.cairn_root(t.ptr, (*C.uint8_t)(unsafe.Pointer(&r.Hash[0])), &version, &auth, &cerr)
	if err := fromC(code, cerr); err != nil {
		return Root{}, err
	}
	r.Version, r.Auth = uint64(version), Auth(auth)
	return r, nil
}

// Prove proves keys (present or absent) in the table's current contents, committing pending
// updates first. Check the proof with Verify.
func (t *Table) Prove(keys [][]byte) (*Proof, error) {
	flat, lens := flatten(keys)
	if len(lens) == 0 {
		lens = make([]C.size_t, 1)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.ptr == nil {
		return nil, closedError("table")
	}
	p := &Proof{}
	var bytes C.cairn_bytes
	var version C.uint64_t
	var cerr *C.cairn_error
	code := C.cairn_prove(t.ptr, bytesPtr(flat), &lens[0], C.size_t(len(keys)), &bytes,
		(*C.uint8_t)(unsafe.Pointer(&p.Root.Hash[0])), &version, &cerr)
	if err := fromC(code, cerr); err != nil {
		return nil, err
	}
	defer C.cairn_bytes_free(&bytes)
	p.Bytes = goBytes(bytes.data, bytes.len)
	p.Root.Version = uint64(version)
	// The proof verifies against the table's hash: ask the table (no I/O, no commit needed).
	var auth C.int
	var scratch [RootBytes]byte
	code = C.cairn_root(t.ptr, (*C.uint8_t)(unsafe.Pointer(&scratch[0])), nil, &auth, &cerr)
	if err := fromC(code, cerr); err != nil {
		return nil, err
	}
	p.Root.Auth = Auth(auth)
	return p, nil
}

// Verify checks proof against root and claims, with no session: nil only if the proof is
// well formed, hashes to root.Hash (with root.Auth) and shows every claim true; otherwise an
// error matching ErrProofInvalid (the message says why).
func Verify(root Root, proof []byte, claims []Claim) error {
	keys := make([][]byte, len(claims))
	values := make([][]byte, len(claims))
	present := make([]C.uint8_t, len(claims)+1)
	for i, c := range claims {
		keys[i] = c.Key
		if c.Present {
			values[i], present[i] = c.Value, 1
		}
	}
	flatKeys, keyLens := flatten(keys)
	flatValues, valueLens := flatten(values)
	if len(claims) == 0 {
		keyLens, valueLens = make([]C.size_t, 1), make([]C.size_t, 1)
	}
	var cerr *C.cairn_error
	code := C.cairn_proof_verify(C.int(root.Auth), (*C.uint8_t)(unsafe.Pointer(&root.Hash[0])),
		bytesPtr(proof), C.size_t(len(proof)), bytesPtr(flatKeys), &keyLens[0],
		bytesPtr(flatValues), &valueLens[0], &present[0], C.size_t(len(claims)), &cerr)
	return fromC(code, cerr)
}
