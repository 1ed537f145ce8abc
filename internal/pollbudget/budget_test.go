package pollbudget

import "testing"

// TestBudget: two looks in a row that run out stop the looking; then
// every Probe-th wait looks again, and a look that pays starts over.
func TestBudget(t *testing.T) {
	var b Budget
	var got []bool
	for range 2 {
		got = append(got, b.Look())
		b.RanOut()
	}
	for k := 1; k <= 2*Probe; k++ {
		look := b.Look()
		if look != (k%Probe == 0) {
			t.Fatalf("wait %d after the looking stopped: look %v", k, look)
		}
		if look {
			b.RanOut()
		}
	}
	if got[0] != true || got[1] != true {
		t.Fatalf("the first two waits look %v, want both", got)
	}
	for k := 1; k < Probe; k++ {
		b.Look()
	}
	if !b.Look() {
		t.Fatal("the probe after the stopped waits does not look")
	}
	b.Paid()
	for k := range Misses {
		if !b.Look() {
			t.Fatalf("wait %d after a look paid: not looking", k)
		}
	}
}
