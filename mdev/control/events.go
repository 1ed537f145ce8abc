package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/vgpud/vgpud/internal/eventlog"
)

// WithEvents enables GET /v1/events: the daemon's recent events from l
// as JSON lines (vgpuctl events).
func WithEvents(l *eventlog.Log) Option { return func(o *options) { o.events = l } }

// eventsPath is the events stream; it passes the upgrade gate, which would
// otherwise wait for a follower that never ends.
const eventsPath = "/v1/events"

// handleEvents serves GET /v1/events?since=SEQ&follow=1: the events
// numbered SEQ (default 1) or later still held, one JSON object a line;
// with follow, then each new one as it happens until the client goes or
// the log closes (the daemon stops).
func handleEvents(mux *http.ServeMux, l *eventlog.Log) {
	mux.HandleFunc("GET "+eventsPath, func(w http.ResponseWriter, r *http.Request) {
		if l == nil {
			replyErr(w, errors.New("this vgpud keeps no events"))
			return
		}
		q := r.URL.Query()
		var since uint64
		if s := q.Get("since"); s != "" {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				replyErr(w, fmt.Errorf("events: since %q: %w", s, err))
				return
			}
			since = n
		}
		follow := q.Get("follow") == "1" || q.Get("follow") == "true"
		rc := http.NewResponseController(w)
		if follow {
			rc.SetWriteDeadline(time.Time{}) // a follower may wait long; the server's write timeout would cut it
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		enc := json.NewEncoder(w)
		for {
			evs, next, more := l.Since(since)
			for _, e := range evs {
				if enc.Encode(e) != nil {
					return // the client went away
				}
			}
			since = next
			if !follow || rc.Flush() != nil || l.Closed() {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-more:
			}
		}
	})
}

// Events calls fn with each event numbered since or later; with follow it
// then waits for new ones until ctx ends, fn fails or the daemon stops
// (nil).
func (c *Client) Events(ctx context.Context, since uint64, follow bool, fn func(eventlog.Event) error) error {
	q := url.Values{"since": {strconv.FormatUint(since, 10)}}
	if follow {
		q.Set("follow", "1")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://vgpud"+eventsPath+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", eventsPath, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e errorBody
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = string(b)
		}
		return &APIError{Code: resp.StatusCode, Msg: e.Error, Raw: string(b)}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e eventlog.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("GET %s: event: %w", eventsPath, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("GET %s: %w", eventsPath, err)
	}
	return nil
}
