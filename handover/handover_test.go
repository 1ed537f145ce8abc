package handover

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func sample() State {
	cfg := make([]byte, ConfigSize)
	cfg[0] = 0xf4
	return State{
		Version:   Version,
		From:      42,
		Lock:      0,
		Listeners: []Listener{{Name: "control", FD: 1}},
		Workers: []Worker{{Domain: "instance:a", Device: 0, PID: 7, PIDFD: 2, Conn: 3, Log: 4, Cache: "/tmp/c",
			Hello: []byte{1, 2, 3}, NextID: 9, NextSlot: 1, Turns: []Turn{{ID: 3, Turn: 1, Slot: 1, Cost: 5}}}},
		Domains: []Domain{{Name: "instance:a", Budget: 1 << 20}},
		Instances: []Instance{{UUID: "a", Worker: 0, Slot: 1, Page: 5, Bell: 6, Notify: 7, Listener: 8,
			Regions: []Region{{GPA: 0, Size: 4096, FD: 9}},
			QEMU:    &QEMU{Conn: 10, IRQ: None, Resample: None},
			Agent:   &Agent{Listener: 11, Conn: None, Unread: []byte{0xaa}, Watch: 1<<32 | 5},
			Config:  cfg, Regs: Regs{RingBase: 0x1000, Slots: 64, Tail: 3, IntEnable: 1}}},
	}
}

func TestRoundTrip(t *testing.T) {
	st := sample()
	b, err := Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b, 12)
	if err != nil {
		t.Fatalf("Decode(Encode(st)) = %v", err)
	}
	b2, _ := Encode(got)
	if string(b) != string(b2) {
		t.Errorf("round trip differs:\n%s\n%s", b, b2)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*State)
		nfds int
		want string
	}{
		{"version", func(s *State) { s.Version = 2 }, 12, "version"},
		{"fd out of range", func(s *State) { s.Instances[0].Page = 40 }, 12, "descriptor 40"},
		{"fd twice", func(s *State) { s.Instances[0].Bell = 5 }, 12, "named twice"},
		{"worker index", func(s *State) { s.Instances[0].Worker = 3 }, 12, "worker 3"},
		{"config size", func(s *State) { s.Instances[0].Config = []byte{1} }, 12, "config space"},
		{"listener twice", func(s *State) { s.Listeners = append(s.Listeners, Listener{Name: "control", FD: 11}) }, 12, "twice"},
		{"negative fd", func(s *State) { s.Workers[0].Conn = -2 }, 12, "descriptor -2"},
		{"too few fds", func(s *State) {}, 3, "descriptor"},
		{"no pid", func(s *State) { s.Workers[0].PID = 0 }, 12, "pid 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := sample()
			tc.edit(&st)
			b, err := Encode(st)
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "version" {
				b = []byte(strings.Replace(string(b), `"version":1`, `"version":2`, 1))
			}
			_, err = Decode(b, tc.nfds)
			if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Decode = %v, want ErrState saying %q", err, tc.want)
			}
		})
	}
	if _, err := Decode([]byte(`{"version":1} {}`), 0); !errors.Is(err, ErrState) {
		t.Errorf("trailing data: %v", err)
	}
	if _, err := Decode([]byte(`{"version":1,"bogus":1}`), 0); !errors.Is(err, ErrState) {
		t.Errorf("unknown field: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := Encode(sample())
	f.Add(b, 12)
	f.Add([]byte(`{"version":1}`), 0)
	f.Fuzz(func(t *testing.T, b []byte, nfds int) {
		st, err := Decode(b, nfds)
		if err != nil {
			return
		}
		// A State that passed names each descriptor at most once, each
		// within range: taking all of them never gives one twice.
		fds := make([]int, max(0, min(nfds, MaxFDs)))
		for i := range fds {
			fds[i] = 1000 + i
		}
		tab := NewTable(fds)
		seen := map[int]bool{}
		take := func(fd FD) {
			if v := tab.Take(fd); v >= 0 {
				if seen[v] {
					t.Fatalf("descriptor %d taken twice", v)
				}
				seen[v] = true
			}
		}
		take(st.Lock)
		for _, l := range st.Listeners {
			take(l.FD)
		}
		for _, w := range st.Workers {
			take(w.PIDFD)
			take(w.Conn)
			take(w.Log)
		}
		for _, in := range st.Instances {
			for _, fd := range []FD{in.Page, in.Bell, in.Notify, in.Listener} {
				take(fd)
			}
			for _, r := range in.Regions {
				take(r.FD)
			}
		}
	})
}

// TestChannelCarriesManyFDs: the descriptors of a State larger than one
// datagram's share arrive with it, in order.
func TestChannelCarriesManyFDs(t *testing.T) {
	old, peer, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	nw, err := FileChannel(peer)
	peer.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer nw.Close()
	const n = 450
	var fds []int
	for i := 0; i < n; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		fds = append(fds, int(w.Fd()))
	}
	if err := old.Send(KindState, map[string]int{"n": n}, fds); err != nil {
		t.Fatal(err)
	}
	k, body, got, err := nw.Recv()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, fd := range got {
			unix.Close(fd)
		}
	}()
	if k != KindState || string(body) != `{"n":450}` || len(got) != n {
		t.Fatalf("got %q %s with %d fds, want the state with %d", k, body, len(got), n)
	}
	// The 300th descriptor is the 300th pipe's write end.
	var a, b unix.Stat_t
	unix.Fstat(fds[299], &a)
	unix.Fstat(got[299], &b)
	if a.Ino != b.Ino {
		t.Errorf("descriptor 299 is inode %d, sent %d", b.Ino, a.Ino)
	}
	if err := nw.Send(KindFail, Failure{Error: "no device"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := old.Expect(KindReady, nil); err == nil || !strings.Contains(err.Error(), "no device") {
		t.Errorf("Expect(Ready) after a Fail = %v", err)
	}
}
