package driver

import (
	"fmt"

	"github.com/vgpud/vgpud/abi"
)

// Printf output (ABI 1.7, docs/ABI.md "Printf output"): a launch may name a
// buffer into which the device writes what the kernel printed, after a
// header. A device that announces abi.FeaturePrintf takes it; PrintfOK
// says whether this one does.

// PrintfOK reports whether the device takes printf buffers.
func (d *Device) PrintfOK() bool { return d.Info().Features&abi.FeaturePrintf != 0 }

// LaunchPrintf is Launch whose printf output goes into printf, a buffer of
// at least abi.PrintfHeaderSize bytes (batched); ReadPrintout reads it
// once the launch completed.
func (d *Device) LaunchPrintf(p Program, kernel string, r NDRange, printf Buffer, args ...Arg) error {
	if printf.Handle == 0 {
		return fmt.Errorf("launch %s: printf buffer 0: %w", kernel, ErrInvalid)
	}
	return d.launch(p, kernel, r, 0, printf, args, entry{})
}

// ReadPrintout reads what the last launch that named printf printed: its
// header, checked as a guest checks what the device wrote, and the
// output. It waits for the commands before it, as Read does.
func (d *Device) ReadPrintout(printf Buffer) (abi.PrintfHeader, []byte, error) {
	head := make([]byte, abi.PrintfHeaderSize)
	if err := d.Read(printf, 0, head); err != nil {
		return abi.PrintfHeader{}, nil, fmt.Errorf("printf header: %w", err)
	}
	h, err := abi.UnmarshalPrintfHeader(head, printf.Size)
	if err != nil {
		return h, nil, fmt.Errorf("printf buffer %d: the device wrote a bad header: %w", printf.Handle, err)
	}
	out := make([]byte, h.Length)
	if h.Length > 0 {
		if err := d.Read(printf, abi.PrintfHeaderSize, out); err != nil {
			return h, nil, fmt.Errorf("printf output: %w", err)
		}
	}
	return h, out, nil
}
