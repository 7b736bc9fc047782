package cairn_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	cairn "github.com/cairn-db/cairn/bindings/go"
)

// The README's example: a durable table, a batch, a batched lookup, a range walk and a proof.
func Example() {
	tmp, _ := os.MkdirTemp("", "cairn-go")
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "db")

	s, err := cairn.Open(dir) // creates or recovers; ErrLocked if another session holds it
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	accounts, _ := s.Table("accounts", false) // durable: logged, survives restarts
	d, _ := accounts.Write([]cairn.Update{{Key: []byte("alice"), Value: []byte("100")},
		{Key: []byte("bob"), Value: []byte("50")}, {Kind: cairn.Delete, Key: []byte("dave")}})
	d.Wait() // on disk
	d.Close()
	// One cgo call for the batch; nil for an absent key.
	values, _ := accounts.GetMany([][]byte{[]byte("alice"), []byte("zed")})
	fmt.Println(string(values[0]), values[1] == nil)
	c, _ := accounts.Scan([]byte("a"), []byte("c")) // start <= key < end; nil: open
	for k, v := range c.All() {
		fmt.Printf("%s=%s\n", k, v)
	}
	c.Close()

	state, _ := s.Table("state", true) // authenticated: roots and proofs
	state.Put([]byte("alice"), []byte("100"))
	proof, _ := state.Prove([][]byte{[]byte("alice"), []byte("mallory")})
	err = cairn.Verify(proof.Root, proof.Bytes, []cairn.Claim{
		{Key: []byte("alice"), Value: []byte("100"), Present: true}, {Key: []byte("mallory")}})
	fmt.Println("verified:", err == nil)
	// Output:
	// 100 true
	// alice=100
	// bob=50
	// verified: true
}
