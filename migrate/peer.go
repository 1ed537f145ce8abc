package migrate

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// The channel between two vgpud daemons (docs/migration.md "The channel").
// After the TLS handshake the source sends the migration stream; the
// destination answers each step with one JSON line (a Reply); after the
// stream's End the source sends one JSON line (a Command) and the
// destination answers it.

// Reply is the destination's answer to one step.
type Reply struct {
	Step  string `json:"step"`            // "instance", "round", "commit", "abort"
	Round uint32 `json:"round,omitempty"` // for "round"
	Error string `json:"error,omitempty"` // empty: done
	// Device is the destination's physical device (for "instance").
	Device string `json:"device,omitempty"`
	// KeepsDevice (for "instance"): the destination's VMMs keep the vGPU
	// attached across QEMU's migration (vfio-user) rather than having it
	// plugged at commit (mpqemu). Source and destination must agree.
	KeepsDevice bool `json:"keeps_device,omitempty"`
	// GuestPages (for "instance"): the destination takes stream 1.2's
	// GuestPages records in the final round, writing them into guest RAM
	// before the VM runs, so the source may keep the vGPU running while
	// QEMU copies the VM (docs/migration.md). A destination of an earlier
	// release leaves it out: the source then quiesces first.
	GuestPages bool `json:"guest_pages,omitempty"`
	// Applied is how long the destination took to apply the round.
	AppliedNs int64 `json:"applied_ns,omitempty"`
	// Commit timings (for "commit"): plugging the device into QEMU,
	// resuming the VM, the guest's agent answering Resume.
	PlugNs   int64 `json:"plug_ns,omitempty"`
	ResumeNs int64 `json:"resume_ns,omitempty"`
	// HelloNs (for "go"): from the VM's cont to the guest agent's first
	// message here (its Hello), the guest's first answer of any kind
	// after the switchover; 0 when this vgpud did not run the VM or the
	// agent had said Hello before.
	HelloNs  int64  `json:"hello_ns,omitempty"`
	Programs uint32 `json:"programs,omitempty"`
}

// Command is what the source tells the destination after the stream.
type Command struct {
	Do string `json:"do"` // "commit" or "abort"
	// Why the source aborts (logged by the destination).
	Why string `json:"why,omitempty"`
	// DeviceID and Slot: where the vGPU was plugged on the source; the
	// destination plugs it at the same QEMU id and PCI slot.
	DeviceID string `json:"device_id,omitempty"`
	Slot     int    `json:"slot,omitempty"`
	// InPlace (for "commit"): the vGPU stayed attached through QEMU's
	// migration and the destination QEMU's device is connected to the
	// instance already: nothing is plugged.
	InPlace bool `json:"in_place,omitempty"`
	// SourceGone (for "commit"): the VM's manager (libvirt) moved the VM
	// and the source QEMU is gone: the destination's copy is the only
	// one, never to be quit, whatever happens to the channel.
	SourceGone bool `json:"source_gone,omitempty"`
}

// maxLine bounds one JSON line on the channel.
const maxLine = 64 << 10

// ErrPeer wraps a failure the other daemon reported or a broken channel.
var ErrPeer = errors.New("migration peer")

func writeLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// readLine reads one JSON line into v, refusing lines over maxLine and
// unknown fields.
func readLine(r *bufio.Reader, v any) error {
	var line []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrPeer, err)
		}
		line = append(line, chunk...)
		if len(line) > maxLine {
			return fmt.Errorf("%w: a line of more than %d bytes", ErrPeer, maxLine)
		}
		if !isPrefix {
			break
		}
	}
	dec := json.NewDecoder(strings.NewReader(string(line)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: bad message %.80q: %w", ErrPeer, line, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after a message", ErrPeer)
	}
	return nil
}

// expect reads the destination's reply to step and turns its error into
// a Go error.
func expect(r *bufio.Reader, step string) (Reply, error) {
	var rep Reply
	if err := readLine(r, &rep); err != nil {
		return rep, fmt.Errorf("waiting for the destination's %s: %w", step, err)
	}
	if rep.Step != step {
		return rep, fmt.Errorf("%w: answered %q to %q", ErrPeer, rep.Step, step)
	}
	if rep.Error != "" {
		return rep, fmt.Errorf("%w: destination: %s: %s", ErrPeer, step, rep.Error)
	}
	return rep, nil
}

func ns(d time.Duration) int64 { return d.Nanoseconds() }
