package libvirt

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
)

// QEMUNamespace is the XML namespace of libvirt's QEMU-specific domain
// elements (<qemu:commandline>).
const QEMUNamespace = "http://libvirt.org/schemas/domain/qemu/1.0"

// VFIOUserDevice is QEMU's -device argument (JSON) for a vfio-user-pci
// device with QEMU id id at PCI slot slot of bus 0 that connects to the
// vfio-user socket at path as QEMU starts.
func VFIOUserDevice(id, path string, slot int) string {
	type socket struct {
		Type string `json:"type"`
		Path string `json:"path"`
	}
	b, err := json.Marshal(struct {
		Driver string `json:"driver"`
		ID     string `json:"id"`
		Addr   string `json:"addr"`
		Socket socket `json:"socket"`
	}{"vfio-user-pci", id, fmt.Sprintf("%#x", slot), socket{"unix", path}})
	if err != nil {
		panic(err) // strings only
	}
	return string(b)
}

// VFIOUserCommandline is the <qemu:commandline> element (prefix qemu,
// bound to QEMUNamespace on the domain element) that gives a domain the
// vfio-user-pci device of VFIOUserDevice: libvirt 11.3's domain schema
// has no vfio-user device.
func VFIOUserCommandline(id, path string, slot int) string {
	var v bytes.Buffer
	xml.EscapeText(&v, []byte(VFIOUserDevice(id, path, slot)))
	return "<qemu:commandline>\n    <qemu:arg value='-device'/>\n    <qemu:arg value='" + v.String() + "'/>\n  </qemu:commandline>\n"
}
