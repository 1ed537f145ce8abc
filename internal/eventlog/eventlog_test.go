package eventlog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestHandler: records naming an event are kept with their instance and
// attributes whatever the log level lets through; the rest only pass on.
func TestHandler(t *testing.T) {
	var out bytes.Buffer
	l := New(8)
	log := slog.New(l.Handler(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn})))
	inst := log.With("instance", "u-1", "profile", "vgpu-small")
	inst.Info("instance created", "device", 0)
	log.Info("something else")
	log.WithGroup("g").Warn("upgrade: new vgpud started", "pid", 42)
	inst.Warn("worker ended", "err", "boom")
	evs, next, _ := l.Since(0)
	if len(evs) != 3 || next != 4 {
		t.Fatalf("Since(0) = %+v, next %d", evs, next)
	}
	for i, want := range []struct{ kind, inst, attr, val string }{
		{"instance.created", "u-1", "device", "0"},
		{"upgrade", "", "g.pid", "42"},
		{"worker.ended", "u-1", "err", "boom"},
	} {
		e := evs[i]
		if e.Seq != uint64(i+1) || e.Kind != want.kind || e.Instance != want.inst || e.Attrs[want.attr] != want.val {
			t.Errorf("event %d = %+v, want %+v", i, e, want)
		}
	}
	// The text handler still gets what its level takes, and only that.
	if s := out.String(); strings.Contains(s, "instance created") || !strings.Contains(s, "worker ended") || !strings.Contains(s, "upgrade: new vgpud started") {
		t.Errorf("the wrapped handler got %q", s)
	}
}

// TestRing: the ring keeps the last max events; Since's channel closes at
// the next event and at Close.
func TestRing(t *testing.T) {
	l := New(3)
	for range 5 {
		l.Add(Event{Kind: "k"})
	}
	evs, next, more := l.Since(0)
	if len(evs) != 3 || evs[0].Seq != 3 || evs[2].Seq != 5 || next != 6 {
		t.Fatalf("Since(0) = %+v, next %d", evs, next)
	}
	if evs, _, _ := l.Since(5); len(evs) != 1 || evs[0].Seq != 5 {
		t.Errorf("Since(5) = %+v", evs)
	}
	select {
	case <-more:
		t.Fatal("more closed with no new event")
	default:
	}
	l.Add(Event{Kind: "k"})
	<-more
	evs, _, more = l.Since(next)
	if len(evs) != 1 || evs[0].Seq != 6 {
		t.Errorf("Since(%d) = %+v", next, evs)
	}
	l.Close()
	<-more
	if !l.Closed() {
		t.Error("Closed() = false after Close")
	}
	l.Add(Event{Kind: "k"}) // a daemon stopping still logs
	if evs, _, more := l.Since(7); len(evs) != 1 {
		t.Errorf("Since(7) after Close = %+v", evs)
	} else {
		<-more
	}
}
