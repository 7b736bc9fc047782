package main

// Verification as immudb's server and client do it, embedded.
//
// The "server" half (prove*) builds exactly the proofs that immudb's
// pkg/database builds for VerifiableGet and VerifiableSet, and converts them to
// the protobuf messages its gRPC API sends (so their proto.Size is the number
// of bytes a client would receive). The "client" half (verify*) converts them
// back and checks them as pkg/client's verifiedGet and VerifiedSet do, against
// the client's trusted state (tx id + Alh), trust on first use included.
// The two halves share nothing but those messages.

import (
	"crypto/sha256"
	"fmt"

	"github.com/codenotary/immudb/embedded/store"
	"github.com/codenotary/immudb/pkg/api/schema"
	"google.golang.org/protobuf/proto"
)

// tamperForTest, when set by a test, may alter every proof (a *getProof, a
// *setProof, a *schema.DualProof or a *schema.InclusionProof) after the
// "server" built it and before the "client" checks it. It is nil outside
// tests.
var tamperForTest func(proof any)

// tamper applies tamperForTest, if set.
func tamper(proof any) {
	if tamperForTest != nil {
		tamperForTest(proof)
	}
}

// clientState is a client's trusted state: a transaction id and its Alh
// (accumulated linear hash). id 0 means no state yet (trust on first use).
type clientState struct {
	id  uint64
	alh [sha256.Size]byte
}

// getProof is what VerifiableGet sends besides the entry itself: the
// entry's inclusion proof in the transaction that wrote it, and a dual proof
// between that transaction and the client's trusted state.
type getProof struct {
	inclusion *schema.InclusionProof
	dual      *schema.DualProof
}

// size is the protobuf size of the proofs, as gRPC would send them.
func (p *getProof) size() int { return proto.Size(p.inclusion) + proto.Size(p.dual) }

// setProof is what a VerifiableSet of several entries proves: one inclusion
// proof per written entry in the committed transaction, and a dual proof
// from the client's trusted state to that transaction.
type setProof struct {
	inclusions []*schema.InclusionProof
	dual       *schema.DualProof
}

// size is the protobuf size of the proofs, as gRPC would send them.
func (p *setProof) size() int {
	n := proto.Size(p.dual)
	for _, ip := range p.inclusions {
		n += proto.Size(ip)
	}
	return n
}

// entriesProof is what VerifiableGet sends for several entries that one
// transaction wrote (one range's entries sharing a tx): the inclusion proof of
// each entry in that transaction, and one dual proof between the transaction
// and the client's trusted state, which the entries share.
type entriesProof struct {
	inclusions []*schema.InclusionProof
	dual       *schema.DualProof
}

// size is the protobuf size of the proofs, as gRPC would send them.
func (p *entriesProof) size() int {
	n := proto.Size(p.dual)
	for _, ip := range p.inclusions {
		n += proto.Size(ip)
	}
	return n
}

// proveGet is the server side of VerifiableGet (pkg/database: VerifiableGet):
// ReadTx(vTx), the key's inclusion proof in it, and DualProof between vTx and
// the client's state sinceTx (sinceTx 0: the proof from vTx to itself), older
// transaction first. holder is a reusable store.NewTx buffer.
func proveGet(st *store.ImmuStore, holder *store.Tx, key []byte, vTx, sinceTx uint64) (*getProof, error) {
	p, err := proveEntries(st, holder, [][]byte{key}, vTx, sinceTx)
	if err != nil {
		return nil, err
	}
	return &getProof{inclusion: p.inclusions[0], dual: p.dual}, nil
}

// proveEntries is proveGet for several keys written by the same transaction
// vTx: one inclusion proof per key, one dual proof for them all.
func proveEntries(st *store.ImmuStore, holder *store.Tx, keys [][]byte, vTx, sinceTx uint64) (*entriesProof, error) {
	if err := st.ReadTx(vTx, false, holder); err != nil {
		return nil, fmt.Errorf("ReadTx(%d): %w", vTx, err)
	}
	vHdr := holder.Header()
	rootHdr := vHdr
	if sinceTx != 0 {
		var err error
		rootHdr, err = st.ReadTxHeader(sinceTx, false, false)
		if err != nil {
			return nil, fmt.Errorf("ReadTxHeader(%d): %w", sinceTx, err)
		}
	}
	p := &entriesProof{}
	for _, key := range keys {
		ip, err := holder.Proof(key)
		if err != nil {
			return nil, fmt.Errorf("Proof(%x) in tx %d: %w", key, vTx, err)
		}
		p.inclusions = append(p.inclusions, schema.InclusionProofToProto(ip))
	}
	src, dst := rootHdr, vHdr
	if sinceTx > vTx {
		src, dst = vHdr, rootHdr
	}
	dp, err := st.DualProof(src, dst)
	if err != nil {
		return nil, fmt.Errorf("DualProof(%d, %d): %w", src.ID, dst.ID, err)
	}
	p.dual = schema.DualProofToProto(dp)
	return p, nil
}

// verifyGet is the client side of VerifiedGet (pkg/client: verifiedGet): the
// entry (key, metadata, value) read at vTx must be included in vTx's Eh, and
// vTx must be consistent with the trusted state (dual proof in the direction
// of the older one), unless there is no state yet. It returns the newer of the
// two states, which the client adopts.
func verifyGet(state clientState, key []byte, md *store.KVMetadata, value []byte, vTx uint64, p *getProof) (clientState, error) {
	if p == nil || p.inclusion == nil {
		return state, rejected("get proof for key %x at tx %d is incomplete", key, vTx)
	}
	return verifyEntries(state, []readRec{{key: key, md: md, value: value, tx: vTx}}, vTx,
		&entriesProof{inclusions: []*schema.InclusionProof{p.inclusion}, dual: p.dual})
}

// verifyEntries is verifyGet for several entries read at the same transaction
// vTx: each entry must be included in vTx's Eh (from the dual proof's header
// of vTx), and vTx consistent with the trusted state by the one dual proof.
// It returns the newer of vTx and the state.
func verifyEntries(state clientState, reads []readRec, vTx uint64, p *entriesProof) (clientState, error) {
	if p == nil || p.dual == nil || p.dual.SourceTxHeader == nil || p.dual.TargetTxHeader == nil || len(p.inclusions) != len(reads) {
		return state, rejected("proof of %d entries at tx %d is incomplete", len(reads), vTx)
	}
	dp := schema.DualProofFromProto(p.dual)
	var vHdr *store.TxHeader
	var srcID, dstID uint64
	var srcAlh, dstAlh [sha256.Size]byte
	if state.id <= vTx {
		vHdr = dp.TargetTxHeader
		srcID, srcAlh = state.id, state.alh
		dstID, dstAlh = vTx, dp.TargetTxHeader.Alh()
	} else {
		vHdr = dp.SourceTxHeader
		srcID, srcAlh = vTx, dp.SourceTxHeader.Alh()
		dstID, dstAlh = state.id, state.alh
	}
	if vHdr.ID != vTx {
		return state, rejected("proof of entries at tx %d: header is tx %d", vTx, vHdr.ID)
	}
	digest, err := store.EntrySpecDigestFor(vHdr.Version)
	if err != nil {
		return state, rejected("proof of entries at tx %d: %v", vTx, err)
	}
	for i, r := range reads {
		if r.tx != vTx {
			return state, rejected("entry %x was read at tx %d, not %d", r.key, r.tx, vTx)
		}
		entry := &store.EntrySpec{Key: r.key, Metadata: r.md, Value: r.value}
		if !store.VerifyInclusion(schema.InclusionProofFromProto(p.inclusions[i]), digest(entry), vHdr.Eh) {
			return state, rejected("inclusion proof of key %x in tx %d does not verify", r.key, vTx)
		}
	}
	if state.id > 0 && !store.VerifyDualProof(dp, srcID, dstID, srcAlh, dstAlh) {
		return state, rejected("dual proof from tx %d to tx %d (read at tx %d) does not verify", srcID, dstID, vTx)
	}
	return clientState{id: dstID, alh: dstAlh}, nil
}

// proveSet is the server side of VerifiableSet (pkg/database: VerifiableSet)
// for the committed transaction txID: ReadTx(txID), each written key's
// inclusion proof, and DualProof from the client's state sinceTx to txID
// (sinceTx 0: from txID to itself).
func proveSet(st *store.ImmuStore, holder *store.Tx, txID uint64, keys [][]byte, sinceTx uint64) (*setProof, error) {
	if err := st.ReadTx(txID, false, holder); err != nil {
		return nil, fmt.Errorf("ReadTx(%d): %w", txID, err)
	}
	hdr := holder.Header()
	p := &setProof{}
	for _, k := range keys {
		ip, err := holder.Proof(k)
		if err != nil {
			return nil, fmt.Errorf("Proof(%x) in tx %d: %w", k, txID, err)
		}
		p.inclusions = append(p.inclusions, schema.InclusionProofToProto(ip))
	}
	prev := hdr
	if sinceTx != 0 {
		var err error
		prev, err = st.ReadTxHeader(sinceTx, false, false)
		if err != nil {
			return nil, fmt.Errorf("ReadTxHeader(%d): %w", sinceTx, err)
		}
	}
	dp, err := st.DualProof(prev, hdr)
	if err != nil {
		return nil, fmt.Errorf("DualProof(%d, %d): %w", prev.ID, hdr.ID, err)
	}
	p.dual = schema.DualProofToProto(dp)
	return p, nil
}

// verifySet is the client side of VerifiedSet (pkg/client: VerifiedSet) for
// a transaction that wrote several entries: every entry must be included in
// the committed header's Eh, that Eh must be the one the dual proof carries,
// and the header must be consistent with the trusted state (skipped with no
// state yet). It returns the new state: the committed transaction.
func verifySet(state clientState, hdr *store.TxHeader, writes []writeRec, p *setProof) (clientState, error) {
	if p == nil || p.dual == nil || p.dual.TargetTxHeader == nil || len(p.inclusions) != len(writes) {
		return state, rejected("set proof for tx %d is incomplete", hdr.ID)
	}
	digest, err := store.EntrySpecDigestFor(hdr.Version)
	if err != nil {
		return state, rejected("set proof for tx %d: %v", hdr.ID, err)
	}
	for i, w := range writes {
		entry := &store.EntrySpec{Key: w.key, Metadata: nil, Value: w.value}
		if !store.VerifyInclusion(schema.InclusionProofFromProto(p.inclusions[i]), digest(entry), hdr.Eh) {
			return state, rejected("inclusion proof of written key %x in tx %d does not verify", w.key, hdr.ID)
		}
	}
	if hdr.Eh != schema.DigestFromProto(p.dual.TargetTxHeader.EH) {
		return state, rejected("tx %d: Eh differs from the dual proof's target header", hdr.ID)
	}
	dstID, dstAlh := hdr.ID, hdr.Alh()
	if state.id > 0 {
		dp := schema.DualProofFromProto(p.dual)
		if !store.VerifyDualProof(dp, state.id, dstID, state.alh, dstAlh) {
			return state, rejected("dual proof from tx %d to committed tx %d does not verify", state.id, dstID)
		}
	}
	return clientState{id: dstID, alh: dstAlh}, nil
}

// proveDual is the server side of a consistency check between two
// transactions, src <= dst: DualProof(header(src), header(dst)).
func proveDual(st *store.ImmuStore, src, dst uint64) (*schema.DualProof, error) {
	srcHdr, err := st.ReadTxHeader(src, false, false)
	if err != nil {
		return nil, fmt.Errorf("ReadTxHeader(%d): %w", src, err)
	}
	dstHdr, err := st.ReadTxHeader(dst, false, false)
	if err != nil {
		return nil, fmt.Errorf("ReadTxHeader(%d): %w", dst, err)
	}
	dp, err := st.DualProof(srcHdr, dstHdr)
	if err != nil {
		return nil, fmt.Errorf("DualProof(%d, %d): %w", src, dst, err)
	}
	return schema.DualProofToProto(dp), nil
}

// verifyAdvance checks that the new state dst extends the trusted state src
// (dual proof src -> dst). With no trusted state it trusts dst (first use).
func verifyAdvance(src, dst clientState, p *schema.DualProof) error {
	if src.id == 0 {
		return nil
	}
	if p == nil || p.SourceTxHeader == nil || p.TargetTxHeader == nil {
		return rejected("dual proof from state %d to %d is incomplete", src.id, dst.id)
	}
	if !store.VerifyDualProof(schema.DualProofFromProto(p), src.id, dst.id, src.alh, dst.alh) {
		return rejected("dual proof from state %d to state %d does not verify", src.id, dst.id)
	}
	return nil
}

// verifyTxInState checks that transaction txID is in the history of the
// trusted state (dual proof txID -> state) and returns txID's header from the
// proof, whose Eh the entries of txID are then checked against.
func verifyTxInState(state clientState, txID uint64, p *schema.DualProof) (*store.TxHeader, error) {
	if p == nil || p.SourceTxHeader == nil || p.TargetTxHeader == nil {
		return nil, rejected("dual proof from tx %d to state %d is incomplete", txID, state.id)
	}
	dp := schema.DualProofFromProto(p)
	if !store.VerifyDualProof(dp, txID, state.id, dp.SourceTxHeader.Alh(), state.alh) {
		return nil, rejected("dual proof from tx %d to state %d does not verify", txID, state.id)
	}
	return dp.SourceTxHeader, nil
}

// proveInclusion is the server side of one entry's inclusion proof in a
// transaction already read into holder.
func proveInclusion(holder *store.Tx, key []byte) (*schema.InclusionProof, error) {
	ip, err := holder.Proof(key)
	if err != nil {
		return nil, fmt.Errorf("Proof(%x) in tx %d: %w", key, holder.Header().ID, err)
	}
	return schema.InclusionProofToProto(ip), nil
}

// verifyEntry checks one entry's inclusion proof against a verified header.
func verifyEntry(hdr *store.TxHeader, key []byte, md *store.KVMetadata, value []byte, p *schema.InclusionProof) error {
	if p == nil {
		return rejected("inclusion proof of key %x in tx %d is missing", key, hdr.ID)
	}
	digest, err := store.EntrySpecDigestFor(hdr.Version)
	if err != nil {
		return rejected("tx %d: %v", hdr.ID, err)
	}
	entry := &store.EntrySpec{Key: key, Metadata: md, Value: value}
	if !store.VerifyInclusion(schema.InclusionProofFromProto(p), digest(entry), hdr.Eh) {
		return rejected("inclusion proof of key %x in tx %d does not verify", key, hdr.ID)
	}
	return nil
}
