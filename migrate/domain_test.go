package migrate_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/migrate/migratetest"
	"github.com/vgpud/vgpud/migrate/stream"
	"github.com/vgpud/vgpud/reuse"
	"github.com/vgpud/vgpud/worker"
)

// TestDestinationIgnoresStreamDomain: a source with a certificate the CA
// signed names another tenant's trust domain in its stream. The
// destination creates the instance in its own private domain, never in
// that tenant's: the tenant's worker is not the one the stream is applied
// in, and after the migration failed it is the same process with its
// buffer intact.
func TestDestinationIgnoresStreamDomain(t *testing.T) {
	ca := migratetest.NewCA(t)
	m, addr := destination(t, ca.HostDir(t))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	victim, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small", ReuseDomain: "tenant-a"})
	if err != nil {
		t.Fatal(err)
	}
	vmig, err := victim.Migrator()
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("tenant-a's data "), 256)
	inject(ctx, t, vmig, &stream.Buffer{Handle: 1, Size: uint64(len(data))}, &stream.BufferData{Handle: 1, Data: data})
	victimPID := m.Pool().WorkerPID(victim.UUID())
	if victimPID == 0 {
		t.Fatal("the tenant's instance has no worker")
	}

	c := dial(t, addr, ca.HostDir(t))
	r := bufio.NewReader(c)
	w := stream.NewWriter(c)
	if err := w.Write(&stream.Instance{ID: testID, Profile: "vgpu-small", Domain: "tenant-a", MemBytes: 256 << 20}); err != nil {
		t.Fatal(err)
	}
	if rep := reply(t, r); rep.Step != "instance" || rep.Error != "" {
		t.Fatalf("instance step: %+v", rep)
	}
	inst, err := m.Get(testID)
	if err != nil {
		t.Fatalf("no instance on the destination: %v", err)
	}
	if got, want := inst.ReuseDomain(), reuse.PrivatePrefix+testID; got != want {
		t.Errorf("incoming instance's domain = %q, want %q (its own, not the stream's %q)", got, want, "tenant-a")
	}
	if pid := m.Pool().WorkerPID(testID); pid == victimPID {
		t.Errorf("incoming instance's worker = %d, the other tenant's: the stream chose the trust domain", pid)
	}
	// What the source sends next is applied in the incoming instance's
	// worker only: an over-quota buffer fails the round there.
	for _, rec := range []stream.Record{&stream.Buffer{Handle: 1, Size: 512 << 20}, &stream.Round{Number: 0}} {
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	if rep := reply(t, r); rep.Step != "round" || !strings.Contains(rep.Error, "quota") {
		t.Fatalf("over-quota round: %+v, want a quota error", rep)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := m.Get(testID); errors.Is(err, mdev.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed migration's instance was not discarded")
		}
		time.Sleep(10 * time.Millisecond)
	}

	if got := victim.ReuseDomain(); got != "tenant-a" {
		t.Errorf("the tenant's domain = %q after the migration, want tenant-a", got)
	}
	if pid := m.Pool().WorkerPID(victim.UUID()); pid != victimPID {
		t.Errorf("the tenant's worker = %d after the migration, want %d (untouched)", pid, victimPID)
	}
	if got := extractBuffer(ctx, t, vmig, 1); !bytes.Equal(got, data) {
		t.Errorf("the tenant's buffer after the migration = %d bytes %.32q, want its %d bytes %.32q", len(got), got, len(data), data)
	}
}

// inject applies records to a frozen instance as one round would.
func inject(ctx context.Context, t *testing.T, mig worker.Migrator, recs ...stream.Record) {
	t.Helper()
	if err := mig.Freeze(ctx); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	pr, pw := io.Pipe()
	go func() {
		w := stream.NewWriter(pw)
		for _, rec := range recs {
			if err := w.Write(rec); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(w.Close())
	}()
	err := mig.Inject(ctx, pr)
	pr.CloseWithError(errors.Join(err, io.ErrClosedPipe))
	if err != nil {
		t.Fatalf("Inject: %v", err)
	}
	if err := mig.Thaw(ctx, true); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
}

// extractBuffer is buffer handle's content in a pre-copy round of mig.
func extractBuffer(ctx context.Context, t *testing.T, mig worker.Migrator, handle uint32) []byte {
	t.Helper()
	var out bytes.Buffer
	if _, err := mig.ExtractRound(ctx, false, &out); err != nil {
		t.Fatalf("ExtractRound: %v", err)
	}
	var data []byte
	r := stream.NewReader(&out)
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return data
		}
		if err != nil {
			t.Fatalf("the extracted round: %v", err)
		}
		if bd, ok := rec.(*stream.BufferData); ok && bd.Handle == handle {
			if end := int(bd.Offset) + len(bd.Data); end > len(data) {
				data = append(data, make([]byte, end-len(data))...)
			}
			copy(data[bd.Offset:], bd.Data)
		}
	}
}
