package handover

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// Version is the State format version; a new process refuses another.
const Version = 1

// Bounds on a State, so that a corrupt or hostile one cannot make the new
// process allocate without limit.
const (
	MaxStateBytes = 4 << 20
	MaxFDs        = 1 << 14
	MaxItems      = 4096 // instances, workers, listeners, turns of a worker
	ConfigSize    = 256  // a PCI config space image
)

// ErrState wraps every reason a State is refused.
var ErrState = errors.New("handover state")

// FD names a descriptor by its index in those that came with the State;
// None is no descriptor.
type FD int

// None is the FD of nothing.
const None FD = -1

// State is everything the old process hands over.
type State struct {
	Version int `json:"version"`
	// From is the old process's PID.
	From int `json:"from"`
	// Lock is the run directory's lock file (its flock moves with it).
	Lock      FD         `json:"lock"`
	Listeners []Listener `json:"listeners"`
	Workers   []Worker   `json:"workers"`
	Domains   []Domain   `json:"domains"`
	Instances []Instance `json:"instances"`
}

// Listener is a listening socket of the daemon's own (control, metrics,
// migrate).
type Listener struct {
	Name string `json:"name"`
	FD   FD     `json:"fd"`
}

// Worker is one worker process.
type Worker struct {
	Domain string `json:"domain"`
	Device int    `json:"device"`
	PID    int    `json:"pid"`
	// PIDFD refers to the process whatever becomes of its PID.
	PIDFD FD `json:"pidfd"`
	// Conn is the main process's end of the protocol socket; Log the
	// read end of its stderr.
	Conn FD `json:"conn"`
	Log  FD `json:"log"`
	// Cache is its private directory.
	Cache string `json:"cache"`
	// Hello is its hello reply, as it was decoded.
	Hello    []byte `json:"hello"` // wire.HelloReply body
	NextID   uint32 `json:"next_id"`
	NextSlot uint32 `json:"next_slot"`
	// Turns are the turn requests it made that were not answered yet.
	Turns []Turn `json:"turns"`
}

// Turn is a worker's pending turn request (wire.Turn and its request id).
type Turn struct {
	ID   uint32 `json:"id"`
	Turn uint32 `json:"turn"`
	Slot uint32 `json:"slot"`
	Kind uint8  `json:"kind"`
	Cost int64  `json:"cost"` // nanoseconds
}

// Domain is what the worker pool knows of a trust domain.
type Domain struct {
	Name   string `json:"name"`
	Shared bool   `json:"shared"`
	Budget int64  `json:"budget"`
}

// Instance is one instance's live state; its configuration (profile,
// share, limits, reuse) comes from the run directory's state file.
type Instance struct {
	UUID string `json:"uuid"`
	// Worker is the index of its worker in State.Workers, -1 when its
	// device context is lost.
	Worker int    `json:"worker"`
	Slot   uint32 `json:"slot"`
	Why    string `json:"why,omitempty"` // why it is lost
	// Page, Bell and Notify are its instance page memfd and its doorbell
	// and notify eventfds.
	Page    FD       `json:"page"`
	Bell    FD       `json:"bell"`
	Notify  FD       `json:"notify"`
	Regions []Region `json:"regions"`
	// Listener is its QEMU socket, None without a socket directory.
	Listener FD     `json:"listener"`
	QEMU     *QEMU  `json:"qemu,omitempty"`
	Agent    *Agent `json:"agent,omitempty"`
	Config   []byte `json:"config"` // the config space image
	Regs     Regs   `json:"regs"`
}

// Region is a guest-RAM region (guestmem.Region).
type Region struct {
	GPA    uint64 `json:"gpa"`
	Size   uint64 `json:"size"`
	Offset uint64 `json:"offset"`
	FD     FD     `json:"fd"`
}

// QEMU is an attached VM connection (its transport's session:
// transport.Handover). An mpqemu session (x-pci-proxy-dev) has its irqfd
// and resample eventfd in IRQ and Resample and nothing else, as every
// release wrote it. A transport that keeps state of its own (vfio-user)
// has its descriptors in Extra and its state in Session, which names
// them by their index in Extra; IRQ and Resample are then None.
type QEMU struct {
	Conn     FD              `json:"conn"`
	IRQ      FD              `json:"irq"`
	Resample FD              `json:"resample"`
	Extra    []FD            `json:"extra,omitempty"`
	Session  json.RawMessage `json:"session,omitempty"`
}

// MaxExtra bounds QEMU.Extra: a vfio-user session's DMA windows and
// interrupt fds.
const MaxExtra = 256

// Agent is an instance's guest agent channel.
type Agent struct {
	Listener FD `json:"listener"`
	Conn     FD `json:"conn"` // None when no QEMU is connected
	// Unread are bytes read from Conn but not yet parsed.
	Unread []byte `json:"unread,omitempty"`
	// Watch is the guest's pending watch (agentchan's encoding).
	Watch uint64 `json:"watch"`
}

// Regs are the register file's latched registers (mmio.Device).
type Regs struct {
	RingBase  uint64 `json:"ring_base"`
	ComplBase uint64 `json:"compl_base"`
	Slots     uint32 `json:"slots"`
	Tail      uint32 `json:"tail"`
	Keep      bool   `json:"keep"`
	IntStatus uint32 `json:"int_status"`
	IntEnable uint32 `json:"int_enable"`
	Shadow    uint64 `json:"tail_shadow,omitempty"` // ABI 1.3
	PollWord  uint64 `json:"poll_word,omitempty"`   // ABI 1.6
}

// Encode is the State's bytes.
func Encode(st State) ([]byte, error) {
	st.Version = Version
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode handover state: %w", err)
	}
	if len(b) > MaxStateBytes {
		return nil, fmt.Errorf("encode handover state: %d bytes, over %d", len(b), MaxStateBytes)
	}
	return b, nil
}

// Decode parses and checks a State that came with nfds descriptors: the
// version, the bounds, and that every FD names one of them, each at most
// once, so that each descriptor has exactly one owner.
func Decode(b []byte, nfds int) (State, error) {
	var st State
	if len(b) > MaxStateBytes {
		return st, fmt.Errorf("%w: %d bytes, over %d", ErrState, len(b), MaxStateBytes)
	}
	if nfds < 0 || nfds > MaxFDs {
		return st, fmt.Errorf("%w: %d descriptors", ErrState, nfds)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrState, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return State{}, fmt.Errorf("%w: trailing data", ErrState)
	}
	if err := st.check(nfds); err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrState, err)
	}
	return st, nil
}

func (st *State) check(nfds int) error {
	if st.Version != Version {
		return fmt.Errorf("version %d, this vgpud reads %d", st.Version, Version)
	}
	if len(st.Listeners) > MaxItems || len(st.Workers) > MaxItems || len(st.Instances) > MaxItems || len(st.Domains) > MaxItems {
		return fmt.Errorf("more than %d items", MaxItems)
	}
	used := make([]bool, nfds)
	use := func(what string, fd FD, optional bool) error {
		if fd == None && optional {
			return nil
		}
		if fd < 0 || int(fd) >= nfds {
			return fmt.Errorf("%s: descriptor %d of %d", what, fd, nfds)
		}
		if used[fd] {
			return fmt.Errorf("%s: descriptor %d named twice", what, fd)
		}
		used[fd] = true
		return nil
	}
	if err := use("lock", st.Lock, true); err != nil {
		return err
	}
	names := map[string]bool{}
	for _, l := range st.Listeners {
		if names[l.Name] || l.Name == "" {
			return fmt.Errorf("listener %q: empty or twice", l.Name)
		}
		names[l.Name] = true
		if err := use("listener "+l.Name, l.FD, false); err != nil {
			return err
		}
	}
	for i, w := range st.Workers {
		what := fmt.Sprintf("worker %d", i)
		if w.PID <= 0 || w.Device < 0 || w.Domain == "" || len(w.Turns) > MaxItems {
			return fmt.Errorf("%s: pid %d, device %d, domain %q, %d turns", what, w.PID, w.Device, w.Domain, len(w.Turns))
		}
		if err := use(what+" pidfd", w.PIDFD, false); err != nil {
			return err
		}
		if err := use(what+" conn", w.Conn, false); err != nil {
			return err
		}
		if err := use(what+" log", w.Log, false); err != nil {
			return err
		}
	}
	ids := map[string]bool{}
	for _, in := range st.Instances {
		what := "instance " + in.UUID
		if in.UUID == "" || ids[in.UUID] {
			return fmt.Errorf("%s: empty or twice", what)
		}
		ids[in.UUID] = true
		if in.Worker < -1 || in.Worker >= len(st.Workers) {
			return fmt.Errorf("%s: worker %d of %d", what, in.Worker, len(st.Workers))
		}
		if len(in.Config) != ConfigSize {
			return fmt.Errorf("%s: config space of %d bytes", what, len(in.Config))
		}
		if len(in.Regions) > 64 {
			return fmt.Errorf("%s: %d guest RAM regions", what, len(in.Regions))
		}
		for _, f := range []struct {
			n  string
			fd FD
			o  bool
		}{{"page", in.Page, false}, {"doorbell", in.Bell, false}, {"notify", in.Notify, false}, {"listener", in.Listener, true}} {
			if err := use(what+" "+f.n, f.fd, f.o); err != nil {
				return err
			}
		}
		for _, r := range in.Regions {
			if err := use(what+" region", r.FD, false); err != nil {
				return err
			}
		}
		if q := in.QEMU; q != nil {
			if err := use(what+" qemu conn", q.Conn, false); err != nil {
				return err
			}
			if err := use(what+" irqfd", q.IRQ, true); err != nil {
				return err
			}
			if err := use(what+" resample fd", q.Resample, true); err != nil {
				return err
			}
			if len(q.Extra) > MaxExtra || (len(q.Extra) > 0 && (q.IRQ != None || q.Resample != None)) {
				return fmt.Errorf("%s: %d extra descriptors (at most %d, and none beside an irqfd)", what, len(q.Extra), MaxExtra)
			}
			for _, fd := range q.Extra {
				if err := use(what+" qemu extra", fd, false); err != nil {
					return err
				}
			}
		}
		if a := in.Agent; a != nil {
			if err := use(what+" agent listener", a.Listener, false); err != nil {
				return err
			}
			if err := use(what+" agent conn", a.Conn, true); err != nil {
				return err
			}
			if len(a.Unread) > 1<<16 {
				return fmt.Errorf("%s: %d unread agent bytes", what, len(a.Unread))
			}
		}
	}
	return nil
}

// Table holds the descriptors of a State being built (the old process:
// Add) or taken apart (the new one: Take).
type Table struct {
	fds   []int
	taken []bool
}

// NewTable is a Table of received descriptors, which it owns.
func NewTable(fds []int) *Table { return &Table{fds: fds, taken: make([]bool, len(fds))} }

// Add duplicates fd into the table (the caller keeps fd) and names it.
func (t *Table) Add(fd int) (FD, error) {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return None, fmt.Errorf("handover: dup descriptor %d: %w", fd, err)
	}
	t.fds = append(t.fds, d)
	t.taken = append(t.taken, false)
	return FD(len(t.fds) - 1), nil
}

// AddConn adds the descriptor of a socket or file (as Add does).
func (t *Table) AddConn(sc syscall.Conn) (FD, error) {
	rc, err := sc.SyscallConn()
	if err != nil {
		return None, fmt.Errorf("handover: %w", err)
	}
	fd := -1
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return None, fmt.Errorf("handover: %w", err)
	}
	return t.Add(fd)
}

// FDs returns the table's descriptors in order (to send).
func (t *Table) FDs() []int { return t.fds }

// Len is how many descriptors the table holds.
func (t *Table) Len() int { return len(t.fds) }

// Take hands fd's descriptor to the caller, who then owns it; None gives
// -1. A State that passed Decode names each descriptor once.
func (t *Table) Take(fd FD) int {
	if fd == None || fd < 0 || int(fd) >= len(t.fds) || t.taken[fd] {
		return -1
	}
	t.taken[fd] = true
	return t.fds[fd]
}

// Close closes every descriptor not taken.
func (t *Table) Close() {
	for i, fd := range t.fds {
		if !t.taken[i] {
			unix.Close(fd)
			t.taken[i] = true
		}
	}
}
