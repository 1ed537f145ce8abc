package child

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/internal/irqfd"
	"github.com/vgpud/vgpud/reuse"
	"github.com/vgpud/vgpud/worker/sandbox"
	"github.com/vgpud/vgpud/worker/wire"
)

// Options configure Serve.
type Options struct {
	// Open opens the physical device with the index Hello names; nil means
	// gpu.Open by index.
	Open func(index int) (gpu.Device, error)
	// OpenContext opens the device with that index anew for one device
	// context of an instance (ABI 1.5): a device context of its own, in
	// which only that context's buffers are reachable (docs/isolation.md
	// "Device contexts"). nil: gpu.Open by index, an OpenCL context of its
	// own in this process (a GPU's per-context address space).
	//
	// b bounds what the context's device may take: its memory (where the
	// device runs in a process of its own, that process's RLIMIT_DATA)
	// and the time a call to it may go unanswered.
	OpenContext func(index int, b ContextBounds) (gpu.Device, error)
	// CacheDir is the domain's compiler cache (its size is capped after
	// each build); empty: none managed.
	CacheDir string
	Logger   *slog.Logger
	// Foreign configures the mapping of Xen guest RAM (wire.Foreign);
	// the zero value maps through privcmd. Tests set a fake mapper.
	Foreign guestmem.ForeignConfig
}

// server is one worker: the instances of one trust domain on one device.
type server struct {
	conn *wire.Conn
	opts Options
	log  *slog.Logger

	ctx    context.Context // ends when the connection does
	cancel context.CancelFunc
	wg     sync.WaitGroup // request handlers and doorbell loops

	mu sync.Mutex
	// Guarded by mu.
	hello    *wire.Hello
	g        gpu.Device
	exec     *executorDevice // the executor g is served by; nil: g is in this process
	dev      *aggregator.Device
	eng      *reuse.Engine
	dom      *reuse.Domain
	slots    map[uint32]*slot
	byID     map[string]uint32
	building int // builds in progress (the cache is trimmed when none is)

	rmu      sync.Mutex
	nextReq  uint32
	pending  map[uint32]chan reply // this worker's requests awaiting a Reply
	nextTurn uint32
}

// slot is one instance in the worker.
type slot struct {
	id       string
	in       *aggregator.Instance
	mem      *guestmem.Map
	page     []byte   // the instance page, mapped
	doorbell *os.File // eventfd the main process signals
	notify   int      // eventfd this worker signals
	done     chan struct{}
	applyMu  sync.Mutex // one reader of the page's doorbells at a time (apply)
	log      *slog.Logger
	// The kick eventfd the worker reads itself (kicks.go), nil if none;
	// kicksClosed once the slot is being removed.
	kickMu      sync.Mutex
	kickW       *irqfd.Watcher
	kicksClosed bool
	// arrived holds the guest pages an incoming migration's final round
	// brought (stream.GuestPages), by page address, until Thaw writes
	// them into guest RAM: after QEMU has loaded the VM, which would
	// otherwise overwrite them (docs/migration.md).
	arrivedMu sync.Mutex
	arrived   map[uint64][]byte
}

// Serve runs the worker protocol on conn until the main process hangs up
// (nil) or breaks the protocol (an error wrapping wire.ErrProtocol). Every
// instance is closed and the device released on return.
func Serve(conn *wire.Conn, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.OpenContext == nil {
		opts.OpenContext = func(i int, _ ContextBounds) (gpu.Device, error) { return gpu.Open(fmt.Sprint(i)) }
	}
	if opts.Open == nil {
		opts.Open = func(i int) (gpu.Device, error) { return gpu.Open(fmt.Sprint(i)) }
	}
	s := &server{conn: conn, opts: opts, log: opts.Logger, slots: map[uint32]*slot{}, byID: map[string]uint32{},
		pending: map[uint32]chan reply{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	err := s.loop()
	if os.Getenv(EnvWorker) == "1" {
		// A worker process whose main process is gone exits at once: a
		// launch that never ends would hold up an orderly close forever,
		// and the kernel frees everything a process had.
		if err != nil && !errors.Is(err, io.EOF) {
			s.log.Error("worker ends", "err", fmt.Sprint(err))
			os.Exit(1)
		}
		os.Exit(0)
	}
	s.cancel()
	conn.Close()
	s.closeAll()
	s.wg.Wait()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

func (s *server) loop() error {
	for {
		h, m, fds, err := s.conn.Recv()
		if err != nil {
			return err
		}
		if r, ok := m.(*wire.Reply); ok {
			s.rmu.Lock()
			ch, ok := s.pending[h.ID]
			delete(s.pending, h.ID)
			s.rmu.Unlock()
			if !ok {
				closeFDs(fds)
				return fmt.Errorf("%w: reply to request %d, which is not waiting", wire.ErrProtocol, h.ID)
			}
			ch <- reply{r, fds}
			continue
		}
		if p, ok := m.(*wire.Parent); ok {
			// The parent-death signal is the start thread's, where
			// this loop runs in a worker process (init locks it).
			s.parent(h.ID, p, fds)
			continue
		}
		// Each request runs on its own goroutine: a handler may wait (an
		// instance's close waits for its worker goroutine, which may wait
		// for a turn this loop must deliver).
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			st, msg, body := s.handle(m, fds)
			if st != abi.StatusOK {
				s.log.Debug("request failed", "type", m.Type(), "status", st, "err", msg)
			}
			if err := s.conn.Send(h.ID, &wire.Reply{Status: uint32(st), Msg: msg, Body: body}); err != nil && s.ctx.Err() == nil {
				s.log.Warn("send reply", "err", err)
			}
		}()
	}
}

// parent serves wire.Parent on the loop's own goroutine.
func (s *server) parent(id uint32, p *wire.Parent, fds []int) {
	closeFDs(fds)
	r := &wire.Reply{Status: uint32(abi.StatusOK)}
	if err := setParentDeath(p.Arm); err != nil {
		r.Status, r.Msg = uint32(abi.StatusOf(err)), err.Error()
	}
	if err := s.conn.Send(id, r); err != nil && s.ctx.Err() == nil {
		s.log.Warn("send reply", "err", err)
	}
}

// handle serves one request; it owns fds.
func (s *server) handle(m wire.Msg, fds []int) (abi.Status, string, []byte) {
	fail := func(err error) (abi.Status, string, []byte) {
		st := abi.StatusOf(err)
		if st == abi.StatusOK {
			st = abi.StatusInternal
		}
		return st, err.Error(), nil
	}
	if _, ok := m.(*wire.Hello); !ok {
		s.mu.Lock()
		ready := s.dev != nil
		s.mu.Unlock()
		if !ready {
			closeFDs(fds)
			return fail(abi.Errorf(abi.StatusInternal, "%v before hello", m.Type()))
		}
	}
	var err error
	var body []byte
	switch m := m.(type) {
	case *wire.Hello:
		body, err = s.helloed(m)
	case *wire.Add:
		err = s.add(m, fds)
		fds = nil
	case *wire.Memory:
		err = s.memory(m, fds)
		fds = nil
	case *wire.Foreign:
		err = s.foreign(m, fds)
		fds = nil
	case *wire.Remove:
		err = s.remove(m)
	case *wire.Enable:
		err = s.withSlot(m.Slot, func(sl *slot) error {
			sh := sl.in.Shared()
			return sl.in.EnableRing(aggregator.RingConfig{Base: m.Base, ComplBase: m.ComplBase, Slots: m.Slots,
				Shadow: sh.RingShadow.Load(), PollWord: sh.RingPollWord.Load()})
		})
	case *wire.Disable:
		err = s.withSlot(m.Slot, func(sl *slot) error { sl.in.DisableRing(); return nil })
	case *wire.Reset:
		err = s.withSlot(m.Slot, func(sl *slot) error { sl.in.Reset(); return nil })
	case *wire.Quota:
		err = s.withSlot(m.Slot, func(sl *slot) error {
			if err := sl.in.SetProgramBytes(m.Limits.ProgramBytes); err != nil {
				return err
			}
			return sl.in.SetProfile(m.Limits.Profile, m.Limits.MemBytes)
		})
	case *wire.Reuse:
		err = s.withSlot(m.Slot, func(sl *slot) error {
			if m.On {
				sl.in.SetReuseDomain(s.domain())
			} else {
				sl.in.SetReuseDomain(nil)
			}
			return nil
		})
	case *wire.Budget:
		s.domain().SetBudget(m.Bytes)
	case *wire.Stats:
		body = s.stats()
	case *wire.Extract:
		body, err = s.extract(m, fds[0])
		fds = nil
	case *wire.Inject:
		err = s.inject(m, fds[0])
		fds = nil
	case *wire.Freeze:
		err = s.withSlot(m.Slot, func(sl *slot) error { return sl.in.Freeze(s.ctx) })
	case *wire.GuestLog:
		err = s.withSlot(m.Slot, func(sl *slot) error { sl.mem.LogWrites(m.On); return nil })
	case *wire.Kicks:
		fd := fds[0]
		fds = nil
		taken := false
		err = s.withSlot(m.Slot, func(sl *slot) error { taken = true; return sl.takeKicks(fd) })
		if !taken {
			unix.Close(fd)
		}
	case *wire.StopKicks:
		err = s.withSlot(m.Slot, func(sl *slot) error { sl.stopKicks(false); return nil })
	case *wire.Thaw:
		err = s.withSlot(m.Slot, func(sl *slot) error {
			if err := sl.writeArrived(); err != nil {
				return err
			}
			sl.mem.LogWrites(false) // a migration ended: its log with it
			if m.Forget {
				if err := sl.in.ResetMigration(s.ctx); err != nil {
					return err
				}
			}
			sl.in.Thaw()
			return nil
		})
	default:
		err = abi.Errorf(abi.StatusInternal, "%v is not a request to a worker", m.Type())
	}
	closeFDs(fds)
	if err != nil {
		return fail(err)
	}
	return abi.StatusOK, "", body
}

func (s *server) domain() *reuse.Domain {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dom
}

func (s *server) helloed(h *wire.Hello) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hello != nil {
		return nil, abi.Errorf(abi.StatusInternal, "second hello")
	}
	if h.Version != wire.Version {
		return nil, abi.Errorf(abi.StatusInternal, "protocol version %d, this worker speaks %d", h.Version, wire.Version)
	}
	g, err := s.opts.Open(int(h.Device))
	if err != nil {
		return nil, fmt.Errorf("open device %d: %w", h.Device, err)
	}
	if e, ok := g.(*executorDevice); ok {
		s.exec = e
	}
	g = guardLost(g, s.contextLost)
	s.g = g
	s.dev = aggregator.NewDevice(g, s, s.log)
	s.eng = reuse.New(reuse.Config{Budget: max(h.ReuseBudget, 1)})
	if h.Shared {
		if s.dom, err = s.eng.Shared(h.Domain); err != nil {
			return nil, err
		}
	} else {
		s.dom = s.eng.Private(strings.TrimPrefix(h.Domain, reuse.PrivatePrefix))
	}
	if h.ReuseBudget > 0 {
		s.dom.SetBudget(h.ReuseBudget)
	}
	s.hello = h
	info := g.Info()
	r := wire.HelloReply{Name: info.Name, ComputeUnits: info.ComputeUnits, MaxWorkGroup: info.MaxWorkGroupSize, MaxAllocBytes: info.MaxAllocBytes,
		Features: wire.Features}
	return r.EncodeBody(), nil
}

func (s *server) add(m *wire.Add, fds []int) (err error) {
	pageFD, bellFD, notifyFD := fds[0], fds[1], fds[2]
	defer func() {
		if err != nil {
			closeFDs([]int{pageFD, bellFD, notifyFD})
		}
	}()
	s.mu.Lock()
	_, taken := s.slots[m.Slot]
	_, dup := s.byID[m.ID]
	s.mu.Unlock()
	if taken || dup || m.ID == "" {
		return abi.Errorf(abi.StatusExists, "slot %d or instance %q in use", m.Slot, m.ID)
	}
	if err := guestmem.CheckSealed([]int{pageFD}); err != nil {
		return fmt.Errorf("instance page: %w", err)
	}
	page, err := unix.Mmap(pageFD, 0, abi.PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map instance page: %w", err)
	}
	unix.Close(pageFD)
	pageFD = -1
	sh, err := aggregator.SharedIn(page, true)
	if err != nil {
		unix.Munmap(page)
		return err
	}
	sl := &slot{id: m.ID, mem: &guestmem.Map{Foreign: s.opts.Foreign}, page: page, notify: notifyFD, done: make(chan struct{}),
		log: s.log.With("instance", m.ID)}
	sl.doorbell = os.NewFile(uintptr(bellFD), "doorbell")
	bellFD = -1
	device := int(s.hello.Device)
	in, err := s.dev.NewInstance(aggregator.InstanceConfig{
		ID: m.ID, Profile: m.Limits.Profile, MemBytes: m.Limits.MemBytes, ProgramBytes: m.Limits.ProgramBytes,
		ComputeUnits: m.Limits.ComputeUnits, Memory: sl.mem, Logger: s.log, Shared: sh, Notify: sl.signal,
		Contexts: m.Contexts,
		OpenContext: func(id uint32, mem aggregator.ContextMemory) (gpu.Device, error) {
			return s.opts.OpenContext(device, ContextBounds{
				DataBytes: sandbox.DataLimit(mem.Device, mem.Programs),
				Limits:    func() (time.Duration, time.Duration) { return sh.TimeLimits() },
				Arena:     func() (*os.File, error) { return s.contextArena(m.Slot, id, mem.Device) },
			})
		},
	})
	if err != nil {
		sl.doorbell.Close()
		unix.Munmap(page)
		return err
	}
	sl.in = in
	in.SetPoll(sl.apply)
	if m.Reuse {
		in.SetReuseDomain(s.domain())
	}
	s.mu.Lock()
	s.slots[m.Slot] = sl
	s.byID[m.ID] = m.Slot
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		sl.bells()
	}()
	return nil
}

// signal tells the main process a completion is in guest RAM.
func (sl *slot) signal(uint32) {
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(sl.notify, one[:]) // a full counter has a notice pending anyway
}

// bells applies what the main process publishes in the instance page,
// each time it signals, until the doorbell eventfd is closed.
func (sl *slot) bells() {
	defer close(sl.done)
	var b [8]byte
	for {
		if _, err := sl.doorbell.Read(b[:]); err != nil {
			return
		}
		sl.apply()
	}
}

// apply applies the doorbells, kicks and context kicks published in the
// instance page: after a signal (bells), or found by an instance's loop
// polling the page (aggregator.Instance.SetPoll). It is serialised: the
// flag that says something was published and the tail it reads belong to
// one reader at a time, or an older tail could be applied after a newer.
func (sl *slot) apply() {
	sl.applyMu.Lock()
	defer sl.applyMu.Unlock()
	sh := sl.in.Shared()
	// Device contexts first (ABI 1.5): each bit a kicked context.
	ctxs := sh.CtxKicks.Swap(0)
	for ctxs != 0 {
		id := uint32(bits.TrailingZeros64(ctxs)) + 1
		ctxs &= ctxs - 1
		if err := sl.in.ContextKick(id); err != nil {
			sl.in.LatchError(abi.StatusOf(err))
		}
	}
	// A guest that may skip kicks while the loop polls (ABI 1.6) left
	// its tail in its shadow.
	if err := sl.in.PollShadows(); err != nil {
		sl.in.LatchError(abi.StatusOf(err))
	}
	// A signal may carry context kicks only: the default ring was rung
	// when Rung says so.
	if sh.Rung.Swap(0) == 0 {
		return
	}
	var err error
	if sh.Kick.CompareAndSwap(1, 0) {
		err = sl.in.Kick(sh.Shadow.Load())
	} else {
		err = sl.in.Doorbell(sh.Tail.Load())
	}
	if err != nil {
		sl.in.LatchError(abi.StatusOf(err))
	}
}

// close frees the instance (after its doorbell and kick loops end).
func (sl *slot) close() error {
	sl.stopKicks(true)
	sl.doorbell.Close()
	<-sl.done
	err := sl.in.Close()
	sl.in.SetReuseDomain(nil)
	sl.mem.Close()
	unix.Close(sl.notify)
	unix.Munmap(sl.page)
	return err
}

func (s *server) withSlot(n uint32, f func(*slot) error) error {
	s.mu.Lock()
	sl, ok := s.slots[n]
	s.mu.Unlock()
	if !ok {
		return abi.Errorf(abi.StatusNotFound, "no instance in slot %d", n)
	}
	return f(sl)
}

func (s *server) memory(m *wire.Memory, fds []int) error {
	regions := make([]guestmem.Region, len(m.Regions))
	for i, r := range m.Regions {
		regions[i] = guestmem.Region{GPA: r.GPA, Size: r.Size, Offset: r.Offset, FD: fds[i]}
	}
	err := s.withSlot(m.Slot, func(sl *slot) error { return sl.mem.Update(regions) })
	if abi.StatusOf(err) == abi.StatusNotFound {
		closeFDs(fds) // Update took none of them
	}
	return err
}

// foreign maps a Xen domain's guest RAM through the privcmd fd the main
// process restricted to that domain.
func (s *server) foreign(m *wire.Foreign, fds []int) error {
	regions := make([]guestmem.Region, len(m.Regions))
	for i, r := range m.Regions {
		regions[i] = guestmem.Region{GPA: r.GPA, Size: r.Size, FD: fds[0], Foreign: true, Domain: uint16(m.Domain)}
	}
	err := s.withSlot(m.Slot, func(sl *slot) error { return sl.mem.Update(regions) })
	if abi.StatusOf(err) == abi.StatusNotFound {
		closeFDs(fds) // Update took none of them
	}
	return err
}

func (s *server) remove(m *wire.Remove) error {
	s.mu.Lock()
	sl, ok := s.slots[m.Slot]
	if ok && m.IfEmpty && sl.in.Holds() {
		s.mu.Unlock()
		return abi.Errorf(abi.StatusBusy, "instance %s holds buffers or programs", sl.id)
	}
	delete(s.slots, m.Slot)
	if ok {
		delete(s.byID, sl.id)
	}
	s.mu.Unlock()
	if !ok {
		return abi.Errorf(abi.StatusNotFound, "no instance in slot %d", m.Slot)
	}
	return sl.close()
}

func (s *server) stats() []byte {
	s.mu.Lock()
	d, n := s.dom, len(s.slots)
	s.mu.Unlock()
	st := d.Stats.Snapshot()
	r := wire.StatsReply{Entries: int64(d.Entries()), Bytes: d.Bytes(), Budget: d.Budget(), Hits: st.Hits, Misses: st.Misses,
		Skipped: st.Skipped, Recorded: st.Recorded, Evictions: st.Evictions, BytesSaved: st.BytesSaved, DeviceNanos: st.DeviceNanos,
		Instances: uint32(n)}
	return r.EncodeBody()
}

// closeAll closes every instance and the device (the connection is gone).
func (s *server) closeAll() {
	s.mu.Lock()
	slots := s.slots
	s.slots, s.byID = map[uint32]*slot{}, map[string]uint32{}
	dev, g := s.dev, s.g
	s.mu.Unlock()
	for _, sl := range slots {
		if err := sl.close(); err != nil {
			s.log.Warn("close instance", "instance", sl.id, "err", err)
		}
	}
	if dev != nil {
		dev.Close()
	}
	if g != nil {
		g.Close()
	}
}

// reply is a Reply to one of this worker's requests, with the fds it
// carried (an Arena's memory file).
type reply struct {
	r   *wire.Reply
	fds []int
}

// request sends m to the main process and waits for its Reply. If ctx
// ends first, after waits for the Reply in the background (a turn granted
// meanwhile must be released). A Reply's fds are closed: only
// requestFDs's caller takes them.
func (s *server) request(ctx context.Context, m wire.Msg, after func(*wire.Reply)) (*wire.Reply, error) {
	r, fds, err := s.requestFDs(ctx, m, after)
	closeFDs(fds)
	return r, err
}

// requestFDs is request that also returns the fds the Reply carried,
// which the caller must close.
func (s *server) requestFDs(ctx context.Context, m wire.Msg, after func(*wire.Reply)) (*wire.Reply, []int, error) {
	ch := make(chan reply, 1)
	s.rmu.Lock()
	s.nextReq++
	id := s.nextReq
	s.pending[id] = ch
	s.rmu.Unlock()
	if err := s.conn.Send(id, m); err != nil {
		s.rmu.Lock()
		delete(s.pending, id)
		s.rmu.Unlock()
		return nil, nil, err
	}
	select {
	case r := <-ch:
		return r.r, r.fds, nil
	case <-ctx.Done():
		go func() {
			select {
			case r := <-ch:
				closeFDs(r.fds)
				if after != nil {
					after(r.r)
				}
			case <-s.ctx.Done():
			}
		}()
		return nil, nil, ctx.Err()
	case <-s.ctx.Done():
		return nil, nil, fmt.Errorf("main process gone: %w", aggregator.ErrClosed)
	}
}

// contextArena asks the main process for the memory the executor of
// context id of the instance in slot shares with this worker, bytes
// long (wire.Arena); nil, with the reason, where it gives none.
func (s *server) contextArena(slot, id uint32, bytes uint64) (*os.File, error) {
	r, fds, err := s.requestFDs(s.ctx, &wire.Arena{Slot: slot, Context: id, Bytes: bytes}, nil)
	if err != nil {
		return nil, fmt.Errorf("arena for context %d: %w", id, err)
	}
	if r.Status != uint32(abi.StatusOK) || len(fds) != 1 {
		closeFDs(fds)
		return nil, fmt.Errorf("arena for context %d: status %d: %s", id, r.Status, r.Msg)
	}
	return os.NewFile(uintptr(fds[0]), "context-arena"), nil
}

func (s *server) turnNumber() uint32 {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.nextTurn++
	return s.nextTurn
}

func (s *server) slotOf(id string) (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.byID[id]
	if !ok {
		return 0, fmt.Errorf("instance %s: %w", id, aggregator.ErrClosed)
	}
	return n, nil
}

// Acquire asks the main process's scheduler for a device turn: the
// aggregator's Arbiter, across the process boundary.
func (s *server) Acquire(ctx context.Context, id string, cost time.Duration) (time.Duration, func(time.Duration, int), error) {
	n, err := s.slotOf(id)
	if err != nil {
		return 0, nil, err
	}
	turn := s.turnNumber()
	release := s.releaser(turn)
	r, err := s.request(ctx, &wire.Turn{Turn: turn, Slot: n, Kind: wire.TurnDevice, Cost: max(cost, 0)}, func(r *wire.Reply) {
		if r.Status == uint32(abi.StatusOK) {
			release(0, 0)
		}
	})
	if err != nil {
		return 0, nil, err
	}
	if r.Status != uint32(abi.StatusOK) {
		return 0, nil, abi.Errorf(abi.Status(r.Status), "device turn refused: %s", r.Msg)
	}
	g, err := wire.DecodeTurnGrant(r.Body)
	if err != nil {
		release(0, 0)
		return 0, nil, err
	}
	return g.SliceBudget, release, nil
}

// releaser returns the function that ends device turn turn with a
// TurnRelease, once however often it is called.
func (s *server) releaser(turn uint32) func(time.Duration, int) {
	var once sync.Once
	return func(dev time.Duration, slices int) {
		once.Do(func() {
			_ = s.conn.Send(0, &wire.TurnRelease{Turn: turn, Device: max(dev, 0), Slices: uint32(max(slices, 0))})
		})
	}
}

// Took tells the main process that instance id took the free turn its
// scheduler parked in the instance page under number gen (one message,
// no answer awaited), and returns the function that gives the turn back:
// the aggregator's TurnTaker. A failed send is the connection's end,
// which ends the worker.
func (s *server) Took(id string, gen uint64) func(time.Duration, int) {
	n, err := s.slotOf(id)
	if err != nil {
		// Removed meanwhile: the main process forfeits its offers.
		return func(time.Duration, int) {}
	}
	turn := s.turnNumber()
	_ = s.conn.Send(0, &wire.TurnTaken{Turn: turn, Slot: n, Offer: gen})
	return s.releaser(turn)
}

// Compiling tells the main process a build is starting (it bounds how
// long the build may run) and returns the call that says it ended.
func (s *server) Compiling(ctx context.Context, id string) (func(), error) {
	n, err := s.slotOf(id)
	if err != nil {
		return nil, err
	}
	turn := s.turnNumber()
	release := func() { _ = s.conn.Send(0, &wire.TurnRelease{Turn: turn}) }
	r, err := s.request(ctx, &wire.Turn{Turn: turn, Slot: n, Kind: wire.TurnCompile}, func(r *wire.Reply) {
		if r.Status == uint32(abi.StatusOK) {
			release()
		}
	})
	if err != nil {
		return nil, err
	}
	if r.Status != uint32(abi.StatusOK) {
		return nil, abi.Errorf(abi.Status(r.Status), "build refused: %s", r.Msg)
	}
	s.mu.Lock()
	s.building++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			release()
			s.builtOne()
		})
	}, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// Reserve asks the main process for n bytes of the device's memory for
// instance id (docs/overcommit.md): it keeps the device's ledger across
// all trust domains and applies the instance's overcommit policy.
func (s *server) Reserve(ctx context.Context, id string, n uint64) error {
	slot, err := s.slotOf(id)
	if err != nil {
		return err
	}
	r, err := s.request(ctx, &wire.Reserve{Slot: slot, Bytes: n}, func(r *wire.Reply) {
		// Abandoned: give back what a late grant reserved.
		if rr, err := wire.DecodeReserveReply(r.Body); r.Status == uint32(abi.StatusOK) && err == nil && !rr.Relocate {
			_ = s.conn.Send(0, &wire.Unreserve{Slot: slot, Bytes: n})
		}
	})
	if err != nil {
		return err
	}
	if r.Status != uint32(abi.StatusOK) {
		return abi.Errorf(abi.Status(r.Status), "%s", r.Msg)
	}
	rr, err := wire.DecodeReserveReply(r.Body)
	if err != nil {
		return err
	}
	if rr.Relocate {
		return aggregator.ErrRelocate
	}
	return nil
}

// Unreserve gives n bytes of instance id's back to the main process.
func (s *server) Unreserve(id string, n uint64) {
	slot, err := s.slotOf(id)
	if err != nil {
		return // removed: the main process forgot its holdings
	}
	_ = s.conn.Send(0, &wire.Unreserve{Slot: slot, Bytes: n})
}

// contextLost ends a worker process whose device context is unusable
// (gpu.ErrContextLost): every instance of its domain lost it, which the
// main process learns as it learns of any worker's end, and a fresh
// worker opens a fresh context. Outside a worker process (tests) the
// connection is closed instead, which ends Serve.
//
// With an executor, the context is lost when the executor ends (a
// crashing kernel or compiler): the worker then exits with ExitExecutor;
// or when it breaks its protocol (ExitContextLost; it ends with the
// worker).
func (s *server) contextLost(err error) {
	code := ExitContextLost
	if e := s.executorOf(); e != nil {
		// Its end follows its socket's at once; a live one (it broke the
		// protocol) ends with this worker.
		gone, how := e.ended(5 * time.Second)
		if gone {
			code = ExitExecutor
		}
		s.log.Error("the executor is gone: ending the worker, its domain starts again on a fresh one", "executor", how, "err", fmt.Sprint(err))
	} else {
		s.log.Error("device context lost: ending the worker, its domain starts again on a fresh one", "err", fmt.Sprint(err))
	}
	if os.Getenv(EnvWorker) == "1" {
		os.Exit(code)
	}
	s.conn.Close()
}

func (s *server) executorOf() *executorDevice {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exec
}
