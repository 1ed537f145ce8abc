package libvirt

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/qmp"
)

func TestParseEvent(t *testing.T) {
	for _, c := range []struct {
		line string
		want Event
		err  bool
	}{
		{line: "event 'lifecycle' for domain 'vm1': Started Booted\n", want: Event{Domain: "vm1", Kind: "Started", Detail: "Booted"}},
		{line: "event 'lifecycle' for domain 'vm1': Shutdown Finished after host request", want: Event{Domain: "vm1", Kind: "Shutdown", Detail: "Finished after host request"}},
		{line: "2026-11-23 21:41:10.461+0000: event 'lifecycle' for domain 'a b': Stopped Destroyed",
			want: Event{Domain: "a b", Kind: "Stopped", Detail: "Destroyed"}},
		{line: "event 'lifecycle' for domain 'it's': Resumed", want: Event{Domain: "it's", Kind: "Resumed"}},
		// A name holding the separator: it ends at the last one.
		{line: "event 'lifecycle' for domain 'x': y': Started Booted", want: Event{Domain: "x': y", Kind: "Started", Detail: "Booted"}},
		{line: "event 'lifecycle' for domain 'vm1': Started Booted\r\n", want: Event{Domain: "vm1", Kind: "Started", Detail: "Booted"}},
		{line: "", err: true},
		{line: "events received: 4", err: true},
		{line: "event loop timed out", err: true},
		{line: "event 'reboot' for domain 'vm1'", err: true},
		{line: "event 'lifecycle' for domain 'vm1'", err: true},
		{line: "event 'lifecycle' for domain '': Started Booted", err: true},
		{line: "event 'lifecycle' for domain 'vm1': ", err: true},
		{line: "event 'lifecycle' for domain 'vm1': St4rted", err: true},
		{line: "event 'lifecycle' for domain 'a\x01b': Started Booted", err: true},
		{line: "junk event 'lifecycle' for domain 'vm1': Started Booted", err: true},
		{line: "event 'lifecycle' for domain '\xff': Started Booted", err: true},
		{line: "event 'lifecycle' for domain '" + strings.Repeat("x", maxName+1) + "': Started Booted", err: true},
	} {
		got, err := ParseEvent(c.line)
		if (err != nil) != c.err {
			t.Errorf("ParseEvent(%.60q) = %+v, %v; want error %v", c.line, got, err, c.err)
			continue
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseEvent(%.60q): %v does not wrap ErrMalformed", c.line, err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("ParseEvent(%.60q) (-want +got):\n%s", c.line, diff)
		}
	}
}

func FuzzParseEvent(f *testing.F) {
	f.Add("event 'lifecycle' for domain 'vm1': Started Booted")
	f.Add("2026-11-23 21:41:10.461+0000: event 'lifecycle' for domain 'x': y': Stopped Destroyed")
	f.Add("event 'lifecycle' for domain '")
	f.Fuzz(func(t *testing.T, line string) {
		ev, err := ParseEvent(line)
		if err != nil {
			return
		}
		if checkName(ev.Domain) != nil || ev.Kind == "" {
			t.Errorf("ParseEvent(%q) = %+v: a name or kind it should have refused", line, ev)
		}
		if !strings.Contains(line, "'"+ev.Domain+"': "+ev.Kind) {
			t.Errorf("ParseEvent(%q) = %+v: not taken from the line", line, ev)
		}
	})
}

const testUUID = "6f0c1c52-1111-4a3b-9c3e-000000000001"

func TestParseMetadata(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		err  bool
	}{
		{in: `<vgpu instance="` + testUUID + `"/>` + "\n", want: testUUID},
		{in: `<vgpu instance="6F0C1C52-1111-4A3B-9C3E-000000000001"/>`, want: testUUID},
		{in: `<vgpud:vgpu xmlns:vgpud="https://vgpud.dev/xmlns/vgpu/1" instance="` + testUUID + `"/>`, want: testUUID},
		{in: `<vgpu instance="` + testUUID + `" later="x"></vgpu>`, want: testUUID},
		{in: ` <vgpu instance="` + testUUID + `">  </vgpu> `, want: testUUID},
		{in: ``, err: true},
		{in: `<vgpu/>`, err: true},
		{in: `<vgpu instance=""/>`, err: true},
		{in: `<vgpu instance="nope"/>`, err: true},
		{in: `<vgpu instance="urn:uuid:` + testUUID + `"/>`, err: true},
		{in: `<gpu instance="` + testUUID + `"/>`, err: true},
		{in: `<vgpu instance="` + testUUID + `"><x/></vgpu>`, err: true},
		{in: `<vgpu instance="` + testUUID + `">text</vgpu>`, err: true},
		{in: `<vgpu instance="` + testUUID + `"/><vgpu instance="` + testUUID + `"/>`, err: true},
		{in: `<vgpu instance="` + testUUID + `"/>trailing`, err: true},
		{in: `<vgpu instance="` + testUUID + `">`, err: true},
		{in: `<vgpu instance="` + testUUID + `" instance="` + testUUID + `"/>`, err: true},
		{in: `<vgpu instance="` + testUUID + `"/>` + strings.Repeat(" ", maxMetadata), err: true},
	} {
		got, err := ParseMetadata([]byte(c.in))
		if (err != nil) != c.err {
			t.Errorf("ParseMetadata(%.80q) = %+v, %v; want error %v", c.in, got, err, c.err)
			continue
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseMetadata(%.80q): %v does not wrap ErrMalformed", c.in, err)
		}
		if got.Instance != c.want {
			t.Errorf("ParseMetadata(%.80q) = %q, want %q", c.in, got.Instance, c.want)
		}
	}
	// What vgpud writes reads back.
	md := Metadata{Instance: testUUID}
	if got, err := ParseMetadata([]byte(md.XML())); err != nil || got != md {
		t.Errorf("ParseMetadata(%q) = %+v, %v", md.XML(), got, err)
	}
}

func FuzzParseMetadata(f *testing.F) {
	f.Add([]byte(`<vgpu instance="` + testUUID + `"/>`))
	f.Add([]byte(`<vgpud:vgpu xmlns:vgpud="https://vgpud.dev/xmlns/vgpu/1" instance="` + testUUID + `"></vgpud:vgpu>`))
	f.Add([]byte(`<vgpu instance="x"><!-- c --></vgpu>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		md, err := ParseMetadata(b)
		if err != nil {
			return
		}
		// An accepted instance is a canonical UUID that writes and reads
		// back the same.
		again, err := ParseMetadata([]byte(md.XML()))
		if err != nil || again != md || len(md.Instance) != 36 || strings.ToLower(md.Instance) != md.Instance {
			t.Errorf("ParseMetadata(%q) = %+v; its XML %q reads back as %+v, %v", b, md, md.XML(), again, err)
		}
	})
}

func TestParseDomInfo(t *testing.T) {
	const good = "Id:             4\nName:           vgpu-t1\nUUID:           9debc2db-2dce-4a27-93ae-319a2f68aade\n" +
		"OS Type:        hvm\nState:          shut off\nCPU(s):         1\nPersistent:     yes\nAutostart:      disable\n" +
		"Security model: none\nMessages:       tainted: custom monitor control commands issued\n\n"
	got, err := ParseDomInfo([]byte(good))
	want := DomainInfo{Name: "vgpu-t1", UUID: "9debc2db-2dce-4a27-93ae-319a2f68aade", State: StateShutOff, Persistent: true}
	if err != nil || got != want {
		t.Errorf("ParseDomInfo = %+v, %v; want %+v", got, err, want)
	}
	if got.Active() {
		t.Error("a shut off domain is active")
	}
	for _, bad := range []string{
		"",
		strings.Replace(good, "Name:           vgpu-t1\n", "", 1),
		strings.Replace(good, "9debc2db-2dce-4a27-93ae-319a2f68aade", "9debc2db", 1),
		strings.Replace(good, "State:          shut off\n", "", 1),
		strings.Replace(good, "vgpu-t1", "vgpu\x1bt1", 1),
		good + "Name: again\n",
	} {
		if got, err := ParseDomInfo([]byte(bad)); err == nil {
			t.Errorf("ParseDomInfo(%q) = %+v, want an error", bad, got)
		}
	}
}

func TestParseNames(t *testing.T) {
	names, err := ParseNames([]byte("a\nb c\n\n \nbad\x07\n" + strings.Repeat("x", maxName+1) + "\nlast"))
	if diff := cmp.Diff([]string{"a", "b c", "last"}, names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if err == nil || !errors.Is(err, ErrMalformed) {
		t.Errorf("error %v, want the two bad names", err)
	}
}

func TestParseReply(t *testing.T) {
	ret, err := parseReply([]byte(`{"return":{"a":1},"id":"libvirt-411"}` + "\n\n"))
	if err != nil || string(ret) != `{"a":1}` {
		t.Errorf("return: %s, %v", ret, err)
	}
	_, err = parseReply([]byte(`{"id":"libvirt-411","error":{"class":"DeviceNotFound","desc":"Device 'nope' not found"}}`))
	var qe *qmp.Error
	if !errors.As(err, &qe) || !errors.Is(err, qmp.ErrDeviceNotFound) || qe.Desc != "Device 'nope' not found" {
		t.Errorf("error reply: %v", err)
	}
	for _, bad := range []string{``, `{}`, `{"id":"x"}`, `[1]`, `{"return":{}} {"return":{}}`, `{"return":{}} x`, `{"return":`} {
		if ret, err := parseReply([]byte(bad)); err == nil {
			t.Errorf("parseReply(%q) = %s, want an error", bad, ret)
		}
	}
}

func TestPlan(t *testing.T) {
	for _, c := range []struct {
		state    string
		attached bool
		explicit bool
		want     step
		err      error
	}{
		{StateShutOff, false, true, stepStart, nil},
		{StateShutOff, false, false, stepNone, nil},
		{StateRunning, false, true, stepPlug, nil},
		{StateRunning, false, false, stepPlug, nil},
		{StatePaused, false, false, stepPlug, nil},
		{StateBlocked, false, false, stepPlug, nil},
		{StateRunning, true, false, stepNone, nil},
		{StateRunning, true, true, stepNone, migrate.ErrAttached},
		{StateShutOff, true, true, stepNone, migrate.ErrAttached},
		{StateCrashed, false, true, stepNone, ErrNotActive},
		{StateShutdown, false, false, stepNone, ErrNotActive},
		{StateSuspend, false, false, stepNone, ErrNotActive},
		{"no state", false, false, stepNone, ErrNotActive},
	} {
		got, err := plan(c.state, c.attached, c.explicit)
		if got != c.want || !errors.Is(err, c.err) || (err == nil) != (c.err == nil) {
			t.Errorf("plan(%q, attached %v, explicit %v) = %v, %v; want %v, %v", c.state, c.attached, c.explicit, got, err, c.want, c.err)
		}
	}
}

func TestReadLines(t *testing.T) {
	in := "one\n" + strings.Repeat("x", 100) + "\ntwo\n" + strings.Repeat("y", 40) + "\nlast"
	var lines []string
	var long []int
	err := readLines(strings.NewReader(in), 32, func(l string) { lines = append(lines, l) }, func(n int) { long = append(long, n) })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"one\n", "two\n", "last"}, lines); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{101, 41}, long); diff != "" {
		t.Errorf("long lines (-want +got):\n%s", diff)
	}
}
