package control

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/internal/eventlog"
	"github.com/vgpud/vgpud/mdev"
)

// TestEvents: GET /v1/events lists the events kept; a follower gets each
// new one as it happens and ends when the log closes (the daemon stops);
// an instance's name works in its paths.
func TestEvents(t *testing.T) {
	d, err := gpu.Open("")
	if err != nil {
		t.Fatalf("gpu.Open: %v", err)
	}
	defer d.Close()
	l := eventlog.New(64)
	log := slog.New(l.Handler(slog.DiscardHandler))
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{d}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sock := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: Handler(m, WithEvents(l))}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() { srv.Close(); <-served }()
	c := NewClient(sock)

	a, err := c.Create(context.Background(), mdev.CreateRequest{Profile: "vgpu-small", Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var got []eventlog.Event
	if err := c.Events(context.Background(), 0, false, func(e eventlog.Event) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	last := got[len(got)-1]
	if last.Kind != "instance.created" || last.Instance != a.UUID || last.Attrs["name"] != "a" || got[0].Kind != "worker.started" {
		t.Fatalf("events = %+v, want its worker started, then it created", got)
	}

	evs := make(chan eventlog.Event)
	done := make(chan error, 1)
	go func() {
		done <- c.Events(context.Background(), last.Seq+1, true, func(e eventlog.Event) error { evs <- e; return nil })
	}()
	if err := c.Destroy(context.Background(), "a"); err != nil { // by name
		t.Fatal(err)
	}
	for e := range evs { // its worker may stop first
		if e.Kind == "instance.destroyed" {
			if e.Instance != a.UUID {
				t.Errorf("followed %+v, want instance.destroyed of %s", e, a.UUID)
			}
			break
		}
	}
	go func() { // the worker's events may still come
		for range evs {
		}
	}()
	l.Close()
	if err := <-done; err != nil {
		t.Errorf("follower after Close = %v", err)
	}
	close(evs)
	var ae *APIError
	if err := c.Events(context.Background(), 0, false, func(eventlog.Event) error { return nil }); errors.As(err, &ae) {
		t.Errorf("events after Close = %v, want them still listed", err)
	}
}
