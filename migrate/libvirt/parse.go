package libvirt

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/vgpud/vgpud/migrate/qmp"
)

// What virsh prints is parsed here. Its output is treated as untrusted:
// a domain's name and metadata are whatever whoever defined it wrote.

// ErrMalformed is wrapped by every parse error.
var ErrMalformed = errors.New("malformed virsh output")

// maxName bounds a domain name (libvirt has no limit of its own; a
// longer one is refused rather than carried around).
const maxName = 1024

// Event is one line of `virsh event --event lifecycle`:
//
//	event 'lifecycle' for domain 'NAME': Started Booted
type Event struct {
	Domain string
	// Kind is the lifecycle event: Defined, Undefined, Started,
	// Suspended, Resumed, Stopped, Shutdown, PMSuspended, Crashed.
	Kind string
	// Detail is the rest ("Booted", "Destroyed", "Finished after host
	// request"); it may be empty.
	Detail string
}

const eventPrefix = "event 'lifecycle' for domain '"

// ParseEvent parses one line of `virsh event --loop --event lifecycle`,
// with or without --timestamp's "YYYY-MM-DD HH:MM:SS.mmm+0000: " prefix.
// A domain name may itself hold quotes: the name ends at the last "': ".
func ParseEvent(line string) (Event, error) {
	line = strings.TrimRight(line, "\r\n")
	if len(line) > maxName+256 || !utf8.ValidString(line) {
		return Event{}, fmt.Errorf("%w: event line of %d bytes or not UTF-8", ErrMalformed, len(line))
	}
	i := strings.Index(line, eventPrefix)
	if i < 0 || (i > 0 && !strings.HasSuffix(line[:i], ": ")) {
		return Event{}, fmt.Errorf("%w: not a lifecycle event: %.80q", ErrMalformed, line)
	}
	rest := line[i+len(eventPrefix):]
	j := strings.LastIndex(rest, "': ")
	if j < 0 {
		return Event{}, fmt.Errorf("%w: lifecycle event without a domain name: %.80q", ErrMalformed, line)
	}
	ev := Event{Domain: rest[:j]}
	ev.Kind, ev.Detail, _ = strings.Cut(rest[j+3:], " ")
	if err := checkName(ev.Domain); err != nil {
		return Event{}, err
	}
	if ev.Kind == "" || strings.ContainsFunc(ev.Kind, func(r rune) bool { return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z') }) {
		return Event{}, fmt.Errorf("%w: lifecycle event kind %.40q", ErrMalformed, ev.Kind)
	}
	return ev, nil
}

// checkName refuses names vgpud will not pass back to virsh: empty, too
// long, with control characters (libvirt refuses newlines itself).
func checkName(name string) error {
	if name == "" || len(name) > maxName || !utf8.ValidString(name) ||
		strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%w: domain name %.80q", ErrMalformed, name)
	}
	return nil
}

// ParseNames parses `virsh list --name`: one domain name a line, blank
// lines ignored. A name that checkName refuses is skipped, with an error
// naming it among errs.
func ParseNames(out []byte) (names []string, errs error) {
	for line := range strings.Lines(string(out)) {
		line = strings.TrimRight(line, "\r\n")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if err := checkName(line); err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		names = append(names, line)
	}
	return names, errs
}

// Domain states as virsh dominfo prints them.
const (
	StateRunning  = "running"
	StatePaused   = "paused"
	StateShutOff  = "shut off"
	StateBlocked  = "idle" // virsh's word for VIR_DOMAIN_BLOCKED
	StateShutdown = "in shutdown"
	StateCrashed  = "crashed"
	StateSuspend  = "pmsuspended"
)

// DomainInfo is what `virsh dominfo` says about a domain that matters
// here.
type DomainInfo struct {
	Name       string
	UUID       string
	State      string
	Persistent bool
}

// ParseDomInfo parses `virsh dominfo`: "Key:   value" lines. Name, UUID
// and State are required; unknown keys are ignored.
func ParseDomInfo(out []byte) (DomainInfo, error) {
	var d DomainInfo
	seen := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "Name":
			d.Name = val
		case "UUID":
			d.UUID = val
		case "State":
			d.State = val
		case "Persistent":
			d.Persistent = val == "yes"
		default:
			continue
		}
		if seen[key] {
			return DomainInfo{}, fmt.Errorf("%w: dominfo has %s twice", ErrMalformed, key)
		}
		seen[key] = true
	}
	if err := checkName(d.Name); err != nil {
		return DomainInfo{}, fmt.Errorf("dominfo: %w", err)
	}
	if _, err := uuid.Parse(d.UUID); err != nil || len(d.UUID) != 36 {
		return DomainInfo{}, fmt.Errorf("%w: dominfo UUID %.60q", ErrMalformed, d.UUID)
	}
	if d.State == "" || len(d.State) > 32 {
		return DomainInfo{}, fmt.Errorf("%w: dominfo state %.40q", ErrMalformed, d.State)
	}
	return d, nil
}

// Active reports whether the domain has a QEMU process.
func (d DomainInfo) Active() bool { return d.State != StateShutOff }

// MetadataURI is the XML namespace of vgpud's element in a domain's
// <metadata>, and MetadataKey the prefix vgpud writes it with:
//
//	<metadata>
//	  <vgpud:vgpu xmlns:vgpud="https://vgpud.dev/xmlns/vgpu/1" instance="UUID"/>
//	</metadata>
const (
	MetadataURI = "https://vgpud.dev/xmlns/vgpu/1"
	MetadataKey = "vgpud"
)

// maxMetadata bounds the element virsh metadata prints.
const maxMetadata = 64 << 10

// Metadata is vgpud's element in a domain's <metadata>.
type Metadata struct {
	// Instance is the vGPU instance's UUID, canonical (lower case).
	Instance string
}

// XML is the element as `virsh metadata --set` takes it (virsh adds the
// namespace from --uri and --key).
func (m Metadata) XML() string { return `<vgpu instance="` + m.Instance + `"/>` }

// ParseMetadata parses what `virsh metadata DOMAIN URI` prints: one
// element named vgpu whose instance attribute is a UUID, with no
// children or text, and nothing after it. Other attributes are ignored
// (a later vgpud may add some).
func ParseMetadata(out []byte) (Metadata, error) {
	if len(out) > maxMetadata {
		return Metadata{}, fmt.Errorf("%w: metadata of %d bytes", ErrMalformed, len(out))
	}
	var el struct {
		XMLName xml.Name
		Attrs   []xml.Attr `xml:",any,attr"`
		Inner   []byte     `xml:",innerxml"`
	}
	dec := xml.NewDecoder(bytes.NewReader(out))
	dec.Strict = true
	if err := dec.Decode(&el); err != nil {
		return Metadata{}, fmt.Errorf("%w: metadata: %w", ErrMalformed, err)
	}
	if el.XMLName.Local != "vgpu" {
		return Metadata{}, fmt.Errorf("%w: metadata element <%.40s>, want <vgpu>", ErrMalformed, el.XMLName.Local)
	}
	if len(bytes.TrimSpace(el.Inner)) > 0 {
		return Metadata{}, fmt.Errorf("%w: metadata element <vgpu> has content", ErrMalformed)
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Metadata{}, fmt.Errorf("%w: after the metadata element: %w", ErrMalformed, err)
		}
		if cd, ok := tok.(xml.CharData); !ok || len(bytes.TrimSpace(cd)) > 0 {
			return Metadata{}, fmt.Errorf("%w: more after the metadata element", ErrMalformed)
		}
	}
	var instance []string
	for _, a := range el.Attrs {
		if a.Name.Local == "instance" && a.Name.Space == "" {
			instance = append(instance, a.Value)
		}
	}
	if len(instance) != 1 {
		return Metadata{}, fmt.Errorf("%w: metadata element <vgpu> has %d instance attributes, want 1", ErrMalformed, len(instance))
	}
	u, err := uuid.Parse(instance[0])
	if err != nil || len(instance[0]) != 36 {
		return Metadata{}, fmt.Errorf("%w: metadata instance %.60q is not a UUID", ErrMalformed, instance[0])
	}
	return Metadata{Instance: u.String()}, nil
}

// parseReply parses what `virsh qemu-monitor-command` prints: QEMU's
// reply, {"return": ...} or {"error": {"class": ..., "desc": ...}} with
// libvirt's "id", and nothing else but white space.
func parseReply(out []byte) (json.RawMessage, error) {
	var r struct {
		Return json.RawMessage `json:"return"`
		Error  *qmp.Error      `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: QMP reply: %w", ErrMalformed, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more after the QMP reply", ErrMalformed)
	}
	switch {
	case r.Error != nil:
		return nil, r.Error
	case r.Return == nil:
		return nil, fmt.Errorf("%w: QMP reply without return or error", ErrMalformed)
	}
	return r.Return, nil
}
