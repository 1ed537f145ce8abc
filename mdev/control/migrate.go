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

// MigrateRequest is the body of POST /v1/instances/{uuid}/migrate.
type MigrateRequest struct {
	// To is the destination vgpud's migration listener (host:port).
	To string `json:"to"`
	// URI is the destination QEMU's -incoming address (tcp:HOST:PORT or
	// unix:PATH).
	URI string `json:"uri"`
	// QMP overrides the source QEMU's monitor socket.
	QMP string `json:"qmp,omitempty"`
	// DeviceID is the vGPU's QEMU device id (default vgpu0).
	DeviceID  string `json:"device_id,omitempty"`
	MaxRounds int    `json:"max_rounds,omitempty"`
	NoPrecopy bool   `json:"no_precopy,omitempty"`
	// QuiesceFirst quiesces the guest before QEMU copies the VM even on
	// vfio-user, where the vGPU may keep running meanwhile.
	QuiesceFirst bool `json:"quiesce_first,omitempty"`
	// QEMUBandwidth caps QEMU's migration of the VM, bytes/s (0: none).
	QEMUBandwidth uint64 `json:"qemu_bandwidth,omitempty"`
	// Libvirt, if set, is the VM's libvirt domain: libvirt moves it
	// (virsh migrate --live to LibvirtTo, through MigrateURI if set, in
	// place of the QMP migrate to URI), the vGPU staying attached
	// (vfio-user; docs/migration.md "libvirt").
	Libvirt   string `json:"libvirt,omitempty"`
	LibvirtTo string `json:"libvirt_to,omitempty"`
	// DestRunDir is the destination vgpud's run directory when it is not
	// this one's: the domain's socket paths are rewritten to it.
	DestRunDir string `json:"dest_run_dir,omitempty"`
}

// ErrNoMigration is returned when the daemon was started without a
// migration TLS directory.
var ErrNoMigration = errors.New("migration is not set up on this vgpud: start it with -migrate-tls DIR (docs/migration.md)")

func handleMigrate(mux *http.ServeMux, m *mdev.Manager, t *migrate.TLS, lv *libvirt.Attacher) {
	mux.HandleFunc("POST /v1/instances/{uuid}/migrate", func(w http.ResponseWriter, r *http.Request) {
		var req MigrateRequest
		if err := decode(r, &req); err != nil {
			replyErr(w, fmt.Errorf("migrate: body: %w", err))
			return
		}
		if t == nil {
			replyUnavailable(w, ErrNoMigration)
			return
		}
		// The migration is not tied to the operator's connection: a
		// vgpuctl that gives up must not leave the VM half moved.
		ctx, cancel := detachedContext(r, 30*time.Minute)
		defer cancel()
		opts := migrate.Options{To: req.To, URI: req.URI, QMP: req.QMP,
			DeviceID: req.DeviceID, MaxRounds: req.MaxRounds, NoPrecopy: req.NoPrecopy, QuiesceFirst: req.QuiesceFirst, QEMUBandwidth: req.QEMUBandwidth, TLS: t}
		if req.Libvirt != "" {
			if lv == nil {
				replyUnavailable(w, ErrNoLibvirt)
				return
			}
			inst, err := m.Get(r.PathValue("uuid"))
			if err != nil {
				replyErr(w, fmt.Errorf("migrate: %w", err))
				return
			}
			opts.MoveVM, err = lv.MoveVM(ctx, inst, libvirt.Move{Domain: req.Libvirt, DestURI: req.LibvirtTo,
				MigrateURI: req.URI, DestRunDir: req.DestRunDir})
			if err != nil {
				replyErr(w, fmt.Errorf("migrate %s with libvirt: %w", inst.UUID(), err))
				return
			}
			opts.URI = ""
		}
		rep, err := migrate.Migrate(ctx, m, r.PathValue("uuid"), opts)
		if err != nil {
			if rep == nil {
				replyErr(w, err)
				return
			}
			reply(w, http.StatusConflict, MigrateReply{Error: err.Error(), Report: rep})
			return
		}
		reply(w, http.StatusOK, MigrateReply{Report: rep})
	})
}

// ReattachRequest is the body of POST /v1/instances/{uuid}/reattach.
type ReattachRequest struct {
	QMP      string `json:"qmp,omitempty"`
	DeviceID string `json:"device_id,omitempty"`
}

func handleReattach(mux *http.ServeMux, m *mdev.Manager) {
	mux.HandleFunc("POST /v1/instances/{uuid}/reattach", func(w http.ResponseWriter, r *http.Request) {
		var req ReattachRequest
		if err := decode(r, &req); err != nil {
			replyErr(w, fmt.Errorf("reattach: body: %w", err))
			return
		}
		ctx, cancel := detachedContext(r, 3*time.Minute)
		defer cancel()
		rep, err := migrate.Reattach(ctx, m, r.PathValue("uuid"), migrate.ReattachOptions{QMP: req.QMP, DeviceID: req.DeviceID})
		if errors.Is(err, migrate.ErrAttached) {
			reply(w, http.StatusConflict, errorBody{Error: err.Error()})
			return
		}
		if err != nil {
			replyErr(w, err)
			return
		}
		reply(w, http.StatusOK, rep)
	})
}

// MigrateReply is the answer: the report, and the error of a migration
// that failed (and was rolled back, Report.RolledBack).
type MigrateReply struct {
	Error  string          `json:"error,omitempty"`
	Report *migrate.Report `json:"report"`
}
