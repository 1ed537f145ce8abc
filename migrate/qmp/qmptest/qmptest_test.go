package qmptest

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client is a bare QMP client: it writes what it is given and reads lines.
type client struct {
	t  *testing.T
	c  net.Conn
	rd *bufio.Reader
}

func dial(t *testing.T, s *Server) *client {
	t.Helper()
	c, err := net.Dial("unix", s.Path())
	if err != nil {
		t.Fatalf("dial %s: %v", s.Path(), err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, rd: bufio.NewReader(c)}
}

// next reads one message as a generic JSON value.
func (c *client) next() map[string]any {
	c.t.Helper()
	line, err := c.rd.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	var v map[string]any
	if err := json.Unmarshal(line, &v); err != nil {
		c.t.Fatalf("message %q: %v", line, err)
	}
	return v
}

func (c *client) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestServer(t *testing.T) {
	s := NewServer(t)
	s.Handle("query-status", func(args json.RawMessage, files []*os.File) (any, error) {
		return map[string]any{"running": false, "status": "prelaunch"}, nil
	})
	s.Handle("device_del", func(json.RawMessage, []*os.File) (any, error) {
		return nil, &Error{Class: "DeviceNotFound", Desc: "Device 'x' not found"}
	})
	s.Handle("stop", func(json.RawMessage, []*os.File) (any, error) {
		return nil, errors.New("cannot stop")
	})
	c := dial(t, s)
	if diff := cmp.Diff(decode(t, Greeting), c.next()); diff != "" {
		t.Errorf("greeting (-want +got):\n%s", diff)
	}

	steps := []struct {
		send string
		want string
	}{
		{`{"execute": "query-status", "id": 1}`,
			`{"error": {"class": "CommandNotFound", "desc": "Expecting capabilities negotiation with 'qmp_capabilities'"}, "id": 1}`},
		{`{"execute": "qmp_capabilities", "id": "a"}`, `{"return": {}, "id": "a"}`},
		{`{"execute": "qmp_capabilities"}`,
			`{"error": {"class": "CommandNotFound", "desc": "Capabilities negotiation is already complete, command ignored"}}`},
		{`{"execute": "query-status", "id": 2}`, `{"return": {"running": false, "status": "prelaunch"}, "id": 2}`},
		{`{"execute": "device_del", "arguments": {"id": "x"}, "id": 3}`,
			`{"error": {"class": "DeviceNotFound", "desc": "Device 'x' not found"}, "id": 3}`},
		{`{"execute": "stop", "id": 4}`, `{"error": {"class": "GenericError", "desc": "cannot stop"}, "id": 4}`},
		{`{"execute": "x-nope", "id": 5}`,
			`{"error": {"class": "CommandNotFound", "desc": "The command x-nope has not been found"}, "id": 5}`},
	}
	for _, st := range steps {
		c.send(st.send)
		if diff := cmp.Diff(decode(t, st.want), c.next()); diff != "" {
			t.Errorf("reply to %s (-want +got):\n%s", st.send, diff)
		}
	}

	s.Emit("STOP", nil)
	s.Emit("MIGRATION", map[string]string{"status": "setup"})
	for _, want := range []string{`{"event": "STOP"}`, `{"event": "MIGRATION", "data": {"status": "setup"}}`} {
		got := c.next()
		ts, ok := got["timestamp"].(map[string]any)
		if !ok || ts["seconds"] == nil || ts["microseconds"] == nil {
			t.Errorf("event %v has no timestamp", got)
		}
		delete(got, "timestamp")
		if diff := cmp.Diff(decode(t, want), got); diff != "" {
			t.Errorf("event (-want +got):\n%s", diff)
		}
	}

	want := []Command{
		{Name: "query-status"},
		{Name: "qmp_capabilities"},
		{Name: "qmp_capabilities"},
		{Name: "query-status"},
		{Name: "device_del", Args: json.RawMessage(`{"id": "x"}`)},
		{Name: "stop"},
		{Name: "x-nope"},
	}
	if diff := cmp.Diff(want, s.Commands()); diff != "" {
		t.Errorf("Commands() (-want +got):\n%s", diff)
	}

	// Hangup ends this connection; the server still accepts another.
	s.Hangup()
	if _, err := c.rd.ReadBytes('\n'); err == nil {
		t.Error("read after Hangup succeeded")
	}
	c2 := dial(t, s)
	c2.next()
	c2.send(`{"execute": "qmp_capabilities", "id": 1}`)
	if diff := cmp.Diff(decode(t, `{"return": {}, "id": 1}`), c2.next()); diff != "" {
		t.Errorf("second connection (-want +got):\n%s", diff)
	}
}
