//go:build apps

package tests

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/image"
	"github.com/vgpud/vgpud/guestagent/image/imagetest"
)

// appsCheck runs every application issue 11 names, unmodified, in the
// guest through the ICD, as nobody. pyopencl's tests run from a copy of
// the read-only doc directory (pytest writes next to them).
const appsCheck = "#!/bin/sh\n" + userlandCheckFunc + `user() { su -p -s /bin/sh -c "HOME=/tmp $*" nobody; }
cp -r /usr/share/doc/python-pyopencl-doc/examples /tmp/pyopencl-tests
chmod -R a+rwX /tmp/pyopencl-tests
cd /tmp/pyopencl-tests
for t in test_wrapper test_array test_enqueue_copy; do
	check $t user python3 -m pytest -q -p no:cacheprovider -rfEs --tb=line $t.py
done
cd /tmp
# hashcat keeps its files under the passwd entry's home: root here.
check hashcat hashcat -b -m 0
check hashcat-selftest hashcat -m 0 -a 3 --potfile-disable -O e2fc714c4727ee9395f324cd2e7f331f ?l?l?l?l
tuner=$(ls /usr/bin/clblast_tuner_xaxpy /usr/bin/clblast_tuner_copy_fast 2>/dev/null | head -n 1)
check clblast user $tuner -precision 32
check clpeak user clpeak
`

// TestGuestApps (make test-apps) boots two userland guests at once on one
// device, each running appsCheck: pyopencl's own tests, clpeak, hashcat's
// benchmark and a mask attack on an MD5, and a CLBlast tuner. It is not
// part of make test (under TCG, with two guests sharing two host cores,
// pyopencl's tests take about 11 minutes and clpeak's full run over 25);
// it is built only with -tags apps (make test-apps). clpeak runs last, so
// that a run cut short still shows everything else.
func TestGuestApps(t *testing.T) {
	a := imagetest.RequireApps(t)
	lib := builtICD(t)
	m := host(t)
	script := filepath.Join(t.TempDir(), "apps-check")
	if err := os.WriteFile(script, []byte(appsCheck), 0o755); err != nil {
		t.Fatal(err)
	}
	initrd := imagetest.AppsInitramfs(t, a, []image.File{
		{Src: lib, Dst: "/lib/vgpud/libvgpud-icd.so", Mode: 0o755},
		{Src: script, Dst: image.BinDir + "/apps-check", Mode: 0o755},
	}, "github.com/vgpud/vgpud/guestagent/cmd/vgpu-icdd")

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Minute)
	defer cancel()
	type result struct {
		out     map[string]string
		codes   map[string]int
		console string
		err     error
	}
	res := make([]result, 2)
	var wg sync.WaitGroup
	for i := range res {
		inst := mustCreate(t, m, "vgpu-medium")
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &res[i]
			r.console, r.err = bootApps(ctx, a, initrd, inst.Socket(), imagetest.AppsBinDir+"/apps-check", 2048)
			r.out, r.codes = userlandResults(strings.Split(r.console, "\n"))
		}()
	}
	wg.Wait()
	summary := regexp.MustCompile(`(?m)^=*\s*([0-9]+ (?:passed|failed|skipped|xfailed|xpassed|errors?|warnings?|deselected)\b.*?) in [0-9.]+s`)
	for i, r := range res {
		if r.err != nil {
			t.Errorf("guest %d: %v\n%s", i, r.err, r.console)
			continue
		}
		for _, name := range []string{"test_wrapper", "test_array", "test_enqueue_copy"} {
			s := summary.FindStringSubmatch(r.out[name])
			if s == nil {
				t.Errorf("guest %d: pyopencl %s: no pytest summary line in:\n%s", i, name, tail(r.out[name], 20))
				continue
			}
			t.Logf("guest %d: pyopencl %s: %s", i, name, s[1])
			if r.codes[name] != 0 {
				t.Errorf("guest %d: pyopencl %s: exit %d; failures:\n%s", i, name, r.codes[name], failures(r.out[name]))
			}
		}
		for _, name := range []string{"clpeak", "hashcat", "hashcat-selftest", "clblast"} {
			c, ok := r.codes[name]
			t.Logf("guest %d: %s: exit %d (ran %v)", i, name, c, ok)
			if !ok || c != 0 {
				t.Errorf("guest %d: %s: exit %d; output:\n%s", i, name, c, tail(r.out[name], 40))
			}
		}
		if s := regexp.MustCompile(`(?m)^Speed\.#1\.*: *(.*)$`).FindStringSubmatch(r.out["hashcat"]); s != nil {
			t.Logf("guest %d: hashcat -b -m 0: %s", i, s[1])
		}
		if !strings.Contains(r.out["hashcat-selftest"], "e2fc714c4727ee9395f324cd2e7f331f:abcd") && r.codes["hashcat-selftest"] == 0 {
			t.Errorf("guest %d: hashcat did not crack md5(abcd); output:\n%s", i, tail(r.out["hashcat-selftest"], 20))
		}
		if !strings.Contains(r.out["clblast"], "Found best result") && r.codes["clblast"] == 0 {
			t.Errorf("guest %d: the CLBlast tuner found no result; output:\n%s", i, tail(r.out["clblast"], 20))
		}
	}
}

// failures is pytest's short summary: its FAILED and ERROR lines.
func failures(out string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "FAILED ") || strings.HasPrefix(l, "ERROR ") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
