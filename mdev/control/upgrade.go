package control

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// UpgradeRequest is the body of POST /v1/upgrade.
type UpgradeRequest struct {
	// Binary is the new vgpud; "" is the file this one was started from
	// (replaced on disk by a package upgrade).
	Binary string `json:"binary,omitempty"`
}

// UpgradeReport says what an upgrade in place did (docs/upgrade.md).
type UpgradeReport struct {
	OldPID    int    `json:"old_pid"`
	NewPID    int    `json:"new_pid"`
	Binary    string `json:"binary"`
	Instances int    `json:"instances"`
	Workers   int    `json:"workers"`
	// Paused is how long nothing was served: from the pause of the old
	// process to the new one's commit. Took is the whole upgrade, the
	// new process's start included.
	Paused time.Duration `json:"paused_ns"`
	Took   time.Duration `json:"took_ns"`
}

// Upgrader runs an upgrade in place; after, when not nil, runs once the
// answer has been sent (the old process then exits).
type Upgrader func(ctx context.Context, binary string) (rep *UpgradeReport, after func(), err error)

// WithUpgrade enables POST /v1/upgrade. Every other request passes g,
// which the upgrade closes while it hands the daemon over.
func WithUpgrade(u Upgrader, g *Gate) Option {
	return func(o *options) { o.upgrade, o.gate = u, g }
}

func handleUpgrade(mux *http.ServeMux, u Upgrader) {
	mux.HandleFunc("POST /v1/upgrade", func(w http.ResponseWriter, r *http.Request) {
		var req UpgradeRequest
		if err := decode(r, &req); err != nil {
			reply(w, http.StatusBadRequest, errorBody{Error: "upgrade: body: " + err.Error()})
			return
		}
		ctx, cancel := detachedContext(r, 3*time.Minute)
		defer cancel()
		rep, after, err := u(ctx, req.Binary)
		if err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, ErrUpgradeBusy) {
				code = http.StatusConflict
			}
			reply(w, code, errorBody{Error: err.Error()})
			return
		}
		// The whole answer goes out before after: the process may exit
		// as soon as it returns.
		b, _ := json.Marshal(rep)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		w.Write(b)
		http.NewResponseController(w).Flush()
		if after != nil {
			after()
		}
	})
}

// ErrUpgradeBusy: an upgrade is already in progress.
var ErrUpgradeBusy = errors.New("an upgrade is already in progress")

// ErrUpgraded answers requests that waited while the daemon was handed
// over: the new process serves the same socket, the client retries.
var ErrUpgraded = errors.New("vgpud was upgraded in place while this request waited; send it again")

// Gate lets requests through unless an upgrade holds it: Close waits for
// the requests in progress and holds new ones; Open lets them go on (the
// upgrade was abandoned); Retire answers them ErrUpgraded (it committed).
type Gate struct {
	mu      sync.Mutex
	active  int
	closed  bool
	retired bool
	changed chan struct{} // closed and replaced on every change
}

func (g *Gate) changedLocked() {
	if g.changed != nil {
		close(g.changed)
	}
	g.changed = make(chan struct{})
}

func (g *Gate) wait() <-chan struct{} {
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.changed
}

// enter waits until the gate is open; false: retired, or ctx ended.
func (g *Gate) enter(ctx context.Context) bool {
	g.mu.Lock()
	for g.closed && !g.retired {
		ch := g.wait()
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
		g.mu.Lock()
	}
	defer g.mu.Unlock()
	if g.retired {
		return false
	}
	g.active++
	return true
}

func (g *Gate) leave() {
	g.mu.Lock()
	g.active--
	g.changedLocked()
	g.mu.Unlock()
}

// Close holds new requests and waits for those in progress, for as long
// as ctx lets it (then it opens again and returns ctx's error).
func (g *Gate) Close(ctx context.Context) error {
	g.mu.Lock()
	g.closed = true
	for g.active > 0 {
		ch := g.wait()
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			g.Open()
			return ctx.Err()
		}
		g.mu.Lock()
	}
	g.mu.Unlock()
	return nil
}

// Open lets requests through again.
func (g *Gate) Open() {
	g.mu.Lock()
	g.closed = false
	g.changedLocked()
	g.mu.Unlock()
}

// Retire answers every request from now on with ErrUpgraded.
func (g *Gate) Retire() {
	g.mu.Lock()
	g.retired = true
	g.changedLocked()
	g.mu.Unlock()
}

// gated passes every request but the upgrade and the events stream (a
// follower never ends by itself) through g.
func gated(g *Gate, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/upgrade" || r.URL.Path == eventsPath {
			next.ServeHTTP(w, r)
			return
		}
		if !g.enter(r.Context()) {
			replyUnavailable(w, ErrUpgraded)
			return
		}
		defer g.leave()
		next.ServeHTTP(w, r)
	})
}

// Upgrade upgrades vgpud in place (docs/upgrade.md).
func (c *Client) Upgrade(ctx context.Context, req UpgradeRequest) (*UpgradeReport, error) {
	var rep UpgradeReport
	if err := c.do(ctx, http.MethodPost, "/v1/upgrade", req, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}
