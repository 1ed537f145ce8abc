package interferencetest

import (
	"testing"

	"github.com/vgpud/vgpud/interference"
)

// TestShortLong: the dataset is valid, and the default model learns its
// structure: a short newcomer scores lower beside a short resident than
// beside a long one.
func TestShortLong(t *testing.T) {
	d := ShortLong()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := interference.Train(d, interference.Options{Kind: interference.Forest, Set: interference.Select, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	short, _ := d.Workload("short1")
	long, _ := d.Workload("long2")
	newcomer, _ := d.Workload("short0")
	bs := interference.AddedInterference(m, newcomer.Features, []interference.Features{short.Features})
	bl := interference.AddedInterference(m, newcomer.Features, []interference.Features{long.Features})
	if bs >= bl {
		t.Errorf("beside short %.3f, beside long %.3f: want short lower", bs, bl)
	}
}
