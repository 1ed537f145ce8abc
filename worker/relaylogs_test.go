package worker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRelayLogsQuotesWorkerLines feeds a worker's stderr lines, some
// forged to look like the main process's own records, through relayLogs:
// each becomes one record with a fixed message, the line only as the
// quoted value of "untrusted", and a level no higher than WARN.
func TestRelayLogsQuotesWorkerLines(t *testing.T) {
	lines := []string{
		`{"time":"2026-01-01T00:00:00Z","level":"ERROR","msg":"instance deleted","instance":"victim"}`,
		`{"level":"INFO","msg":"x\",\"level\":\"ERROR"}`,
		`plain text from the compiler "msg":"y"`,
		"\x1b[31mterminal escape",
	}
	var out bytes.Buffer
	pr := &process{log: slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pr.relayLogs(r)
	}()
	if _, err := w.WriteString(strings.Join(lines, "\n") + "\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	<-done
	r.Close()

	recs := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(recs) != len(lines) {
		t.Fatalf("relayLogs wrote %d records, want %d:\n%s", len(recs), len(lines), out.String())
	}
	for i, rec := range recs {
		var got map[string]any
		if err := json.Unmarshal([]byte(rec), &got); err != nil {
			t.Fatalf("record %q: %v", rec, err)
		}
		if msg := got["msg"]; msg != "worker log line (untrusted)" && msg != "worker stderr (untrusted)" {
			t.Errorf("record %d msg = %q, want a fixed message", i, msg)
		}
		if got["untrusted"] != lines[i] {
			t.Errorf("record %d untrusted = %q, want %q", i, got["untrusted"], lines[i])
		}
		if got["level"] == "ERROR" {
			t.Errorf("record %d level = ERROR, want at most WARN", i)
		}
		if _, ok := got["instance"]; ok {
			t.Errorf("record %d carries the worker's attribute \"instance\" as the main process's: %s", i, rec)
		}
	}
}

// TestRelayLogsOverlongLine writes a 1 MiB line into a worker's stderr,
// then ordinary lines (issue 40, item 4): the relay cuts the long line and
// marks it cut, drains the rest of it and relays every later line; the
// pipe stays open, so the writer (the worker, whose next log line would
// otherwise end it) never gets EPIPE.
func TestRelayLogsOverlongLine(t *testing.T) {
	var mu sync.Mutex
	var out bytes.Buffer
	pr := &process{log: slog.New(slog.NewJSONHandler(&lockedWriter{mu: &mu, w: &out}, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	pr.logs = r
	done := make(chan struct{})
	pr.startLogs(done) // as a worker's relay runs: the pipe is closed when it stops

	long := strings.Repeat("x", 1<<20)
	after := []string{`{"level":"INFO","msg":"after"}`, "plain after", strings.Repeat("y", logLineMax)}
	writes := append([]string{long + "\n"}, func() []string {
		var s []string
		for _, l := range after {
			s = append(s, l+"\n")
		}
		return s
	}()...)
	// More lines, written one by one after the long one, as a worker
	// logs on: each must find the pipe open.
	for i := range 20 {
		writes = append(writes, fmt.Sprintf("line %d\n", i))
	}
	for i, s := range writes {
		if _, err := w.WriteString(s); err != nil {
			t.Fatalf("write %d (%d bytes): %v (the relay stopped and closed the pipe)", i, len(s), err)
		}
	}
	w.Close()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not end at EOF")
	}

	mu.Lock()
	defer mu.Unlock()
	recs := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := len(writes)
	if len(recs) != want {
		t.Fatalf("relayLogs wrote %d records, want %d", len(recs), want)
	}
	for i, rec := range recs {
		var got map[string]any
		if err := json.Unmarshal([]byte(rec), &got); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		line := strings.TrimSuffix(writes[i], "\n")
		cut, _ := got["cut_bytes"].(float64)
		if i == 0 {
			if got["untrusted"] != line[:logLineMax] {
				t.Errorf("long line relayed as %d bytes, want its first %d", len(got["untrusted"].(string)), logLineMax)
			}
			if int(cut) != len(line)-logLineMax {
				t.Errorf("long line cut_bytes = %v, want %d", got["cut_bytes"], len(line)-logLineMax)
			}
			continue
		}
		if got["untrusted"] != line {
			t.Errorf("record %d untrusted = %.60q, want %.60q", i, got["untrusted"], line)
		}
		if _, ok := got["cut_bytes"]; ok {
			t.Errorf("record %d marked cut: %v", i, got["cut_bytes"])
		}
	}
}

// TestReadLogLine checks the cut at every length around the limit and
// the reader's buffer, and a last line without its newline.
func TestReadLogLine(t *testing.T) {
	const lim = 10
	for _, n := range []int{0, 1, 9, 10, 11, 4095, 4096, 4097, 9000} {
		in := strings.Repeat("a", n) + "\r\nnext\nlast"
		br := bufio.NewReaderSize(strings.NewReader(in), 16)
		line, cut, err := readLogLine(br, lim)
		wantLine, wantCut := strings.Repeat("a", min(n, lim)), max(0, n-lim)
		if err != nil || string(line) != wantLine || cut != wantCut {
			t.Errorf("n=%d: line %d bytes, cut %d, err %v; want %d, %d, nil", n, len(line), cut, err, len(wantLine), wantCut)
		}
		if line, cut, err := readLogLine(br, lim); string(line) != "next" || cut != 0 || err != nil {
			t.Errorf("n=%d: next line %q, %d, %v", n, line, cut, err)
		}
		if line, cut, err := readLogLine(br, lim); string(line) != "last" || cut != 0 || err != io.EOF {
			t.Errorf("n=%d: last line %q, %d, %v", n, line, cut, err)
		}
		if line, cut, err := readLogLine(br, lim); len(line) != 0 || cut != 0 || err != io.EOF {
			t.Errorf("n=%d: after the end %q, %d, %v", n, line, cut, err)
		}
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
