package control

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/migrate/libvirt"
)

// noDomains is a virsh whose libvirt has no domains.
type noDomains struct{}

func (noDomains) Run(_ context.Context, _ []*os.File, args ...string) ([]byte, error) {
	return nil, &libvirt.VirshError{Args: args, Code: 1, Message: "failed to get domain 'vm1'"}
}

func (noDomains) Start(context.Context, ...string) (io.ReadCloser, func() error, error) {
	return nil, nil, errors.New("no events here")
}

// TestAttachAPI: POST /v1/instances/{uuid}/attach needs a domain, an
// attacher, a known instance and a known domain; each case has its own
// status.
func TestAttachAPI(t *testing.T) {
	ctx := context.Background()
	status := func(err error) int {
		var ae *APIError
		if !errors.As(err, &ae) {
			t.Fatalf("error %v is not an API error", err)
		}
		return ae.Code
	}
	c := serve(t)
	in, err := c.Create(ctx, mdev.CreateRequest{Profile: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Attach(ctx, in.UUID, AttachRequest{Libvirt: "vm1"}); status(err) != http.StatusServiceUnavailable {
		t.Errorf("without an attacher: %v", err)
	}
	c = serve(t, func(m *mdev.Manager) Option { return WithLibvirt(&libvirt.Attacher{Manager: m, Virsh: noDomains{}}) })
	if in, err = c.Create(ctx, mdev.CreateRequest{Profile: "p"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Attach(ctx, in.UUID, AttachRequest{}); status(err) != http.StatusBadRequest {
		t.Errorf("no domain: %v", err)
	}
	if _, err := c.Attach(ctx, "6f0c1c52-1111-4a3b-9c3e-00000000dead", AttachRequest{Libvirt: "vm1"}); status(err) != http.StatusNotFound {
		t.Errorf("unknown instance: %v", err)
	}
	if _, err := c.Attach(ctx, in.UUID, AttachRequest{Libvirt: "vm1"}); status(err) != http.StatusNotFound {
		t.Errorf("unknown domain: %v", err)
	}
}
