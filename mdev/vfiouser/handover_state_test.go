package vfiouser

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// validState is a session state as Handover writes it for a client that
// mapped two windows (one without an fd) and wired every interrupt: 4
// descriptors.
func validState() sessionState {
	return sessionState{
		Versioned: true,
		DMA: []dmaState{
			{Addr: 0, Size: 0xa0000, Flags: DMAFlagRead | DMAFlagWrite, FD: 0},
			{Addr: 1 << 32, Size: 1 << 20, Flags: DMAFlagRead, FD: -1},
		},
		INTx: 1, Masked: true, Unmask: 2, Err: -1, Kick: 3,
	}
}

// TestStateRoundTrip: what Handover encodes, parseState reads back
// unchanged.
func TestStateRoundTrip(t *testing.T) {
	st := validState()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseState(b, 4)
	if err != nil {
		t.Fatalf("parseState(%s) = %v", b, err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Errorf("parseState = %+v, want %+v", got, st)
	}
	if _, err := parseState(b, 5); !errors.Is(err, ErrState) {
		t.Errorf("with a descriptor more than the state names: %v, want ErrState", err)
	}
}

// FuzzSessionState: a session state from another process is checked as
// a client's message is: parseState never panics, and what it accepts
// names each descriptor exactly once, holds windows DMA_MAP would take,
// and reads back the same after encoding.
func FuzzSessionState(f *testing.F) {
	b, _ := json.Marshal(validState())
	f.Add(b, 4)
	f.Add([]byte(`{"versioned":false,"dma":[],"intx":-1,"intx_masked":false,"unmask":-1,"err":-1,"kick":-1}`), 0)
	f.Add([]byte(`{"versioned":true,"dma":[{"addr":4096,"size":4096,"offset":0,"flags":3,"fd":0}],"intx":0,"intx_masked":true,"unmask":-1,"err":-1,"kick":-1}`), 1)
	f.Add([]byte(`null`), 0)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		st, err := parseState(b, n)
		if err != nil {
			if !errors.Is(err, ErrState) {
				t.Fatalf("parseState error %v does not wrap ErrState", err)
			}
			return
		}
		named := map[int]int{}
		var windows []dmaWindow
		for _, d := range st.DMA {
			w := dmaWindow{addr: d.Addr, size: d.Size, offset: d.Offset, flags: d.Flags}
			if e := w.check(windows); e != 0 {
				t.Fatalf("accepted window %+v that DMA_MAP refuses: %v", d, e)
			}
			windows = append(windows, w)
			named[d.FD]++
		}
		for _, i := range []int{st.INTx, st.Unmask, st.Err, st.Kick} {
			named[i]++
		}
		delete(named, -1)
		if len(named) != n {
			t.Fatalf("accepted a state naming %d of %d descriptors", len(named), n)
		}
		for i, c := range named {
			if i < 0 || i >= n || c != 1 {
				t.Fatalf("descriptor %d named %d times (of %d)", i, c, n)
			}
		}
		again, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if st2, err := parseState(again, n); err != nil || !reflect.DeepEqual(st2, st) {
			t.Fatalf("re-encoded state %s reads %+v, %v", again, st2, err)
		}
	})
}
