package xenctl

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/xen"
)

// layoutC prints what the Go side hard-codes, from the installed headers.
const layoutC = `
#define __XEN_TOOLS__ 1
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <xen/xen.h>
#include <xen/hvm/ioreq.h>
#include <xen/hvm/hvm_op.h>
#include <xen/hvm/dm_op.h>
#include <xen/memory.h>
#include <xen/sys/privcmd.h>
#include <xen/sys/evtchn.h>
#define P(n, v) printf("%s %lu\n", n, (unsigned long)(v))
int main(void) {
	union { struct ioreq r; unsigned char b[32]; } u = {0};
	u.r.addr = 0x1122334455667788ull; u.r.data = 0x99aabbccddeeff00ull; u.r.count = 0x01020304;
	u.r.size = 4; u.r.vp_eport = 0x0a0b0c0d; u.r.state = STATE_IOREQ_READY; u.r.data_is_ptr = 1;
	u.r.dir = IOREQ_READ; u.r.df = 1; u.r.type = IOREQ_TYPE_PCI_CONFIG;
	printf("ioreq"); for (int i = 0; i < 32; i++) printf(" %u", u.b[i]); printf("\n");
	union { buf_ioreq_t r; unsigned char b[8]; } v = {0};
	v.r.type = IOREQ_TYPE_COPY; v.r.dir = 1; v.r.size = 3; v.r.addr = 0xabcde; v.r.data = 0x11223344;
	printf("buf_ioreq"); for (int i = 0; i < 8; i++) printf(" %u", v.b[i]); printf("\n");
	P("sizeof_ioreq", sizeof(struct ioreq));
	P("sizeof_buffered_iopage", sizeof(buffered_iopage_t));
	P("buf_ioreq_off", offsetof(buffered_iopage_t, buf_ioreq));
	P("IOREQ_BUFFER_SLOT_NUM", IOREQ_BUFFER_SLOT_NUM);
	P("STATE_IORESP_READY", STATE_IORESP_READY);
	P("IOREQ_TYPE_INVALIDATE", IOREQ_TYPE_INVALIDATE);
	P("IOREQ_TYPE_TIMEOFFSET", IOREQ_TYPE_TIMEOFFSET);
	P("HVM_IOREQSRV_BUFIOREQ_ATOMIC", HVM_IOREQSRV_BUFIOREQ_ATOMIC);
	P("XEN_DMOP_IO_RANGE_MEMORY", XEN_DMOP_IO_RANGE_MEMORY);
	P("XEN_DMOP_IO_RANGE_PCI", XEN_DMOP_IO_RANGE_PCI);
	P("XEN_DMOP_PCI_SBDF", XEN_DMOP_PCI_SBDF(1, 2, 3, 4));
	P("XENMEM_resource_ioreq_server", XENMEM_resource_ioreq_server);
	P("frame_bufioreq", XENMEM_resource_ioreq_server_frame_bufioreq);
	P("frame_ioreq0", XENMEM_resource_ioreq_server_frame_ioreq(0));
	P("sizeof_xen_dm_op", sizeof(struct xen_dm_op));
	P("dm_op_u", offsetof(struct xen_dm_op, u));
	P("XEN_DMOP_create_ioreq_server", XEN_DMOP_create_ioreq_server);
	P("XEN_DMOP_get_ioreq_server_info", XEN_DMOP_get_ioreq_server_info);
	P("XEN_DMOP_map_io_range_to_ioreq_server", XEN_DMOP_map_io_range_to_ioreq_server);
	P("XEN_DMOP_unmap_io_range_from_ioreq_server", XEN_DMOP_unmap_io_range_from_ioreq_server);
	P("XEN_DMOP_set_ioreq_server_state", XEN_DMOP_set_ioreq_server_state);
	P("XEN_DMOP_destroy_ioreq_server", XEN_DMOP_destroy_ioreq_server);
	P("XEN_DMOP_set_pci_intx_level", XEN_DMOP_set_pci_intx_level);
	P("XEN_DMOP_nr_vcpus", XEN_DMOP_nr_vcpus);
	P("XEN_DMOP_no_gfns", XEN_DMOP_no_gfns);
	P("create.handle_bufioreq", offsetof(struct xen_dm_op_create_ioreq_server, handle_bufioreq));
	P("create.id", offsetof(struct xen_dm_op_create_ioreq_server, id));
	P("info.id", offsetof(struct xen_dm_op_get_ioreq_server_info, id));
	P("info.flags", offsetof(struct xen_dm_op_get_ioreq_server_info, flags));
	P("info.bufioreq_port", offsetof(struct xen_dm_op_get_ioreq_server_info, bufioreq_port));
	P("range.id", offsetof(struct xen_dm_op_ioreq_server_range, id));
	P("range.type", offsetof(struct xen_dm_op_ioreq_server_range, type));
	P("range.start", offsetof(struct xen_dm_op_ioreq_server_range, start));
	P("range.end", offsetof(struct xen_dm_op_ioreq_server_range, end));
	P("state.id", offsetof(struct xen_dm_op_set_ioreq_server_state, id));
	P("state.enabled", offsetof(struct xen_dm_op_set_ioreq_server_state, enabled));
	P("destroy.id", offsetof(struct xen_dm_op_destroy_ioreq_server, id));
	P("intx.domain", offsetof(struct xen_dm_op_set_pci_intx_level, domain));
	P("intx.bus", offsetof(struct xen_dm_op_set_pci_intx_level, bus));
	P("intx.device", offsetof(struct xen_dm_op_set_pci_intx_level, device));
	P("intx.intx", offsetof(struct xen_dm_op_set_pci_intx_level, intx));
	P("intx.level", offsetof(struct xen_dm_op_set_pci_intx_level, level));
	P("nr_vcpus.vcpus", offsetof(struct xen_dm_op_nr_vcpus, vcpus));
	P("IOCTL_PRIVCMD_DM_OP", IOCTL_PRIVCMD_DM_OP);
	P("IOCTL_PRIVCMD_RESTRICT", IOCTL_PRIVCMD_RESTRICT);
	P("IOCTL_PRIVCMD_MMAP_RESOURCE", IOCTL_PRIVCMD_MMAP_RESOURCE);
	P("IOCTL_PRIVCMD_MMAPBATCH_V2", IOCTL_PRIVCMD_MMAPBATCH_V2);
	P("sizeof_privcmd_dm_op", sizeof(privcmd_dm_op_t));
	P("privcmd_dm_op.num", offsetof(privcmd_dm_op_t, num));
	P("privcmd_dm_op.ubufs", offsetof(privcmd_dm_op_t, ubufs));
	P("sizeof_privcmd_dm_op_buf", sizeof(privcmd_dm_op_buf_t));
	P("privcmd_dm_op_buf.size", offsetof(privcmd_dm_op_buf_t, size));
	P("mmap_resource.type", offsetof(privcmd_mmap_resource_t, type));
	P("mmap_resource.id", offsetof(privcmd_mmap_resource_t, id));
	P("mmap_resource.idx", offsetof(privcmd_mmap_resource_t, idx));
	P("mmap_resource.num", offsetof(privcmd_mmap_resource_t, num));
	P("mmap_resource.addr", offsetof(privcmd_mmap_resource_t, addr));
	P("mmapbatch_v2.dom", offsetof(privcmd_mmapbatch_v2_t, dom));
	P("mmapbatch_v2.addr", offsetof(privcmd_mmapbatch_v2_t, addr));
	P("mmapbatch_v2.arr", offsetof(privcmd_mmapbatch_v2_t, arr));
	P("mmapbatch_v2.err", offsetof(privcmd_mmapbatch_v2_t, err));
	P("sizeof_xen_pfn_t", sizeof(xen_pfn_t));
	P("IOCTL_EVTCHN_BIND_INTERDOMAIN", IOCTL_EVTCHN_BIND_INTERDOMAIN);
	P("IOCTL_EVTCHN_UNBIND", IOCTL_EVTCHN_UNBIND);
	P("IOCTL_EVTCHN_NOTIFY", IOCTL_EVTCHN_NOTIFY);
	P("IOCTL_EVTCHN_RESTRICT_DOMID", IOCTL_EVTCHN_RESTRICT_DOMID);
	return 0;
}
`

// TestLayoutAgainstHeaders compiles layoutC against the installed Xen
// headers (Debian: libxen-dev) and compares every layout and number the
// Go code hard-codes. It skips where there is no C compiler or headers.
func TestLayoutAgainstHeaders(t *testing.T) {
	if _, err := os.Stat("/usr/include/xen/hvm/ioreq.h"); err != nil {
		t.Skip("no Xen headers (apt-get install libxen-dev)")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "layout.c"), filepath.Join(dir, "layout")
	if err := os.WriteFile(src, []byte(layoutC), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("compile against the headers: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	var ioreqBytes, bufBytes []byte
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch f[0] {
		case "ioreq", "buf_ioreq":
			var b []byte
			for _, s := range f[1:] {
				v, _ := strconv.Atoi(s)
				b = append(b, byte(v))
			}
			if f[0] == "ioreq" {
				ioreqBytes = b
			} else {
				bufBytes = b
			}
		default:
			v, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatalf("%q: %v", sc.Text(), err)
			}
			got[f[0]] = v
		}
	}
	r := xen.IOReq{Addr: 0x1122334455667788, Data: 0x99aabbccddeeff00, Count: 0x01020304, Size: 4, VPEport: 0x0a0b0c0d,
		State: xen.StateReady, DataIsPtr: true, Dir: xen.IOReqRead, DF: true, Type: xen.TypePCIConfig}
	if b := xen.MarshalIOReq(r); !bytes.Equal(b[:], ioreqBytes) {
		t.Errorf("struct ioreq:\n go % x\n  C % x", b, ioreqBytes)
	}
	br := xen.BufIOReq{Type: xen.TypeCopy, Dir: 1, Size: 3, Addr: 0xabcde, Data: 0x11223344}
	if b := xen.MarshalBufIOReq(br); !bytes.Equal(b[:], bufBytes) {
		t.Errorf("struct buf_ioreq:\n go % x\n  C % x", b, bufBytes)
	}
	want := map[string]uint64{
		"sizeof_ioreq": xen.IOReqSize, "sizeof_buffered_iopage": xen.PageSize, "buf_ioreq_off": 8,
		"IOREQ_BUFFER_SLOT_NUM": xen.BufSlots, "STATE_IORESP_READY": xen.StateRespReady,
		"IOREQ_TYPE_INVALIDATE": xen.TypeInvalidate, "IOREQ_TYPE_TIMEOFFSET": xen.TypeTimeOffset,
		"HVM_IOREQSRV_BUFIOREQ_ATOMIC": uint64(xen.BufIOReqAtomic),
		"XEN_DMOP_IO_RANGE_MEMORY":     uint64(xen.RangeMemory), "XEN_DMOP_IO_RANGE_PCI": uint64(xen.RangePCI),
		"XEN_DMOP_PCI_SBDF":            uint64(xen.SBDF{Seg: 1, Bus: 2, Dev: 3, Fn: 4}.Uint32()),
		"XENMEM_resource_ioreq_server": resourceIOReqServer, "frame_bufioreq": xen.FrameBufIOReq, "frame_ioreq0": xen.FrameIOReq,
		"sizeof_xen_dm_op": sizeofXenDMOp, "dm_op_u": dmopU,
		"XEN_DMOP_create_ioreq_server": dmopCreateIOReqServer, "XEN_DMOP_get_ioreq_server_info": dmopGetIOReqServerInfo,
		"XEN_DMOP_map_io_range_to_ioreq_server":     dmopMapIORange,
		"XEN_DMOP_unmap_io_range_from_ioreq_server": dmopUnmapIORange,
		"XEN_DMOP_set_ioreq_server_state":           dmopSetIOReqServerState,
		"XEN_DMOP_destroy_ioreq_server":             dmopDestroyIOReqServer,
		"XEN_DMOP_set_pci_intx_level":               dmopSetPCIINTxLevel, "XEN_DMOP_nr_vcpus": dmopNrVCPUs,
		"XEN_DMOP_no_gfns": dmopNoGFNs,
		// The union offsets dmOp's fill and read functions use.
		"create.handle_bufioreq": 0, "create.id": 4, "info.id": 0, "info.flags": 2, "info.bufioreq_port": 4,
		"range.id": 0, "range.type": 4, "range.start": 8, "range.end": 16, "state.id": 0, "state.enabled": 2,
		"destroy.id": 0, "intx.domain": 0, "intx.bus": 2, "intx.device": 3, "intx.intx": 4, "intx.level": 5,
		"nr_vcpus.vcpus":      0,
		"IOCTL_PRIVCMD_DM_OP": ioctlPrivcmdDMOp, "IOCTL_PRIVCMD_RESTRICT": ioctlPrivcmdRestrict,
		"IOCTL_PRIVCMD_MMAP_RESOURCE": ioctlPrivcmdMmapResource, "IOCTL_PRIVCMD_MMAPBATCH_V2": ioctlPrivcmdMmapBatchV2,
		"sizeof_privcmd_dm_op": sizeofPrivcmdDMOp, "privcmd_dm_op.num": 2, "privcmd_dm_op.ubufs": 8,
		"sizeof_privcmd_dm_op_buf": sizeofPrivcmdDMOpBuf, "privcmd_dm_op_buf.size": 8,
		"mmap_resource.type": 4, "mmap_resource.id": 8, "mmap_resource.idx": 12, "mmap_resource.num": 16, "mmap_resource.addr": 24,
		"mmapbatch_v2.dom": 4, "mmapbatch_v2.addr": 8, "mmapbatch_v2.arr": 16, "mmapbatch_v2.err": 24, "sizeof_xen_pfn_t": 8,
		"IOCTL_EVTCHN_BIND_INTERDOMAIN": ioctlEvtchnBindInterdomain, "IOCTL_EVTCHN_UNBIND": ioctlEvtchnUnbind,
		"IOCTL_EVTCHN_NOTIFY": ioctlEvtchnNotify, "IOCTL_EVTCHN_RESTRICT_DOMID": ioctlEvtchnRestrictDomid,
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: not printed by the C side", k)
			continue
		}
		if g != w {
			t.Errorf("%s = %d in the headers, %d in Go", k, g, w)
		}
	}
}

// Without Xen the handles fail to open with the device's error.
func TestOpenWithoutXen(t *testing.T) {
	if _, err := os.Stat(PrivcmdPath); err == nil {
		t.Skip("running under Xen")
	}
	if _, err := Open(); err == nil {
		t.Error("Open succeeded without /dev/xen/privcmd")
	}
	if _, err := OpenEvents(); err == nil {
		t.Error("OpenEvents succeeded without /dev/xen/evtchn")
	}
}
