package accept

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"
)

func TestRetry(t *testing.T) {
	fails := []error{
		fmt.Errorf("accept: %w", syscall.EMFILE),
		syscall.ENFILE,
		syscall.ECONNABORTED,
	}
	var delays []time.Duration
	n := 0
	got, err := Retry(context.Background(), func() (int, error) {
		if n < len(fails) {
			n++
			return 0, fails[n-1]
		}
		return 42, nil
	}, func(err error, d time.Duration) { delays = append(delays, d) })
	if got != 42 || err != nil {
		t.Fatalf("Retry = %d, %v; want 42 after the transient errors", got, err)
	}
	want := []time.Duration{MinDelay, 2 * MinDelay, 4 * MinDelay}
	if fmt.Sprint(delays) != fmt.Sprint(want) {
		t.Errorf("delays %v, want %v", delays, want)
	}
}

func TestRetryStops(t *testing.T) {
	closed := errors.New("use of closed network connection")
	if _, err := Retry(context.Background(), func() (int, error) { return 0, closed }, nil); err != closed {
		t.Errorf("a permanent error: %v, want it returned at once", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Retry(ctx, func() (int, error) { return 0, syscall.EMFILE }, nil); !errors.Is(err, syscall.EMFILE) {
		t.Errorf("an ended context: %v, want the last error", err)
	}
}
