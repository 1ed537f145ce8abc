package libvirt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/vgpud/vgpud/mdev"
)

// Move says how `virsh migrate` moves a domain whose vGPU is on
// vfio-user (migrate.Options.MoveVM).
type Move struct {
	// Domain is the source domain (name, id or UUID); its metadata must
	// name the instance.
	Domain string
	// DestURI is the destination libvirtd's URI as virsh on this host
	// reaches it (virsh migrate --desturi).
	DestURI string
	// MigrateURI, if set, is where the destination QEMU listens for the
	// VM (virsh migrate --migrateuri), e.g. tcp:HOST:PORT.
	MigrateURI string
	// DestRunDir, if set and not this vgpud's run directory, is the
	// destination vgpud's: the domain's paths to the instance's sockets
	// (vfio-user, vgpud's monitor, the agent channel) are rewritten to it
	// in the XML the destination gets (virsh migrate --xml).
	DestRunDir string
}

// ErrNotTheDomain: the domain's metadata does not name the instance.
var ErrNotTheDomain = errors.New("the libvirt domain's metadata does not name the instance")

// MoveVM returns the function migrate.Options.MoveVM runs for instance
// inst: `virsh migrate --live
// --suspend` of mv.Domain to mv.DestURI, with --xml when the
// destination's run directory differs. --suspend leaves the VM paused on
// the destination, for the destination vgpud to run on "go" (its monitor
// in the domain, VFIOUserArgs); libvirt ends the source QEMU once the
// destination has the VM. It checks the domain first: its metadata names
// inst and it has the vfio-user-pci device on inst's socket.
func (a *Attacher) MoveVM(ctx context.Context, inst *mdev.Instance, mv Move) (func(context.Context) error, error) {
	if err := checkName(mv.Domain); err != nil {
		return nil, err
	}
	if mv.DestURI == "" || strings.ContainsAny(mv.DestURI, "\x00\n") || strings.ContainsAny(mv.MigrateURI, "\x00\n") {
		return nil, errors.New("virsh migrate: the destination libvirt URI is required, on one line")
	}
	md, err := a.metadata(ctx, mv.Domain)
	if err != nil {
		return nil, fmt.Errorf("domain %s: %w", mv.Domain, err)
	}
	if md.Instance != inst.UUID() {
		return nil, fmt.Errorf("domain %s names %s, not %s: %w", mv.Domain, md.Instance, inst.UUID(), ErrNotTheDomain)
	}
	dom, err := a.run(ctx, "dumpxml", "--migratable", "--security-info", "--domain", mv.Domain)
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(dom, []byte("vfio-user-pci")) || !bytes.Contains(dom, []byte(inst.Socket())) {
		return nil, fmt.Errorf("domain %s has no vfio-user-pci device on %s (vgpuctl attach -libvirt adds it)", mv.Domain, inst.Socket())
	}
	var xml []byte
	if mv.DestRunDir != "" {
		// It goes into the domain's XML and QEMU's option strings as is.
		if !filepath.IsAbs(mv.DestRunDir) || strings.ContainsAny(mv.DestRunDir, "'\"&<>,\n\x00") {
			return nil, fmt.Errorf("destination run directory %.100q: want an absolute path without ' \" & < > , or newlines", mv.DestRunDir)
		}
		src := filepath.Dir(inst.Socket())
		dst := filepath.Join(mv.DestRunDir, "instances")
		if filepath.Clean(dst) != src {
			old := []byte(filepath.Join(src, inst.UUID()) + ".")
			xml = bytes.ReplaceAll(dom, old, []byte(filepath.Join(dst, inst.UUID())+"."))
		}
	}
	args := []string{"migrate", "--live", "--suspend", "--domain", mv.Domain, "--desturi", mv.DestURI}
	if mv.MigrateURI != "" {
		args = append(args, "--migrateuri", mv.MigrateURI)
	}
	return func(ctx context.Context) error {
		if xml == nil {
			_, err := a.run(ctx, args...)
			return err
		}
		return a.runWithFile(ctx, xml, append(args, "--xml", "/dev/fd/3")...)
	}, nil
}
