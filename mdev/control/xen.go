package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/vgpud/vgpud/mdev"
)

// XenAttachRequest is the body of POST /v1/instances/{uuid}/xen: serve
// the instance's vGPU to a running Xen HVM domain as an ioreq server
// (docs/xen.md).
type XenAttachRequest struct {
	// Domain is the HVM guest's domain id (xl domid NAME).
	Domain uint32 `json:"domain"`
	// PCI is the function the vGPU claims in the guest, "bb:dd.f" or
	// "ssss:bb:dd.f": a slot on bus 0 the domain's QEMU leaves free.
	PCI string `json:"pci"`
	// VCPUs is the number of vCPUs to serve; 0 asks Xen.
	VCPUs int `json:"vcpus,omitempty"`
	// RAMBytes is the guest's memory (xl.cfg maxmem=, else memory=) in
	// bytes: the device may reach the guest-physical frames hvmloader can
	// lay that much RAM out in (xen.RAMWindow). 0: the device gets no
	// guest RAM under real Xen (registers only; docs/xen.md).
	RAMBytes uint64 `json:"ram_bytes,omitempty"`
}

// XenAttacher starts serving an instance to a Xen domain and returns once
// the ioreq server serves (or failed to set up); the session then lives
// until the domain goes away or the instance is destroyed.
type XenAttacher interface {
	AttachXen(ctx context.Context, id string, req XenAttachRequest) error
}

// ErrNoXen is returned when the daemon has no Xen attacher.
var ErrNoXen = errors.New("xen attach is not set up on this vgpud")

// WithXen enables POST /v1/instances/{uuid}/xen through a.
func WithXen(a XenAttacher) Option { return func(o *options) { o.xen = a } }

func handleXen(mux *http.ServeMux, a XenAttacher) {
	mux.HandleFunc("POST /v1/instances/{uuid}/xen", func(w http.ResponseWriter, r *http.Request) {
		var req XenAttachRequest
		if err := decode(r, &req); err != nil {
			replyErr(w, fmt.Errorf("xen attach: body: %w", err))
			return
		}
		if req.Domain == 0 || req.PCI == "" {
			replyErr(w, errors.New(`xen attach: say which domain and slot: {"domain": N, "pci": "00:05.0"} (domain 0 is dom0, never a guest)`))
			return
		}
		if a == nil {
			replyUnavailable(w, ErrNoXen)
			return
		}
		err := a.AttachXen(r.Context(), r.PathValue("uuid"), req)
		switch {
		case err == nil:
			w.WriteHeader(http.StatusNoContent)
		case errors.Is(err, mdev.ErrAttached):
			reply(w, http.StatusConflict, errorBody{Error: err.Error()})
		default:
			replyErr(w, err)
		}
	})
}

// AttachXen serves instance id's vGPU to a Xen domain (XenAttacher).
func (c *Client) AttachXen(ctx context.Context, id string, req XenAttachRequest) error {
	return c.do(ctx, http.MethodPost, "/v1/instances/"+url.PathEscape(id)+"/xen", req, nil)
}
