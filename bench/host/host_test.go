package host

import (
	"os"
	"testing"

	"github.com/vgpud/vgpud/mdev"
	"go.uber.org/goleak"
)

func TestStartClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	h, err := Start("", "vgpud-host-test-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Mgr.Create(mdev.CreateRequest{Profile: "vgpu-small"}); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if _, err := os.Stat(h.Dir); !os.IsNotExist(err) {
		t.Errorf("directory %s left behind: %v", h.Dir, err)
	}
	if _, err := Start("no-such-device", "x"); err == nil {
		t.Errorf("Start(no-such-device) = nil error")
	}
}
