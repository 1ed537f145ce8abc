package libvirt

import (
	"errors"
	"strings"
	"testing"
)

const plainDomain = `<domain type='qemu'>
  <name>web1</name>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
  </devices>
</domain>
`

const withCommandline = `<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>web1</name>
  <qemu:commandline>
    <qemu:arg value='-icount'/>
    <qemu:arg value='0'/>
  </qemu:commandline>
</domain>
`

func TestAddVFIOUserDevice(t *testing.T) {
	const sock = "/run/vgpud/instances/0bd77b47-38fd-4309-b51c-a6dd194b5593.vfio-user.sock"
	const qmp = "/run/vgpud/instances/0bd77b47-38fd-4309-b51c-a6dd194b5593.qmp"
	for _, tc := range []struct {
		name, in string
	}{{"no commandline", plainDomain}, {"a commandline", withCommandline}} {
		out, added, err := AddVFIOUserDevice([]byte(tc.in), "vgpu0", sock, qmp, 0x10)
		if err != nil || !added {
			t.Fatalf("%s: added %v, %v", tc.name, added, err)
		}
		s := string(out)
		if strings.Count(s, "xmlns:qemu=") != 1 || strings.Count(s, "<qemu:commandline>") != 1 ||
			!strings.Contains(s, "<name>web1</name>") || !strings.Contains(s, sock) ||
			!strings.Contains(s, "id=vgpud-qmp,path="+qmp+",server=on") {
			t.Errorf("%s: edited XML:\n%s", tc.name, s)
		}
		if tc.in == withCommandline && !strings.Contains(s, "<qemu:arg value='-icount'/>") {
			t.Errorf("%s: the domain's own arguments are gone:\n%s", tc.name, s)
		}
		again, added, err := AddVFIOUserDevice(out, "vgpu0", sock, qmp, 0x10)
		if err != nil || added || string(again) != s {
			t.Errorf("%s: adding again: added %v, %v", tc.name, added, err)
		}
		if _, _, err := AddVFIOUserDevice(out, "vgpu0", "/other.sock", qmp, 0x10); !errors.Is(err, ErrOtherVFIOUser) {
			t.Errorf("%s: another socket: %v, want ErrOtherVFIOUser", tc.name, err)
		}
	}
	for _, bad := range []string{"", "<domain/>", "<vm></vm>", "<domain></domain><domain></domain>", "<domain>",
		"<domain xmlns:qemu='urn:other'></domain>", plainDomain + "<x/>"} {
		if _, _, err := AddVFIOUserDevice([]byte(bad), "vgpu0", sock, qmp, 0x10); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", bad, err)
		}
	}
}

func FuzzAddVFIOUserDevice(f *testing.F) {
	f.Add([]byte(plainDomain))
	f.Add([]byte(withCommandline))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, added, err := AddVFIOUserDevice(in, "vgpu0", "/s.sock", "/s.qmp", 0x10)
		if err != nil {
			return
		}
		if _, again, err := AddVFIOUserDevice(out, "vgpu0", "/s.sock", "/s.qmp", 0x10); err != nil || again {
			t.Fatalf("added %v; the result does not read back: %v %v", added, again, err)
		}
	})
}
