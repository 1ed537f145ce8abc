package control

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/libvirt"
)

// AttachRequest is the body of POST /v1/instances/{uuid}/attach.
type AttachRequest struct {
	// Libvirt is the libvirt domain (name, id or UUID) that gets the
	// instance's vGPU (docs/operating.md, "libvirt-managed VMs").
	Libvirt string `json:"libvirt"`
}

// ErrNoLibvirt is returned when the daemon has no libvirt attacher.
var ErrNoLibvirt = errors.New("libvirt attach is not set up on this vgpud")

// WithLibvirt enables POST /v1/instances/{uuid}/attach through a.
func WithLibvirt(a *libvirt.Attacher) Option { return func(o *options) { o.libvirt = a } }

func handleAttach(mux *http.ServeMux, a *libvirt.Attacher) {
	mux.HandleFunc("POST /v1/instances/{uuid}/attach", func(w http.ResponseWriter, r *http.Request) {
		var req AttachRequest
		if err := decode(r, &req); err != nil {
			replyErr(w, fmt.Errorf("attach: body: %w", err))
			return
		}
		if req.Libvirt == "" {
			replyErr(w, errors.New(`attach: say which VM: {"libvirt": "DOMAIN"}`))
			return
		}
		if a == nil {
			replyUnavailable(w, ErrNoLibvirt)
			return
		}
		// Not tied to the operator's connection: a vgpuctl that gives up
		// must not leave a domain started paused without its vGPU.
		ctx, cancel := detachedContext(r, 4*time.Minute)
		defer cancel()
		rep, err := a.Attach(ctx, req.Libvirt, r.PathValue("uuid"))
		switch {
		case err == nil:
			reply(w, http.StatusOK, rep)
		case errors.Is(err, mdev.ErrNotFound), errors.Is(err, libvirt.ErrNoDomain):
			reply(w, http.StatusNotFound, errorBody{Error: err.Error()})
		case errors.Is(err, migrate.ErrAttached), errors.Is(err, libvirt.ErrDomainHasOther), errors.Is(err, libvirt.ErrNotActive),
			errors.Is(err, libvirt.ErrNeedsDefinition), errors.Is(err, libvirt.ErrOtherVFIOUser):
			reply(w, http.StatusConflict, errorBody{Error: err.Error()})
		default:
			replyErr(w, err)
		}
	})
}
