package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/vgpud/vgpud/mdev/control"
)

// TestUpgradeRefusedWhenNotItsTurn: an upgrade does not start while
// another is in progress, nor once the daemon settled for its shutdown
// (settle waits for the one in progress first), nor after a commit.
func TestUpgradeRefusedWhenNotItsTurn(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(u *upgrader)
		want  error
	}{
		{"in progress", func(u *upgrader) { u.running = make(chan struct{}) }, control.ErrUpgradeBusy},
		{"shutting down", func(u *upgrader) { u.settle() }, ErrStopping},
		{"shutting down after one in progress", func(u *upgrader) {
			running := make(chan struct{})
			u.running = running
			settled := make(chan struct{})
			go func() {
				u.settle()
				close(settled)
			}()
			u.mu.Lock()
			u.running = nil
			u.mu.Unlock()
			close(running) // the upgrade rolled back
			<-settled
		}, ErrStopping},
		{"committed", func(u *upgrader) { u.committed.Store(true) }, control.ErrUpgraded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpgrader(&upgrader{log: slog.New(slog.DiscardHandler)})
			tt.setup(u)
			if _, _, err := u.upgrade(context.Background(), "/bin/false"); !errors.Is(err, tt.want) {
				t.Errorf("upgrade() = %v, want %v", err, tt.want)
			}
		})
	}
}
