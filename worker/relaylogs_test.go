package worker

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
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
