package abi

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocsCoverABI keeps docs/ABI.md in step with the code: every opcode
// has its section, every status its row with the right value, and every
// register offset appears in the register table.
func TestDocsCoverABI(t *testing.T) {
	b, err := os.ReadFile("../docs/ABI.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var headings []string
	for _, l := range strings.Split(doc, "\n") {
		if h, ok := strings.CutPrefix(l, "### "); ok {
			headings = append(headings, h)
		}
	}
	for op := Opcode(0); int(op) < NumOpcodes; op++ {
		found := false
		for _, h := range headings {
			for _, part := range strings.Split(h, ", ") {
				found = found || part == op.String()
			}
		}
		if !found {
			t.Errorf("docs/ABI.md has no section for opcode %v", op)
		}
	}
	for s := Status(0); int(s) < NumStatus; s++ {
		if !regexp.MustCompile(fmt.Sprintf("(?m)^\\| %d \\| `Status", s)).MatchString(doc) {
			t.Errorf("docs/ABI.md has no status row for %d (%v)", s, s)
		}
	}
	for _, off := range []int{RegID, RegVersion, RegFeatures, RegStatus, RegMemSizeLo, RegMaxAllocLo, RegComputeUnits,
		RegMaxRingSlots, RegMaxWorkGroup, RegError, RegErrorCount, RegErrorAck, RegRingBaseLo, RegComplBaseLo,
		RegRingSlots, RegRingCtrl, RegRingTail, RegRingHead, RegRingDone, RegIntStatus, RegIntEnable, RegProfileName,
		RegDeviceName} {
		if !strings.Contains(doc, fmt.Sprintf("0x%03X", off)) && !strings.Contains(doc, fmt.Sprintf("0x%03x", off)) {
			t.Errorf("docs/ABI.md does not mention register offset %#03x", off)
		}
	}
}
