package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/mdev"
)

// fakeXen records what the API asked and answers what it is told.
type fakeXen struct {
	got []XenAttachRequest
	err error
}

func (f *fakeXen) AttachXen(_ context.Context, id string, req XenAttachRequest) error {
	f.got = append(f.got, req)
	return f.err
}

// TestXenAttachAPI: the body is checked before the attacher is called,
// a daemon without one says so, and the attacher's errors keep their
// meaning across the socket.
func TestXenAttachAPI(t *testing.T) {
	ctx := context.Background()
	if err := serve(t).AttachXen(ctx, "x", XenAttachRequest{Domain: 3, PCI: "00:05.0"}); err == nil || !strings.Contains(err.Error(), ErrNoXen.Error()) {
		t.Errorf("attach without an attacher = %v, want %v", err, ErrNoXen)
	}
	f := &fakeXen{}
	c := serve(t, func(*mdev.Manager) Option { return WithXen(f) })
	for _, bad := range []XenAttachRequest{{PCI: "00:05.0"}, {Domain: 3}} {
		if err := c.AttachXen(ctx, "x", bad); err == nil {
			t.Errorf("attach %+v succeeded", bad)
		}
	}
	if len(f.got) != 0 {
		t.Fatalf("the attacher was called for bad bodies: %+v", f.got)
	}
	want := XenAttachRequest{Domain: 3, PCI: "00:05.0", VCPUs: 2, RAMBytes: 1 << 30}
	if err := c.AttachXen(ctx, "x", want); err != nil || len(f.got) != 1 || f.got[0] != want {
		t.Fatalf("attach = %v, attacher got %+v", err, f.got)
	}
	f.err = fmt.Errorf("xen attach x: %w", mdev.ErrAttached)
	var ae *APIError
	if err := c.AttachXen(ctx, "x", want); !errors.As(err, &ae) || ae.Code != 409 || !strings.Contains(ae.Msg, mdev.ErrAttached.Error()) {
		t.Errorf("attach of an attached instance = %v, want 409 saying %q", err, mdev.ErrAttached)
	}
}
