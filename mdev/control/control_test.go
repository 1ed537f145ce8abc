package control

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/worker/child"
)

func TestMain(m *testing.M) {
	child.EnterRole() // a worker or executor of this test binary's pool
	goleak.VerifyTestMain(m)
}

// serve runs the API over a real manager on a Unix socket.
func serve(t *testing.T, opts ...func(*mdev.Manager) Option) *Client {
	t.Helper()
	d, err := gpu.Open("")
	if err != nil {
		t.Fatalf("gpu.Open: %v", err)
	}
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{d}, SocketDir: t.TempDir(), Transport: mpqemu.Transport{},
		Profiles: []mdev.Profile{{Name: "p", MemBytes: 16 << 20, Share: 1, MaxPerDevice: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "control.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var hopts []Option
	for _, o := range opts {
		hopts = append(hopts, o(m))
	}
	srv := &http.Server{Handler: Handler(m, hopts...)}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	c := NewClient(sock)
	t.Cleanup(func() {
		srv.Close()
		<-done
		c.hc.CloseIdleConnections()
		m.Close()
		d.Close()
	})
	return c
}

func TestAPI(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	ps, err := c.Profiles(ctx)
	if err != nil || len(ps) != 1 || ps[0].Name != "p" {
		t.Fatalf("Profiles() = %+v, %v", ps, err)
	}
	info, err := c.Create(ctx, mdev.CreateRequest{Profile: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Profile.MemBytes != 16<<20 || info.Socket == "" || info.Attached {
		t.Errorf("Create() = %+v", info)
	}
	got, err := c.Instance(ctx, info.UUID)
	if err != nil || got.UUID != info.UUID {
		t.Errorf("Instance(%s) = %+v, %v", info.UUID, got, err)
	}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"second instance over max_per_device", func() error { _, err := c.Create(ctx, mdev.CreateRequest{Profile: "p"}); return err }, mdev.ErrNoCapacity},
		{"same uuid", func() error {
			_, err := c.Create(ctx, mdev.CreateRequest{Profile: "p", UUID: info.UUID})
			return err
		}, mdev.ErrExists},
		{"unknown instance", func() error { _, err := c.Instance(ctx, "nope"); return err }, mdev.ErrNotFound},
		{"destroy unknown", func() error { return c.Destroy(ctx, "nope") }, mdev.ErrNotFound},
	}
	for _, tt := range tests {
		if err := tt.call(); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	var apiErr *APIError
	if _, err := c.Create(ctx, mdev.CreateRequest{Profile: "missing"}); !errors.As(err, &apiErr) || apiErr.Code != http.StatusBadRequest {
		t.Errorf("Create(unknown profile) = %v, want http 400", err)
	}
	if err := c.Destroy(ctx, info.UUID); err != nil {
		t.Fatal(err)
	}
	if list, err := c.Instances(ctx); err != nil || len(list) != 0 {
		t.Errorf("Instances() after destroy = %+v, %v", list, err)
	}
}

// TestRejectsTrailingData: every endpoint that takes a body refuses one
// with anything after its JSON value, and changes nothing.
func TestRejectsTrailingData(t *testing.T) {
	c := serve(t)
	var in InstanceInfo
	if err := c.do(context.Background(), http.MethodPost, "/v1/instances", map[string]any{"profile": "p"}, &in); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/instances", `{"profile": "p"}`},
		{http.MethodPut, "/v1/instances/" + in.UUID + "/share", `{"share": 2}`},
		{http.MethodPut, "/v1/instances/" + in.UUID + "/profile", `{"profile": "p"}`},
		{http.MethodPut, "/v1/devices/0/policy", `{"policy": "equal-share"}`},
		{http.MethodPost, "/v1/instances/" + in.UUID + "/migrate", `{"to": "h:1", "uri": "unix:/x"}`},
	} {
		for _, trail := range []string{" {}", "}", " x", "\n[1]"} {
			req, err := http.NewRequest(tt.method, "http://vgpud"+tt.path, strings.NewReader(tt.body+trail))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "body") {
				t.Errorf("%s %s %q: http %d %s, want 400", tt.method, tt.path, tt.body+trail, resp.StatusCode, b)
			}
		}
	}
	var list []InstanceInfo
	if err := c.do(context.Background(), http.MethodGet, "/v1/instances", nil, &list); err != nil || len(list) != 1 {
		t.Errorf("instances after refused requests: %v, %v; want the one created", list, err)
	}
}

func TestRejectsBadBody(t *testing.T) {
	c := serve(t)
	err := c.do(context.Background(), http.MethodPost, "/v1/instances", map[string]any{"profile": "p", "bogus": 1}, nil)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != http.StatusBadRequest {
		t.Errorf("create with unknown field = %v, want http 400", err)
	}
}
