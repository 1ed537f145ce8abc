package libvirt

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/vgpud/vgpud/mdev/qemuvm"
)

// QEMUNamespace is the XML namespace of libvirt's QEMU-specific domain
// elements (<qemu:commandline>).
const QEMUNamespace = "http://libvirt.org/schemas/domain/qemu/1.0"

// VFIOUserDevice is QEMU's -device argument (JSON) for a vfio-user-pci
// device with QEMU id id at PCI slot slot of bus 0 that connects to the
// vfio-user socket at path as QEMU starts: qemuvm's, so that a domain's
// device is the one vgpuctl vm and the tests give QEMU.
func VFIOUserDevice(id, path string, slot int) string { return qemuvm.VFIOUserArg(id, path, slot) }

// MonitorID is the QEMU id of the chardev of the monitor vgpud has in a
// libvirt domain of its own, beside libvirt's.
const MonitorID = "vgpud-qmp"

// VFIOUserArgs are the QEMU arguments that give a libvirt domain its
// vGPU on vfio-user: the vfio-user-pci device of VFIOUserDevice and a
// QMP monitor of vgpud's own at qmp (QEMU listens there; vgpud finds it
// at mdev.Instance.QMPSocket), through which vgpud quiesces nothing but
// asks query-pci, query-status and, on a migration's destination, cont
// (libvirt follows the VM's state from QEMU's events).
func VFIOUserArgs(id, path, qmp string, slot int) []string {
	return []string{"-device", VFIOUserDevice(id, path, slot),
		"-chardev", "socket,id=" + MonitorID + ",path=" + strings.ReplaceAll(qmp, ",", ",,") + ",server=on,wait=off",
		"-mon", "chardev=" + MonitorID + ",mode=control"}
}

// VFIOUserCommandline is the <qemu:commandline> element (prefix qemu,
// bound to QEMUNamespace on the domain element) holding VFIOUserArgs:
// libvirt 11.3's domain schema has no vfio-user device.
func VFIOUserCommandline(id, path, qmp string, slot int) string {
	return "<qemu:commandline>\n" + argElements(VFIOUserArgs(id, path, qmp, slot)) + "  </qemu:commandline>\n"
}

func argElements(args []string) string {
	var b bytes.Buffer
	for _, a := range args {
		b.WriteString("    <qemu:arg value='")
		xml.EscapeText(&b, []byte(a))
		b.WriteString("'/>\n")
	}
	return b.String()
}

// ErrOtherVFIOUser: the domain's definition has a vfio-user-pci device
// other than the one vgpud would add.
var ErrOtherVFIOUser = errors.New("the domain has another vfio-user-pci device")

// maxDomainXML bounds a domain definition AddVFIOUserDevice edits.
const maxDomainXML = 1 << 20

// AddVFIOUserDevice adds VFIOUserArgs to a
// domain definition as `virsh dumpxml --inactive` prints it (libvirt
// writes QEMU's elements with the prefix qemu, declared on <domain>):
// <qemu:arg> elements at the end of its <qemu:commandline>, or a new one
// before </domain>, declaring the namespace on <domain> when it is not.
// The rest of the text is left as it is. added is false when the device
// is there already; a domain with any other vfio-user-pci argument, or
// an argument naming MonitorID without the device, is refused
// (ErrOtherVFIOUser), and so is anything that is not one
// well-formed <domain> element (ErrMalformed).
func AddVFIOUserDevice(dom []byte, id, path, qmp string, slot int) (out []byte, added bool, err error) {
	if len(dom) > maxDomainXML {
		return nil, false, fmt.Errorf("%w: domain XML of %d bytes", ErrMalformed, len(dom))
	}
	want := VFIOUserDevice(id, path, slot)
	dec := xml.NewDecoder(bytes.NewReader(dom))
	dec.Strict = true
	var (
		depth               int
		rootEnd             int64  = -1 // just after <domain ...>
		qemuPrefix          string      // what xmlns:qemu on <domain> binds, "" none
		clEnd, domEnd       int64  = -1, -1
		ours, others, roots int
		mons                int
	)
	for {
		off := dec.InputOffset()
		tok, terr := dec.Token()
		if errors.Is(terr, io.EOF) {
			break
		}
		if terr != nil {
			return nil, false, fmt.Errorf("%w: domain XML: %w", ErrMalformed, terr)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			depth++
			if depth == 1 {
				roots++
				if el.Name.Local != "domain" || el.Name.Space != "" {
					return nil, false, fmt.Errorf("%w: root element <%.40s>, want <domain>", ErrMalformed, el.Name.Local)
				}
				rootEnd = dec.InputOffset()
				for _, a := range el.Attr {
					if a.Name.Space == "xmlns" && a.Name.Local == "qemu" {
						qemuPrefix = a.Value
					}
				}
			}
			if el.Name.Space == QEMUNamespace && el.Name.Local == "arg" {
				for _, a := range el.Attr {
					switch {
					case a.Name.Local != "value":
					case a.Value == want:
						ours++
					case strings.Contains(a.Value, "vfio-user-pci"):
						others++
					case strings.Contains(a.Value, MonitorID):
						mons++
					}
				}
			}
		case xml.EndElement:
			if depth == 2 && el.Name.Space == QEMUNamespace && el.Name.Local == "commandline" {
				if !bytes.HasPrefix(dom[off:], []byte("</qemu:commandline")) {
					return nil, false, fmt.Errorf("%w: <commandline> in QEMU's namespace without the prefix qemu", ErrMalformed)
				}
				clEnd = off
			}
			if depth == 1 {
				domEnd = off
			}
			depth--
		}
	}
	switch {
	case roots != 1 || domEnd < 0 || rootEnd < 1 || dom[rootEnd-1] != '>' || dom[rootEnd-2] == '/':
		return nil, false, fmt.Errorf("%w: not one <domain> element", ErrMalformed)
	case others > 0 || (mons > 0 && ours == 0):
		return nil, false, fmt.Errorf("%w (its <qemu:commandline>): remove it first", ErrOtherVFIOUser)
	case ours > 0:
		return dom, false, nil
	case qemuPrefix != "" && qemuPrefix != QEMUNamespace:
		return nil, false, fmt.Errorf("%w: the prefix qemu is bound to %.80q", ErrMalformed, qemuPrefix)
	}
	args := strings.TrimPrefix(argElements(VFIOUserArgs(id, path, qmp, slot)), "    ") + "  "
	var b bytes.Buffer
	b.Grow(len(dom) + 512)
	at := clEnd
	insert := args
	if at < 0 {
		at, insert = domEnd, "  "+VFIOUserCommandline(id, path, qmp, slot)
	}
	if qemuPrefix == "" {
		b.Write(dom[:rootEnd-1])
		b.WriteString(" xmlns:qemu='" + QEMUNamespace + "'")
		b.Write(dom[rootEnd-1 : at])
	} else {
		b.Write(dom[:at])
	}
	b.WriteString(insert)
	b.Write(dom[at:])
	// What was made must read back as the device, once.
	if _, again, err := AddVFIOUserDevice(b.Bytes(), id, path, qmp, slot); err != nil || again {
		return nil, false, fmt.Errorf("%w: the edited domain XML does not read back (%v)", ErrMalformed, err)
	}
	return b.Bytes(), true, nil
}
