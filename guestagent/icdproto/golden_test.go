package icdproto

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestGolden pins the wire format: one message of every op, as
// testdata/marshal.golden holds it (the bytes the reflection-based encoder
// that came before the explicit one wrote), must be what Marshal writes
// and must decode back to its body.
func TestGolden(t *testing.T) {
	f, err := os.Open("testdata/marshal.golden")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byName := map[string]Op{}
	for op := range ops {
		byName[op.String()] = op
	}
	s := samples()
	// The golden bytes carry the ABI version of their day, not abi.Version.
	s[OpHello|ReplyBit].(*HelloReply).Devices[0].AbiVersion = 0x00010005
	seen := map[Op]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hexMsg, _ := strings.Cut(line, " ")
		op, ok := byName[name]
		if !ok {
			t.Fatalf("golden line for unknown op %q", name)
		}
		want, err := hex.DecodeString(hexMsg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		seen[op] = true
		got, err := Marshal(op, 7, s[op])
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("Marshal(%v) = %x, %v\nwant %x", op, got, err, want)
		}
		_, body, err := Unmarshal(want)
		if err != nil {
			t.Errorf("Unmarshal(golden %v) = %v", op, err)
		} else if diff := cmp.Diff(s[op], body, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Unmarshal(golden %v) (-want +got):\n%s", op, diff)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(ops) {
		t.Errorf("golden file covers %d ops, the protocol has %d", len(seen), len(ops))
	}
}
