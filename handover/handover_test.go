package handover

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

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

// TestRoundTripSessionState: a VM connection whose transport keeps state
// (vfio-user) has its descriptors in Extra and its state in Session,
// kept byte for byte.
func TestRoundTripSessionState(t *testing.T) {
	st := sample()
	st.Instances[0].QEMU = &QEMU{Conn: 10, IRQ: None, Resample: None, Extra: []FD{12, 13}, Session: json.RawMessage(`{"versioned":true,"intx":0,"kick":1}`)}
	b, err := Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b, 14)
	if err != nil {
		t.Fatalf("Decode(Encode(st)) = %v", err)
	}
	if q := got.Instances[0].QEMU; len(q.Extra) != 2 || q.Extra[1] != 13 || string(q.Session) != `{"versioned":true,"intx":0,"kick":1}` {
		t.Errorf("decoded VM connection %+v", q)
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
		{"extra fd twice", func(s *State) { s.Instances[0].QEMU.Extra = []FD{9} }, 12, "named twice"},
		{"extra beside an irqfd", func(s *State) {
			q := s.Instances[0].QEMU
			q.IRQ, q.Extra = 11, []FD{}
			q.Resample, q.Extra = None, []FD{12}
		}, 13, "beside an irqfd"},
		{"too many extra", func(s *State) { s.Instances[0].QEMU.Extra = make([]FD, MaxExtra+1) }, 12, "extra descriptors"},
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

// channelPair is the two ends of a Pair, the new process's opened from
// its file as the new process does; both are closed at the test's end.
func channelPair(t *testing.T) (old, nw *Channel) {
	t.Helper()
	old, peer, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { old.Close() })
	nw, err = FileChannel(peer)
	peer.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nw.Close() })
	return old, nw
}

// TestChannelCarriesManyFDs: the descriptors of a State larger than one
// datagram's share arrive with it, in order.
func TestChannelCarriesManyFDs(t *testing.T) {
	old, nw := channelPair(t)
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

// TestNegotiate: the old process picks the highest exchange protocol
// both speak; a Hello without protocols is a vgpud that predates
// protocol 2 (it speaks 1); none in common refuses the upgrade cleanly.
func TestNegotiate(t *testing.T) {
	for _, tc := range []struct {
		theirs []int
		want   int
		fails  bool
	}{
		{nil, Protocol1, false},
		{[]int{1}, Protocol1, false},
		{[]int{1, 2}, Protocol2, false},
		{[]int{1, 2, 3}, Protocol2, false}, // a newer one that still speaks ours
		{[]int{3, 4}, 0, true},             // a newer one that dropped ours
		{[]int{0, -1}, 0, true},
	} {
		got, err := Negotiate(Hello{PID: 1, Version: Version, Protocols: tc.theirs})
		if tc.fails {
			if !errors.Is(err, ErrChannel) || !strings.Contains(err.Error(), "no common") {
				t.Errorf("Negotiate(%v) = %d, %v; want a refusal", tc.theirs, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Negotiate(%v) = %d, %v; want %d", tc.theirs, got, err, tc.want)
		}
	}
	// A protocol 1 Hello as a vgpud before protocol 2 writes it.
	var h Hello
	if err := json.Unmarshal([]byte(`{"pid":7,"version":1}`), &h); err != nil {
		t.Fatal(err)
	}
	if p, err := Negotiate(h); err != nil || p != Protocol1 {
		t.Errorf("Negotiate(a protocol 1 Hello) = %d, %v", p, err)
	}
}

// TestDecodeCommit: a commit without a body is protocol 1's (what a
// vgpud before protocol 2 sends); a protocol 2 commit carries the
// probation; a commit in a protocol the new process did not offer, or
// malformed, is refused (the new process fails, the old one serves).
func TestDecodeCommit(t *testing.T) {
	if c, err := DecodeCommit(nil, Speaks()); err != nil || c.Protocol != Protocol1 || c.Probation != 0 {
		t.Errorf("DecodeCommit(no body) = %+v, %v", c, err)
	}
	b, _ := json.Marshal(Commit{Protocol: Protocol2, Probation: 3 * time.Second})
	if c, err := DecodeCommit(b, Speaks()); err != nil || c.Protocol != Protocol2 || c.Probation != 3*time.Second {
		t.Errorf("DecodeCommit(%s) = %+v, %v", b, c, err)
	}
	for _, tc := range []struct {
		body   string
		speaks []int
	}{
		{`{"protocol":2,"probation_ns":1}`, []int{Protocol1}}, // it offered 1 only
		{`{"protocol":9,"probation_ns":1}`, Speaks()},
		{`{"protocol":2,"probation_ns":-1}`, Speaks()},
		{`{"protocol":2,"extra":1}`, Speaks()},
		{`{`, Speaks()},
	} {
		if c, err := DecodeCommit([]byte(tc.body), tc.speaks); !errors.Is(err, ErrChannel) {
			t.Errorf("DecodeCommit(%s, %v) = %+v, %v; want ErrChannel", tc.body, tc.speaks, c, err)
		}
	}
}

// TestProbationMessages: the probation's messages pass the channel in
// both directions, a Fail's reason with it.
func TestProbationMessages(t *testing.T) {
	old, nw := channelPair(t)
	if err := old.Send(KindCommit, Commit{Protocol: Protocol2, Probation: time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	k, body, _, err := nw.Recv()
	if err != nil || k != KindCommit {
		t.Fatalf("Recv = %q, %v", k, err)
	}
	if c, err := DecodeCommit(body, Speaks()); err != nil || c.Probation != time.Second {
		t.Fatalf("commit %+v, %v", c, err)
	}
	for _, k := range []Kind{KindHealthy, KindStopping} {
		if err := nw.Send(k, nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := old.Expect(k, nil); err != nil {
			t.Errorf("Expect(%q) = %v", k, err)
		}
	}
	if err := nw.Send(KindFail, Failure{Error: "unhealthy"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := old.Expect(KindHealthy, nil); err == nil || !strings.Contains(err.Error(), "unhealthy") {
		t.Errorf("Expect after a Fail = %v", err)
	}
	if err := old.Send(KindRelease, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := nw.Expect(KindRelease, nil); err != nil {
		t.Errorf("Expect(release) = %v", err)
	}
}
