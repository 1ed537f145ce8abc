package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"

	"github.com/vgpud/vgpud/internal/buildinfo"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/migrate"
)

// Client talks to a vgpud control socket.
type Client struct {
	hc   *http.Client
	path string
}

// ErrUnreachable wraps a failure to connect to the control socket (no
// vgpud there, or no permission), so that a caller tells it from every
// other error, a missing file among them.
var ErrUnreachable = errors.New("cannot connect to the control socket")

// NewClient returns a client for the control socket at path.
func NewClient(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", path)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
			}
			return c, nil
		},
	}
	return &Client{hc: &http.Client{Transport: tr}, path: path}
}

// SocketPath is the control socket the client talks to.
func (c *Client) SocketPath() string { return c.path }

// APIError is an error reply from vgpud.
type APIError struct {
	Code int
	Msg  string
	Raw  string // the body as it came
}

func (e *APIError) Error() string { return fmt.Sprintf("vgpud: %s (http %d)", e.Msg, e.Code) }

// Is maps HTTP codes back to mdev's sentinels.
func (e *APIError) Is(target error) bool {
	switch target {
	case mdev.ErrNotFound:
		return e.Code == http.StatusNotFound
	case mdev.ErrExists, mdev.ErrNoCapacity:
		return e.Code == http.StatusConflict
	}
	return false
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://vgpud"+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e errorBody
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = string(b)
		}
		return &APIError{Code: resp.StatusCode, Msg: e.Error, Raw: string(b)}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: reply: %w", method, path, err)
	}
	return nil
}

// Version is the daemon's build.
func (c *Client) Version(ctx context.Context) (buildinfo.Info, error) {
	var out buildinfo.Info
	return out, c.do(ctx, http.MethodGet, "/v1/version", nil, &out)
}

// Devices lists the physical devices.
func (c *Client) Devices(ctx context.Context) ([]mdev.DeviceStatus, error) {
	var out []mdev.DeviceStatus
	return out, c.do(ctx, http.MethodGet, "/v1/devices", nil, &out)
}

// Profiles lists the vGPU types.
func (c *Client) Profiles(ctx context.Context) ([]mdev.Profile, error) {
	var out []mdev.Profile
	return out, c.do(ctx, http.MethodGet, "/v1/profiles", nil, &out)
}

// Instances lists the instances.
func (c *Client) Instances(ctx context.Context) ([]InstanceInfo, error) {
	var out []InstanceInfo
	return out, c.do(ctx, http.MethodGet, "/v1/instances", nil, &out)
}

// Instance shows one instance.
func (c *Client) Instance(ctx context.Context, id string) (InstanceInfo, error) {
	var out InstanceInfo
	return out, c.do(ctx, http.MethodGet, "/v1/instances/"+url.PathEscape(id), nil, &out)
}

// Create creates an instance.
func (c *Client) Create(ctx context.Context, req mdev.CreateRequest) (InstanceInfo, error) {
	var out InstanceInfo
	return out, c.do(ctx, http.MethodPost, "/v1/instances", req, &out)
}

// Destroy destroys an instance.
func (c *Client) Destroy(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/instances/"+url.PathEscape(id), nil, nil)
}

// Reattach gives instance id's running VM its vGPU back after vgpud
// restarted (migrate.Reattach).
func (c *Client) Reattach(ctx context.Context, id string, req ReattachRequest) (*migrate.ReattachReport, error) {
	var rep migrate.ReattachReport
	if err := c.do(ctx, http.MethodPost, "/v1/instances/"+url.PathEscape(id)+"/reattach", req, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// Migrate moves an instance and its VM to another vgpud
// (docs/migration.md). A failed migration returns its report (rolled
// back) with the error.

func (c *Client) Migrate(ctx context.Context, id string, req MigrateRequest) (*migrate.Report, error) {
	var rep MigrateReply
	err := c.do(ctx, "POST", "/v1/instances/"+id+"/migrate", req, &rep)
	var ae *APIError
	if errors.As(err, &ae) && ae.Code == http.StatusConflict {
		var mr MigrateReply
		if json.Unmarshal([]byte(ae.Raw), &mr) == nil && mr.Report != nil {
			return mr.Report, fmt.Errorf("vgpud: %s", mr.Error)
		}
	}
	if err != nil {
		return nil, err
	}
	return rep.Report, nil
}
