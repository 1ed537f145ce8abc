package devmem

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLedgerModel checks the ledger against a plain model under random
// operations: the sum of holdings is what is used, a reservation that
// succeeds never takes the device past its capacity, a credit never
// exceeds its holder's holding.
func TestLedgerModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.Uint64Range(0, 1<<20).Draw(t, "capacity")
		l := New(capacity)
		ids := []string{"a", "b", "c"}
		held := map[string]uint64{}
		credit := map[string]uint64{}
		id := rapid.SampledFrom(ids)
		size := rapid.Uint64Range(0, 1<<19)
		t.Repeat(map[string]func(*rapid.T){
			"try": func(t *rapid.T) {
				who, n := id.Draw(t, "id"), size.Draw(t, "n")
				take := min(credit[who], n)
				want := sum(held)+n-take <= capacity
				if want {
					credit[who] -= take
					held[who] += n - take
				}
				if got := l.TryReserve(who, n); got != want {
					t.Fatalf("TryReserve(%s, %d) = %v, model %v", who, n, got, want)
				}
			},
			"credit": func(t *rapid.T) {
				who, n := id.Draw(t, "id"), size.Draw(t, "n")
				want := sum(held)+n <= capacity
				if got := l.TryCredit(who, n); got != want {
					t.Fatalf("TryCredit(%s, %d) = %v, model %v", who, n, got, want)
				}
				if want {
					held[who] += n
					credit[who] += n
				}
			},
			"drop": func(t *rapid.T) {
				who := id.Draw(t, "id")
				l.DropCredit(who)
				held[who] -= credit[who]
				delete(credit, who)
			},
			"release": func(t *rapid.T) {
				who, n := id.Draw(t, "id"), size.Draw(t, "n")
				l.Release(who, n)
				n = min(n, held[who])
				held[who] -= n
				credit[who] = min(credit[who], held[who])
			},
			"forget": func(t *rapid.T) {
				who := id.Draw(t, "id")
				if got := l.Forget(who); got != held[who] {
					t.Fatalf("Forget(%s) = %d, model %d", who, got, held[who])
				}
				delete(held, who)
				delete(credit, who)
			},
			"": func(t *rapid.T) {
				if l.Used() != sum(held) {
					t.Fatalf("used %d, model %d", l.Used(), sum(held))
				}
				if l.Used() > capacity {
					t.Fatalf("used %d past capacity %d", l.Used(), capacity)
				}
				for _, who := range ids {
					if l.Held(who) != held[who] {
						t.Fatalf("held(%s) = %d, model %d", who, l.Held(who), held[who])
					}
					if l.Credit(who) > l.Held(who) {
						t.Fatalf("credit(%s) %d above holding %d", who, l.Credit(who), l.Held(who))
					}
				}
			},
		})
	})
}

func sum(m map[string]uint64) uint64 {
	var s uint64
	for _, v := range m {
		s += v
	}
	return s
}

// TestReserveWaitsForRoom: a reservation that does not fit waits and is
// granted by the release that makes room.
func TestReserveWaitsForRoom(t *testing.T) {
	l := New(100)
	if !l.TryReserve("a", 80) {
		t.Fatal("first reservation refused")
	}
	got := make(chan error, 1)
	go func() { got <- l.Reserve(context.Background(), "b", 50) }()
	l.Release("a", 10) // 30 free: still not enough
	select {
	case err := <-got:
		t.Fatalf("granted with 30 free: %v", err)
	default:
	}
	l.Release("a", 40) // 70 free
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if l.Held("b") != 50 || l.Used() != 80 {
		t.Fatalf("held b %d used %d", l.Held("b"), l.Used())
	}
}

// TestReserveTimesOut: a reservation that never fits ends with ErrNoRoom
// when its context does, and one larger than the device fails at once.
func TestReserveTimesOut(t *testing.T) {
	l := New(100)
	l.TryReserve("a", 100)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	err := l.Reserve(ctx, "b", 1)
	if !errors.Is(err, ErrNoRoom) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want ErrNoRoom and the deadline", err)
	}
	if err := l.Reserve(context.Background(), "b", 101); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("oversized reservation: %v", err)
	}
	if l.Held("b") != 0 {
		t.Fatalf("a failed reservation holds %d", l.Held("b"))
	}
}

// TestCreditIsDrawnDown: a credit covers the next reservations and only
// its holder's.
func TestCreditIsDrawnDown(t *testing.T) {
	l := New(100)
	if err := l.ReserveCredit(context.Background(), "a", 60); err != nil {
		t.Fatal(err)
	}
	if l.TryReserve("b", 50) {
		t.Fatal("b got memory held as a's credit")
	}
	if !l.TryReserve("a", 20) || !l.TryReserve("a", 30) {
		t.Fatal("a's credit did not cover its reservations")
	}
	if l.Held("a") != 60 || l.Credit("a") != 10 {
		t.Fatalf("after drawing: held %d credit %d", l.Held("a"), l.Credit("a"))
	}
	l.DropCredit("a")
	if !l.TryReserve("b", 50) || l.Held("a") != 50 {
		t.Fatalf("the dropped credit did not go back: a holds %d", l.Held("a"))
	}
}
