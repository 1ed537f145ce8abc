package metrics

import (
	"io"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
	"github.com/vgpud/vgpud/worker/child"
)

func TestMain(m *testing.M) {
	child.EnterRole() // a worker or executor of this test binary's pool
	goleak.VerifyTestMain(m)
}

const vaddSource = `__kernel void vadd(__global const float *a, __global float *b) {
	size_t i = get_global_id(0);
	b[i] = a[i] + 1.0f;
}`

// scrape fetches the handler's text exposition.
func scrape(t *testing.T, m *mdev.Manager) string {
	t.Helper()
	srv := httptest.NewServer(Handler(m))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	srv.Client().CloseIdleConnections()
	return string(b)
}

// value returns the sample of the series whose name and labels match re.
func value(t *testing.T, text, re string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + re + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no series %s in:\n%s", re, text)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMetricsDuringRun: a QEMU-less guest does real work on a vGPU; the
// scrape shows its commands, bytes, launches, kernel and device time, an
// error by status code, and the device's policy and busy time.
func TestMetricsDuringRun(t *testing.T) {
	dev, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatalf("gpu.Open: %v", err)
	}
	defer dev.Close()
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{dev}, SocketDir: t.TempDir(), Transport: mpqemu.Transport{}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	inst, err := m.Create(mdev.CreateRequest{Profile: "vgpu-medium"})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := mpqemutest.Dial(inst.Socket(), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	d, err := driver.Open(vm, vm, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	const n = 4096
	p, _, err := d.Build(vaddSource, "")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := d.CreateBuffer(4 * n)
	b, _ := d.CreateBuffer(4 * n)
	if err := d.Write(a, 0, make([]byte, 4*n)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := d.Launch(p, "vadd", driver.Range1(n, 64), driver.BufferArg(a), driver.BufferArg(b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Read(b, 0, make([]byte, 4*n)); err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(p, "no-such-kernel", driver.Range1(n, 64)); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err == nil {
		t.Fatal("launch of a missing kernel did not fail")
	}
	d.AckError()

	text := scrape(t, m)
	id := inst.UUID()
	lbl := `\{device="0",instance="` + id + `",profile="vgpu-medium"`
	checks := []struct {
		series string
		want   func(float64) bool
		desc   string
	}{
		{`vgpud_instance_launches_total` + lbl + `\}`, func(v float64) bool { return v == 3 }, "3"},
		{`vgpud_instance_copied_bytes_total\{device="0",direction="to_device",instance="` + id + `",profile="vgpu-medium"\}`, func(v float64) bool { return v == 4*n }, "4n"},
		{`vgpud_instance_copied_bytes_total\{device="0",direction="from_device",instance="` + id + `",profile="vgpu-medium"\}`, func(v float64) bool { return v == 4*n }, "4n"},
		{`vgpud_instance_commands_total` + lbl + `\}`, func(v float64) bool { return v >= 9 }, ">= 9"},
		{`vgpud_instance_errors_total` + lbl + `,status="[^"]+"\}`, func(v float64) bool { return v == 1 }, "1"},
		{`vgpud_instance_kernel_seconds_total` + lbl + `\}`, func(v float64) bool { return v > 0 }, "> 0"},
		{`vgpud_instance_device_seconds_total` + lbl + `\}`, func(v float64) bool { return v > 0 }, "> 0"},
		// Commands queued together share a kept turn (aggregator's "many
		// commands per turn"): at least one turn, at most one a command.
		{`vgpud_instance_turns_total` + lbl + `\}`, func(v float64) bool { return v >= 1 && v <= 9 }, "1..9"},
		{`vgpud_instance_share` + lbl + `\}`, func(v float64) bool { return v == 2 }, "2 (vgpu-medium)"},
		{`vgpud_instance_memory_used_bytes` + lbl + `\}`, func(v float64) bool { return v == 8*n }, "8n"},
		{`vgpud_device_policy\{device="0",policy="fixed-share"\}`, func(v float64) bool { return v == 1 }, "1"},
		{`vgpud_device_policy\{device="0",policy="timeslice"\}`, func(v float64) bool { return v == 0 }, "0"},
		{`vgpud_device_busy_seconds_total\{device="0"\}`, func(v float64) bool { return v > 0 }, "> 0"},
		{`vgpud_device_instances\{device="0"\}`, func(v float64) bool { return v == 1 }, "1"},
		// The first launch reads an upload the sample filter has not seen:
		// it runs unhashed and unrecorded (a miss) and leaves its output,
		// a fresh buffer until then, unknown, so the other two are no
		// candidates (skipped). Nothing is hashed or recorded.
		{`vgpud_instance_reuse_launches_total\{device="0",instance="` + id + `",outcome="miss",profile="vgpu-medium"\}`, func(v float64) bool { return v == 1 }, "1"},
		{`vgpud_instance_reuse_launches_total\{device="0",instance="` + id + `",outcome="skipped",profile="vgpu-medium"\}`, func(v float64) bool { return v == 2 }, "2"},
		{`vgpud_instance_reuse_launches_total\{device="0",instance="` + id + `",outcome="recorded",profile="vgpu-medium"\}`, func(v float64) bool { return v == 0 }, "0"},
		{`vgpud_instance_placement_feature\{device="0",feature="kernel_mean_ms",instance="` + id + `",profile="vgpu-medium"\}`, func(v float64) bool { return v > 0 }, "> 0"},
		{`vgpud_instance_placement_feature\{device="0",feature="to_dev_mbps",instance="` + id + `",profile="vgpu-medium"\}`, func(v float64) bool { return v > 0 }, "> 0"},
		{`vgpud_placement_policy\{policy="fewest"\}`, func(v float64) bool { return v == 1 }, "1 (no dataset)"},
		{`vgpud_reuse_domain_budget_bytes\{domain="[^"]+",shared="false"\}`, func(v float64) bool { return v > 0 }, "> 0 (the instance's private domain)"},
	}
	for _, c := range checks {
		if v := value(t, text, c.series); !c.want(v) {
			t.Errorf("%s = %v, want %s", c.series, v, c.desc)
		}
	}
	if err := m.SetPolicy(0, "equal-share"); err != nil {
		t.Fatal(err)
	}
	if text := scrape(t, m); !strings.Contains(text, `vgpud_device_policy{device="0",policy="equal-share"} 1`) {
		t.Errorf("policy switch not in the scrape:\n%s", text)
	}
}
