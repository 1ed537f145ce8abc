package mmio

import (
	"testing"

	"github.com/vgpud/vgpud/abi"
)

func TestConfigSpaceIdentity(t *testing.T) {
	tests := []struct {
		name string
		off  uint32
		size int
		want uint32
	}{
		{"vendor", CfgVendorID, 2, abi.VendorID},
		{"device", CfgDeviceID, 2, abi.DeviceID},
		{"vendor+device", 0, 4, abi.DeviceID<<16 | abi.VendorID},
		{"vendor low byte", 0, 1, abi.VendorID & 0xff},
		{"vendor high byte", 1, 1, abi.VendorID >> 8},
		{"command", CfgCommand, 2, 0},
		{"status", CfgStatus, 2, 0},
		{"revision+class", CfgRevision, 4, abi.ClassCode<<8 | abi.Revision},
		{"class device (QEMU probe)", 0x0a, 2, abi.ClassCode >> 8},
		{"header type", CfgHeaderType, 1, 0},
		{"subsystem vendor", CfgSubsysVendor, 2, abi.SubsystemVendorID},
		{"subsystem", CfgSubsysID, 2, abi.SubsystemID},
		{"interrupt pin", CfgInterruptPin, 1, abi.InterruptPin},
		{"interrupt line+pin", CfgInterruptLine, 2, abi.InterruptPin << 8},
		{"BAR0", CfgBAR0, 4, 0},
		{"unaligned word across dword", 0x03, 2, abi.DeviceID >> 8},
		{"last byte", 0xff, 1, 0},
		{"last dword", 0xfc, 4, 0},
		{"past end", 0x100, 1, 0xffffffff},
		{"straddles end", 0xfe, 4, 0xffffffff},
		{"width 3", 0, 3, 0xffffffff},
		{"width 8", 0, 8, 0xffffffff},
		{"width 0", 0, 0, 0xffffffff},
		{"huge offset", 0xffffffff, 4, 0xffffffff},
	}
	c := NewConfigSpace()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.Read(tt.off, tt.size); got != tt.want {
				t.Errorf("Read(%#x, %d) = %#x, want %#x", tt.off, tt.size, got, tt.want)
			}
		})
	}
}

// sizeBAR performs the BAR sizing dance exactly as QEMU's probe_pci_info
// does it: read the original value, write all ones, read back, restore.
func sizeBAR(t *testing.T, c *ConfigSpace, off uint32) (orig, mask uint32) {
	t.Helper()
	orig = c.Read(off, 4)
	c.Write(off, 4, 0xffffffff)
	mask = c.Read(off, 4)
	c.Write(off, 4, orig)
	if got := c.Read(off, 4); got != orig {
		t.Errorf("Read(%#x, 4) after restore = %#x, want %#x", off, got, orig)
	}
	return orig, mask
}

func TestConfigSpaceBARSizing(t *testing.T) {
	tests := []struct {
		off      uint32
		wantMask uint32
	}{
		{0x10, ^uint32(abi.BAR0Size - 1)},
		{0x14, 0}, {0x18, 0}, {0x1c, 0}, {0x20, 0}, {0x24, 0},
		{0x28, 0}, // CardBus CIS: QEMU probes it as a seventh "BAR"
		{0x30, 0}, // expansion ROM
	}
	c := NewConfigSpace()
	c.Write(CfgBAR0, 4, 0xfebf0000)
	for _, tt := range tests {
		_, mask := sizeBAR(t, c, tt.off)
		if mask != tt.wantMask {
			t.Errorf("BAR at %#x: sizing read = %#x, want %#x", tt.off, mask, tt.wantMask)
		}
		// The size QEMU computes must be BAR0Size for BAR0 and 0 for the rest.
		size := ^(mask & 0xfffffff0) + 1
		want := uint32(0)
		if tt.off == CfgBAR0 {
			want = abi.BAR0Size
		}
		if size != want {
			t.Errorf("BAR at %#x: size = %#x, want %#x", tt.off, size, want)
		}
	}
	if addr, _ := c.BAR0(); addr != 0xfebf0000 {
		t.Errorf("BAR0() after sizing = %#x, want 0xfebf0000", addr)
	}
}

func TestConfigSpaceWrites(t *testing.T) {
	type write struct {
		off  uint32
		size int
		v    uint32
	}
	tests := []struct {
		name    string
		writes  []write
		readOff uint32
		size    int
		want    uint32
	}{
		{"command RW bits", []write{{CfgCommand, 2, 0xffff}}, CfgCommand, 2, cmdWritableBits},
		{"command via dword keeps status 0", []write{{CfgCommand, 4, 0xffffffff}}, CfgCommand, 4, cmdWritableBits},
		{"command high byte alone", []write{{CfgCommand + 1, 1, 0xff}}, CfgCommand, 2, CmdINTxDisable},
		{"memory+master", []write{{CfgCommand, 2, CmdMemorySpace | CmdBusMaster}}, CfgCommand, 2, CmdMemorySpace | CmdBusMaster},
		{"vendor RO", []write{{CfgVendorID, 4, 0}}, CfgVendorID, 4, abi.DeviceID<<16 | abi.VendorID},
		{"interrupt line RW", []write{{CfgInterruptLine, 1, 11}}, CfgInterruptLine, 1, 11},
		{"interrupt pin RO", []write{{CfgInterruptLine, 2, 0x0505}}, CfgInterruptLine, 2, abi.InterruptPin<<8 | 5},
		{"BAR0 low bits RO", []write{{CfgBAR0, 4, 0x12345fff}}, CfgBAR0, 4, 0x12345000},
		{"BAR0 byte lanes", []write{{CfgBAR0, 4, 0xfebf0000}, {CfgBAR0 + 3, 1, 0xe0}}, CfgBAR0, 4, 0xe0bf0000},
		{"BAR0 word lane", []write{{CfgBAR0 + 2, 2, 0xabcd}}, CfgBAR0, 4, 0xabcd0000},
		{"BAR0 byte 1 half writable", []write{{CfgBAR0 + 1, 1, 0xff}}, CfgBAR0, 4, 0xf000},
		{"BAR1 ignores", []write{{0x14, 4, 0xffffffff}}, 0x14, 4, 0},
		{"ROM ignores", []write{{CfgExpansionROM, 4, 0xffffffff}}, CfgExpansionROM, 4, 0},
		{"status RO", []write{{CfgStatus, 2, 0xffff}}, CfgStatus, 2, 0},
		{"out of range ignored", []write{{0x100, 4, 0xffffffff}, {0xfe, 4, 0xffffffff}}, 0xfc, 4, 0},
		{"bad width ignored", []write{{CfgCommand, 3, 0xffffff}}, CfgCommand, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewConfigSpace()
			for _, w := range tt.writes {
				c.Write(w.off, w.size, w.v)
			}
			if got := c.Read(tt.readOff, tt.size); got != tt.want {
				t.Errorf("Read(%#x, %d) = %#x, want %#x", tt.readOff, tt.size, got, tt.want)
			}
		})
	}
}

func TestConfigSpaceBAR0AndReset(t *testing.T) {
	c := NewConfigSpace()
	if addr, mem := c.BAR0(); addr != 0 || mem {
		t.Errorf("BAR0() = %#x, %v, want 0, false", addr, mem)
	}
	c.Write(CfgBAR0, 4, 0xfebf0000)
	c.Write(CfgCommand, 2, CmdMemorySpace|CmdBusMaster)
	c.Write(CfgInterruptLine, 1, 10)
	if addr, mem := c.BAR0(); addr != 0xfebf0000 || !mem {
		t.Errorf("BAR0() = %#x, %v, want 0xfebf0000, true", addr, mem)
	}
	if got := c.Command(); got != CmdMemorySpace|CmdBusMaster {
		t.Errorf("Command() = %#x, want %#x", got, CmdMemorySpace|CmdBusMaster)
	}
	c.Reset()
	if addr, mem := c.BAR0(); addr != 0 || mem {
		t.Errorf("BAR0() after Reset = %#x, %v, want 0, false", addr, mem)
	}
	if got := c.Read(CfgInterruptLine, 1); got != 0 {
		t.Errorf("Read(interrupt line) after Reset = %d, want 0", got)
	}
	if got := c.Read(CfgVendorID, 2); got != abi.VendorID {
		t.Errorf("Read(vendor) after Reset = %#x, want %#x", got, abi.VendorID)
	}
}
