// Package eventlog keeps vgpud's recent events, an audit trail an
// operator reads with vgpuctl events: instances created, destroyed,
// attached, changed, lost and recovered; workers started and ended;
// migrations; upgrades in place; the daemon starting and stopping.
//
// The events are the daemon's own log records of those things: Handler
// wraps the daemon's slog.Handler and keeps each record whose message
// names an event (Kinds) in a ring of the most recent ones, whatever the
// log level lets through. The ring is in memory: a restart or an upgrade
// in place starts a new one (its sequence numbers from 1 again).
package eventlog

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Event is one thing that happened.
type Event struct {
	// Seq numbers the events of this daemon from 1.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Kind is the event's class (Kinds), e.g. "instance.created".
	Kind string `json:"kind"`
	// Msg is the log message it came from, Level its level.
	Msg   string `json:"msg"`
	Level string `json:"level"`
	// Instance is the instance it is about, if any.
	Instance string `json:"instance,omitempty"`
	// Attrs are the record's other attributes, as text.
	Attrs map[string]string `json:"attrs,omitempty"`
}

// Kinds maps a log message to its event kind; a message ending in ':'
// matches every message it begins (upgrade: ...).
var Kinds = map[string]string{
	"instance created":                 "instance.created",
	"instance destroyed":               "instance.destroyed",
	"vm attached":                      "instance.attached",
	"vm detached":                      "instance.detached",
	"vm connection ended":              "instance.detached",
	"profile changed":                  "instance.profile",
	"limits set":                       "instance.limits",
	"share set":                        "instance.share",
	"reuse set":                        "instance.reuse",
	"overcommit set":                   "instance.overcommit",
	"instance reallocated":             "instance.reallocated",
	"instance relocated":               "instance.relocated",
	"instance lost its device context": "instance.lost",
	"instance back on a fresh worker":  "instance.recovered",
	"instance reset":                   "instance.reset",
	"overcommit: suspended to host memory until the device has room": "instance.suspended",
	"overcommit: resumed from host memory":                           "instance.resumed",
	"reattached the VM's vGPU after a restart":                       "instance.reattached",
	"worker started":                  "worker.started",
	"worker stopped":                  "worker.stopped",
	"worker ended":                    "worker.ended",
	"ending worker":                   "worker.ending",
	"migrated":                        "migration.done",
	"migration failed, rolling back":  "migration.failed",
	"incoming migration":              "migration.incoming",
	"incoming migration committed":    "migration.committed",
	"migration aborted by the source": "migration.aborted",
	"upgrade:":                        "upgrade",
	"upgraded on SIGHUP":              "upgrade",
	"upgrade on SIGHUP":               "upgrade",
	"serving":                         "daemon.serving",
	"shutting down: telling the guests, draining fetched commands": "daemon.stopping",
	"scheduling policy set":  "device.policy",
	"placement set":          "placement.set",
	"profile overcommit set": "profile.overcommit",
	"reuse budget set":       "reuse.budget",
}

// kindOf is msg's event kind, "" for none.
func kindOf(msg string) string {
	if k, ok := Kinds[msg]; ok {
		return k
	}
	if p, _, ok := strings.Cut(msg, ": "); ok {
		return Kinds[p+":"]
	}
	return ""
}

// Log is a ring of the most recent events.
type Log struct {
	mu sync.Mutex
	// Guarded by mu.
	ring   []Event       // the last len(ring) events, oldest at start
	start  int           // index of the oldest in ring once full
	next   uint64        // Seq of the next event
	wake   chan struct{} // closed at the next Add or Close
	closed bool
	max    int
}

// New is a log keeping the last max events.
func New(max int) *Log {
	return &Log{next: 1, wake: make(chan struct{}), max: max}
}

// Add records e (its Seq set here) and wakes the followers.
func (l *Log) Add(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.Seq = l.next
	l.next++
	if len(l.ring) < l.max {
		l.ring = append(l.ring, e)
	} else {
		l.ring[l.start] = e
		l.start = (l.start + 1) % l.max
	}
	if !l.closed { // closed: wake stays closed
		close(l.wake)
		l.wake = make(chan struct{})
	}
}

// Since returns the events held numbered seq or later, oldest first, the
// Seq the next call should ask for, and a channel closed when there is
// more (or the log closed).
func (l *Log) Since(seq uint64) (evs []Event, next uint64, more <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.ring {
		e := l.ring[(l.start+i)%len(l.ring)]
		if e.Seq >= seq {
			evs = append(evs, e)
		}
	}
	return evs, max(seq, l.next), l.wake
}

// Close ends the followers (Since's channel closes and stays closed);
// events are still recorded.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.wake)
	}
}

// Closed reports whether Close was called.
func (l *Log) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Handler wraps inner: every record passes to inner as before (if inner
// takes its level), and those naming an event are recorded in l whatever
// their level.
func (l *Log) Handler(inner slog.Handler) slog.Handler {
	return &handler{log: l, inner: inner}
}

type handler struct {
	log    *Log
	inner  slog.Handler
	attrs  []slog.Attr // from WithAttrs, keys prefixed by their groups
	prefix string      // the groups so far, "a.b."
}

func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo || h.inner.Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if k := kindOf(r.Message); k != "" && r.Level >= slog.LevelInfo {
		e := Event{Time: r.Time, Kind: k, Msg: r.Message, Level: r.Level.String()}
		add := func(a slog.Attr, prefix string) {
			if a.Key == "instance" && prefix == "" {
				e.Instance = a.Value.String()
				return
			}
			if e.Attrs == nil {
				e.Attrs = map[string]string{}
			}
			e.Attrs[prefix+a.Key] = a.Value.Resolve().String()
		}
		for _, a := range h.attrs {
			add(a, "")
		}
		r.Attrs(func(a slog.Attr) bool {
			add(a, h.prefix)
			return true
		})
		h.log.Add(e)
	}
	if !h.inner.Enabled(ctx, r.Level) {
		return nil
	}
	if err := h.inner.Handle(ctx, r); err != nil {
		return fmt.Errorf("eventlog: %w", err)
	}
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.inner = h.inner.WithAttrs(as)
	n.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range as {
		n.attrs = append(n.attrs, slog.Attr{Key: h.prefix + a.Key, Value: a.Value})
	}
	return &n
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.inner = h.inner.WithGroup(name)
	n.prefix = h.prefix + name + "."
	return &n
}
