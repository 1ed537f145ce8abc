package mdev

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/migrate/stream"
	"github.com/vgpud/vgpud/worker"
)

// TestGuestLogCarriesDeviceWrites (issue 44): with an instance's guest
// log on, the final round of a migration ends with every guest page its
// worker wrote since (a read-back's pages among them), each with the
// content guest RAM has at that moment, and nothing the device did not
// write (the marker page); without the log a final round carries no
// guest pages. On the receiving instance the pages wait until Thaw (QEMU
// has loaded the VM by then) and then land in its guest RAM; pages
// outside its RAM are refused.
func TestGuestLogCarriesDeviceWrites(t *testing.T) {
	m := newExecutorManager(t, Config{Devices: []gpu.Device{openGPU(t)}, Profiles: []Profile{contextProfile}})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	src := mustCreate(t, m, CreateRequest{Profile: contextProfile.Name})
	vm, d, _ := markedGuest(t, src)
	mig, err := src.Migrator()
	if err != nil {
		t.Fatal(err)
	}
	buf, err := d.CreateBuffer(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	data, got := make([]byte, 64<<10), make([]byte, 64<<10)
	rand.Read(data)
	if err := d.Write(buf, 0, data); err != nil {
		t.Fatal(err)
	}

	// Without the log: no guest pages.
	recs := extractFinal(ctx, t, mig)
	if n := len(guestPagesOf(recs)); n != 0 {
		t.Errorf("a final round without the log carries %d guest-page records", n)
	}
	if err := mig.Thaw(ctx, true); err != nil {
		t.Fatal(err)
	}

	if err := mig.GuestLog(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := d.Read(buf, 0, got); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back wrong data")
	}
	recs = extractFinal(ctx, t, mig)
	pages := guestPagesOf(recs)
	written := map[uint64][]byte{}
	for _, g := range pages {
		now := ramAt(t, vm, g.GPA, len(g.Data))
		if !bytes.Equal(now, g.Data) {
			t.Errorf("guest pages at %#x: not guest RAM's content", g.GPA)
		}
		for off := 0; off < len(g.Data); off += stream.GuestPageSize {
			written[g.GPA+uint64(off)] = g.Data[off : off+stream.GuestPageSize]
		}
	}
	if _, ok := written[markerGPA]; ok {
		t.Error("the marker page, which the device never wrote, was sent")
	}
	// Every page of the read-back is in a page the device wrote (the
	// driver's DMA pages are page-aligned).
	for off := 0; off < len(got); off += stream.GuestPageSize {
		found := false
		for _, p := range written {
			if bytes.Equal(p, got[off:off+stream.GuestPageSize]) {
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("page %d of the read-back is in no guest page sent (%d pages sent)", off/stream.GuestPageSize, len(written))
		}
	}
	t.Logf("the final round carried %d guest pages in %d records", len(written), len(pages))
	if err := mig.Thaw(ctx, true); err != nil {
		t.Fatal(err)
	}
	// A Thaw ended the log: the next final round carries nothing.
	if n := len(guestPagesOf(extractFinal(ctx, t, mig))); n != 0 {
		t.Errorf("a final round after Thaw carries %d guest-page records", n)
	}
	if err := mig.Thaw(ctx, true); err != nil {
		t.Fatal(err)
	}

	// The receiving side: a VM whose RAM the guest pages are for, with no
	// driver open (its device writes nothing of its own after Thaw).
	dst := mustCreate(t, m, CreateRequest{Profile: contextProfile.Name})
	dvm := attach(t, dst)
	dmig, err := dst.Migrator()
	if err != nil {
		t.Fatal(err)
	}
	if err := dmig.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	injectRecords(ctx, t, dmig, pages)
	for _, g := range pages {
		now := ramAt(t, dvm, g.GPA, len(g.Data))
		if bytes.Equal(now, g.Data) && !bytes.Equal(g.Data, make([]byte, len(g.Data))) {
			t.Errorf("guest pages at %#x written before Thaw", g.GPA)
		}
	}
	if err := dmig.Thaw(ctx, true); err != nil {
		t.Fatal(err)
	}
	for _, g := range pages {
		now := ramAt(t, dvm, g.GPA, len(g.Data))
		if !bytes.Equal(now, g.Data) {
			t.Errorf("guest pages at %#x: not written at Thaw", g.GPA)
		}
	}

	// Pages outside the destination's guest RAM (64 MiB) are refused.
	if err := dmig.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	err = injectErr(ctx, dmig, []*stream.GuestPages{{GPA: 1 << 40, Data: make([]byte, stream.GuestPageSize)}})
	if abi.StatusOf(err) != abi.StatusBadAddress && abi.StatusOf(err) != abi.StatusInvalidArgument {
		t.Errorf("guest pages outside guest RAM: %v, want a bad address", err)
	}
	if err := dmig.Thaw(ctx, true); err != nil {
		t.Fatal(err)
	}
}

// ramAt reads n bytes of vm's guest RAM at gpa.
func ramAt(t *testing.T, vm interface{ ReadRAM(uint64, []byte) error }, gpa uint64, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if err := vm.ReadRAM(gpa, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// extractFinal runs a final extraction round of mig and returns its
// records.
func extractFinal(ctx context.Context, t *testing.T, mig worker.Migrator) []stream.Record {
	t.Helper()
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		_, err := mig.ExtractRound(ctx, true, pw)
		pw.CloseWithError(errors.Join(err, io.EOF))
		errc <- err
	}()
	var recs []stream.Record
	r := stream.NewReader(pr)
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read the final round: %v", err)
		}
		recs = append(recs, rec)
	}
	if err := <-errc; err != nil {
		t.Fatalf("final round: %v", err)
	}
	return recs
}

func guestPagesOf(recs []stream.Record) []*stream.GuestPages {
	var out []*stream.GuestPages
	for _, r := range recs {
		if g, ok := r.(*stream.GuestPages); ok {
			out = append(out, g)
		}
	}
	return out
}

func injectRecords(ctx context.Context, t *testing.T, mig worker.Migrator, pages []*stream.GuestPages) {
	t.Helper()
	if err := injectErr(ctx, mig, pages); err != nil {
		t.Fatalf("inject: %v", err)
	}
}

func injectErr(ctx context.Context, mig worker.Migrator, pages []*stream.GuestPages) error {
	var b bytes.Buffer
	w := stream.NewWriter(&b)
	for _, g := range pages {
		if err := w.Write(g); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return mig.Inject(ctx, &b)
}
