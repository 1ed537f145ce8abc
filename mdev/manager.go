package mdev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/handover"
	"github.com/vgpud/vgpud/internal/accept"
	"github.com/vgpud/vgpud/mdev/agentchan"
	"github.com/vgpud/vgpud/mdev/keeper"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mmio"
	"github.com/vgpud/vgpud/reuse"
	"github.com/vgpud/vgpud/sched"
	"github.com/vgpud/vgpud/worker"
	"github.com/vgpud/vgpud/worker/sandbox"
)

// Config configures a Manager.
type Config struct {
	// Devices are the physical devices instances are placed on. The
	// manager does not close them.
	Devices []gpu.Device
	// Profiles are the vGPU types; nil means DefaultProfiles().
	Profiles []Profile
	// SocketDir, if set, is where each instance listens for its VM at
	// <SocketDir>/<uuid><Transport.Suffix()>.
	SocketDir string
	// SocketGroup, if positive, is the group ID that may use what the
	// manager makes in SocketDir: the directory becomes 0770 and the
	// instances' sockets (the VM's and the agent channel's) 0660, of
	// that group, so that QEMU run by a member (an operator in vgpud's
	// -socket-group, libvirt's QEMU user) can connect, and make its
	// monitor socket there. Otherwise they are the owner's only (0700,
	// 0600).
	SocketGroup int
	// Transport is the protocol VMs speak on the instance sockets
	// (mpqemu.Transport, vfiouser.Transport); required with a SocketDir.
	// Transports that own their event loop (Xen's) attach through
	// Instance.Attach instead.
	Transport transport.Socket
	// Keeper, if set, holds a duplicate of each VM connection while its
	// session lasts, so that the VM's connection ends in order if vgpud
	// dies (package keeper). The manager does not close it.
	Keeper *keeper.Keeper
	Logger *slog.Logger
	// Reuse configures result reuse (docs/reuse.md); the zero value turns
	// it on with a private domain per instance.
	Reuse ReuseConfig
	// WorkerDir is where worker processes keep their private directories
	// (compiler caches); empty: the system's temporary directory.
	WorkerDir string
	// Sandbox, if set, confines every worker in place of the policy
	// derived from this host's OpenCL platforms (worker.Config.Sandbox).
	Sandbox *sandbox.Policy
	// InProcess runs every instance's device work in vgpud's own process:
	// no isolation between tenants (docs/isolation.md). Unsafe; for
	// benchmark baselines only.
	InProcess bool
	// KernelsInWorker runs CPU devices' kernels in the worker processes,
	// which map their guests' RAM, instead of in executors beside them
	// (worker.Config.KernelsInWorker). Unsafe; for benchmark baselines
	// and the test that shows what executors prevent.
	KernelsInWorker bool
	// PollWindow is how long a worker's ring loop looks for the next
	// doorbell before it blocks (worker.Config.PollWindow: 0 the
	// default, negative never).
	PollWindow time.Duration
	// RequestEveryTurn: every device turn of a worker's instance is
	// asked for across the process boundary, none taken from the free
	// turn parked at it (worker.Config.RequestEveryTurn). For benchmark
	// baselines.
	RequestEveryTurn bool
	// Adopt, if set, is what an old vgpud handed over in an upgrade in
	// place (docs/upgrade.md): Create adopts the instances it names
	// (their workers, sockets and connections) instead of making new
	// ones, and Start serves them.
	Adopt *Adoption
	// Placement chooses how instances are placed (docs/placement.md).
	Placement PlacementConfig
	// DeviceMemory is how much memory all instances on each device may
	// hold together (same order as Devices; a missing or 0 entry: the
	// device's own). A profile may advertise more (docs/overcommit.md).
	DeviceMemory []uint64
	// FeatureWindow is how far back the instances' placement features
	// look (docs/placement.md "Features"); 0: DefaultFeatureWindow.
	FeatureWindow time.Duration
	// OnChange, if set, is called after every change an operator would
	// want to survive a restart succeeded (Create, Destroy, SetProfile,
	// SetShare, SetLimits, SetReuse, SetReuseBudget, SetPolicy), in the
	// caller's goroutine, with no lock of the manager held: it may read
	// the manager. Close calls it for nothing.
	OnChange func()
}

// Manager owns the physical devices' schedulers and all instances; the
// instances' device work runs in the worker processes of its pool.
type Manager struct {
	infos       []gpu.Info
	pool        *worker.Pool
	profiles    map[string]Profile
	socketDir   string
	socketGroup int
	transport   transport.Socket
	keeper      *keeper.Keeper // nil: none
	log         *slog.Logger
	onChange    func()
	// place is the placement policy and model; guarded by mu.
	place placement
	// featureWindow is how far back placement features look.
	featureWindow time.Duration
	// reuseOn is false when result reuse is off (Config.Reuse.Off).
	reuseOn     bool
	reuseBudget int64

	ctx    context.Context
	cancel context.CancelFunc
	// acceptRetries counts transient accept errors on instance and agent
	// sockets (accept.Transient), each retried.
	acceptRetries atomic.Uint64
	// connsRefused counts connections refused over a listener's limit
	// (accept.Limit): instance sockets here, vgpud's other listeners
	// through RefuseConn.
	connsRefused atomic.Uint64
	wg           sync.WaitGroup // accept loops and connections

	mu sync.Mutex
	// Guarded by mu.
	instances    map[string]*Instance
	closed       bool
	reusePinned  map[string]int64      // domain budgets set by the operator
	profileOC    map[string]Overcommit // profiles' overcommit settings (overcommit.go)
	profileOCSet map[string]bool       // of which set at run time
	budgeted     map[string]bool       // domains given a budget (to forget when unused)
	// An upgrade in place (handover.go).
	paused   bool
	resume   chan struct{}
	adoption *Adoption
	adopt    map[string]handover.Instance // not yet created
	adopted  []*adoptedInstance           // created, not yet started
	// handedOver: a new process took everything over (HandOver); nothing
	// here may touch an instance, socket or worker again.
	handedOver bool
}

// NewManager validates cfg and returns a Manager with no instances.
func NewManager(cfg Config) (*Manager, error) {
	if len(cfg.Devices) == 0 {
		return nil, errors.New("new manager: no physical device")
	}
	if cfg.SocketDir != "" && cfg.Transport == nil {
		return nil, errors.New("new manager: a socket directory needs a transport (mpqemu.Transport{}, vfiouser.Transport{})")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	profiles := cfg.Profiles
	if profiles == nil {
		profiles = DefaultProfiles()
	}
	m := &Manager{
		profiles:  make(map[string]Profile),
		socketDir: cfg.SocketDir, socketGroup: cfg.SocketGroup,
		transport: cfg.Transport,
		keeper:    cfg.Keeper,
		onChange:  cfg.OnChange,
		log:       log,
		instances: make(map[string]*Instance),
	}
	if !cfg.Reuse.Off {
		m.reuseOn = true
		m.reuseBudget = cfg.Reuse.Budget
		if m.reuseBudget <= 0 {
			m.reuseBudget = DefaultReuseBudget
		}
	}
	place, err := newPlacement(cfg.Placement, len(cfg.Devices))
	if err != nil {
		return nil, fmt.Errorf("new manager: %w", err)
	}
	m.place = place
	m.reusePinned = make(map[string]int64)
	m.profileOC = make(map[string]Overcommit)
	m.profileOCSet = make(map[string]bool)
	m.budgeted = make(map[string]bool)
	for _, p := range profiles {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("new manager: %w", err)
		}
		p = p.withDefaults()
		if _, dup := m.profiles[p.Name]; dup {
			return nil, fmt.Errorf("new manager: profile %s defined twice", p.Name)
		}
		m.profiles[p.Name] = p
		m.profileOC[p.Name] = p.Overcommit
	}
	if m.socketDir != "" {
		if err := os.MkdirAll(m.socketDir, 0o700); err != nil {
			return nil, fmt.Errorf("new manager: %w", err)
		}
		if err := shareWithGroup(m.socketDir, 0o770, m.socketGroup); err != nil {
			return nil, fmt.Errorf("new manager: socket directory: %w", err)
		}
	}
	for _, d := range cfg.Devices {
		m.infos = append(m.infos, d.Info())
	}
	pool, err := worker.NewPool(worker.Config{Devices: m.infos, Dir: cfg.WorkerDir, Logger: log, Sandbox: cfg.Sandbox,
		InProcess: cfg.InProcess, KernelsInWorker: cfg.KernelsInWorker, PollWindow: cfg.PollWindow, RequestEveryTurn: cfg.RequestEveryTurn, GPUs: cfg.Devices, DeviceMemory: cfg.DeviceMemory, Shortage: m.shortage})
	if err != nil {
		return nil, fmt.Errorf("new manager: %w", err)
	}
	m.pool = pool
	if a := cfg.Adopt; a != nil {
		st := a.State
		if err := pool.Adopt(st.Workers, st.Domains, st.Instances, a.FDs); err != nil {
			pool.Close()
			return nil, fmt.Errorf("new manager: %w", err)
		}
		m.adoption, m.adopt = a, map[string]handover.Instance{}
		for _, h := range st.Instances {
			m.adopt[h.UUID] = h
		}
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.featureWindow = cfg.FeatureWindow
	if m.featureWindow <= 0 {
		m.featureWindow = DefaultFeatureWindow
	}
	m.wg.Add(1)
	go m.sampleFeatures(m.featureWindow)
	return m, nil
}

// DeviceStatus describes a physical device and its load.
type DeviceStatus struct {
	gpu.Info
	Instances int `json:"instances"`
}

// Devices describes the physical devices.
func (m *Manager) Devices() []DeviceStatus {
	m.mu.Lock()
	counts := make([]int, len(m.infos))
	for _, in := range m.instances {
		counts[in.device]++
	}
	m.mu.Unlock()
	out := make([]DeviceStatus, len(m.infos))
	for i, info := range m.infos {
		out[i] = DeviceStatus{Info: info, Instances: counts[i]}
		out[i].Index = i
	}
	return out
}

// Profiles lists the vGPU types by name.
func (m *Manager) Profiles() []Profile {
	out := sortedProfiles(m.profiles)
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range out {
		out[i].Overcommit = m.profileOC[out[i].Name]
	}
	return out
}

// CreateRequest asks for a new instance.
type CreateRequest struct {
	UUID    string `json:"uuid,omitempty"`   // empty: a random UUID
	Profile string `json:"profile"`          // a profile name
	Device  *int   `json:"device,omitempty"` // nil: placed by the manager
	// ReuseDomain puts the instance in an operator-named reuse domain
	// (shared with the other instances in it); empty: its private domain.
	ReuseDomain string `json:"reuse_domain,omitempty"`
	// NoReuse turns result reuse off for the instance.
	NoReuse bool `json:"no_reuse,omitempty"`
	// Hint says what the instance will run, for the interference
	// placement policy (ignored with Device set).
	Hint PlaceHint `json:"hint,omitzero"`
	// Name is an operator's name for the instance, unique in the
	// manager and usable wherever its UUID is (Resolve); empty: none.
	Name string `json:"name,omitempty"`
	// Labels are an operator's key=value notes on the instance.
	Labels map[string]string `json:"labels,omitempty"`
	// Incoming makes the instance await an incoming migration
	// (docs/migration.md, "vfio-user"): a migration that brings the same
	// UUID and profile fills it instead of creating one. A VMM that keeps
	// the device attached across its own migration (vfio-user-pci)
	// connects to it before the state arrives.
	Incoming bool `json:"incoming,omitempty"`
}

// Create places and starts a new instance.
func (m *Manager) Create(req CreateRequest) (_ *Instance, err error) {
	defer m.changedUnless(&err)
	p, ok := m.profiles[req.Profile]
	if !ok {
		return nil, fmt.Errorf("create: %w %q (have %s)", ErrUnknownProfile, req.Profile, strings.Join(m.profileNames(), ", "))
	}
	if d := req.Device; d != nil && (*d < 0 || *d >= len(m.infos)) {
		// Said before a UUID is made up: no instance is named that was never created.
		return nil, fmt.Errorf("create: %w %d (this vgpud has %d)", ErrNoDevice, *d, len(m.infos))
	}
	id := req.UUID
	if id == "" {
		id = uuid.NewString()
	} else {
		u, err := uuid.Parse(id)
		if err != nil {
			return nil, fmt.Errorf("create: uuid %q: %w", id, err)
		}
		id = u.String()
	}

	if err := validName(req.Name); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	if err := validLabels(req.Labels); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("create: %w", ErrManagerClosed)
	}
	if _, ok := m.instances[id]; ok {
		return nil, fmt.Errorf("create %s: %w", id, ErrExists)
	}
	if req.Name != "" {
		for _, in := range m.instances {
			if in.name == req.Name {
				return nil, fmt.Errorf("create: name %q: %w (instance %s has it)", req.Name, ErrExists, in.uuid)
			}
		}
	}
	dev, err := m.placeLocked(p, req.Device, req.Hint)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	setting := ReuseSetting{Domain: req.ReuseDomain, Off: req.NoReuse || !m.reuseOn}
	if req.ReuseDomain != "" {
		if !m.reuseOn {
			return nil, fmt.Errorf("create %s: %w", id, ErrReuseOff)
		}
		if err := reuse.ValidDomainName(req.ReuseDomain); err != nil {
			return nil, fmt.Errorf("create %s: %w", id, err)
		}
	}
	log := m.log.With("instance", id, "profile", p.Name)
	sc := m.pool.Sched(dev)
	inst := &Instance{uuid: id, profile: p, device: dev, sched: sc, pool: m.pool, created: time.Now(), log: log, reuse: setting,
		limits: limitsOf(p), windowLen: m.featureWindow, name: req.Name, labels: maps.Clone(req.Labels)}
	inst.memTotal.Store(m.infos[dev].GlobalMemBytes)
	inst.peakSince.Store(inst.created.UnixNano())
	if req.Incoming {
		inst.incoming.Store(incomingAwaiting)
	}
	if err := sc.SetShare(id, min(p.Share, sched.MaxShare)); err != nil {
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	inst.be, err = m.pool.Create(worker.InstanceConfig{
		ID: id, Device: dev, Domain: trustDomain(id, setting), Shared: setting.Domain != "", Reuse: !setting.Off,
		Limits: inst.limits, Notify: inst.notify,
	})
	if err != nil {
		sc.Remove(id)
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	inst.regs = mmio.New(inst.be)
	inst.cfg = mmio.NewConfigSpace()
	inst.intx.Store(inst.regs.INTx())
	if h, ok := m.adopt[id]; ok {
		delete(m.adopt, id)
		if err := m.adoptLocked(inst, h); err != nil {
			inst.close()
			return nil, fmt.Errorf("create %s: adopt: %w", id, err)
		}
	} else if m.socketDir != "" {
		if err := m.listenLocked(inst); err != nil {
			inst.close()
			return nil, fmt.Errorf("create %s: %w", id, err)
		}
	}
	// The window's first sample is the instance's counters as it starts
	// (an adopted one's go on from the old process's), so that a young
	// instance's features span its life, not only the time since the
	// sampler's last tick.
	inst.window.add(inst.Counters())
	m.instances[id] = inst
	m.rebalanceReuseLocked()
	log.Info("instance created", "device", dev, "socket", inst.socket, "domain", inst.be.Domain(), "name", req.Name)
	return inst, nil
}

func (m *Manager) profileNames() []string {
	var names []string
	for _, p := range sortedProfiles(m.profiles) {
		names = append(names, p.Name)
	}
	return names
}

// placeLocked picks a device for an instance of p: the requested one if
// it has room, else the one the placement policy scores best among those
// with room (placement.go).
func (m *Manager) placeLocked(p Profile, want *int, h PlaceHint) (int, error) {
	if want != nil && (*want < 0 || *want >= len(m.infos)) {
		return 0, fmt.Errorf("%w %d (have %d)", ErrNoDevice, *want, len(m.infos))
	}
	ex, err := m.explainLocked(p, want, h)
	if err != nil {
		return 0, err
	}
	if ex.Chosen < 0 {
		if want != nil {
			return 0, fmt.Errorf("device %d holds %d instances (%s at most %d): %w", *want, ex.Candidates[*want].Instances,
				p.Name, p.MaxPerDevice, ErrNoCapacity)
		}
		return 0, ErrNoCapacity
	}
	if want == nil {
		m.place.placer.Placed(ex.Chosen)
		m.log.Info("placed", "profile", p.Name, "policy", ex.Policy, "device", ex.Chosen, "score", ex.Score, "newcomer", ex.From)
	}
	return ex.Chosen, nil
}

// shareWithGroup makes path mode, of group gid if gid > 0; otherwise
// mode without the group's bits, of the owner alone.
func shareWithGroup(path string, mode os.FileMode, gid int) error {
	if gid <= 0 {
		mode &^= 0o070
	} else if err := os.Chown(path, -1, gid); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// listenLocked opens the instance's socket and starts its accept loop.
func (m *Manager) listenLocked(inst *Instance) error {
	path := filepath.Join(m.socketDir, inst.uuid+m.transport.Suffix())
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return err
	}
	if err := shareWithGroup(path, 0o660, m.socketGroup); err != nil {
		l.Close()
		return err
	}
	inst.listener, inst.socket = l, path
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.acceptLoop(inst, l)
	}()
	return m.listenAgentLocked(inst)
}

// listenAgentLocked opens the instance's guest agent channel at
// <SocketDir>/<uuid>.agent.sock (docs/agent-channel.md).
func (m *Manager) listenAgentLocked(inst *Instance) error {
	a, err := agentchan.Listen(m.agentConfig(inst))
	if err != nil {
		return err
	}
	inst.agent.Store(a)
	m.serveAgent(inst, a)
	return nil
}

// agentConfig is the configuration of inst's agent channel.
func (m *Manager) agentConfig(inst *Instance) agentchan.Config {
	return agentchan.Config{
		Path:  filepath.Join(m.socketDir, inst.uuid+".agent.sock"),
		Group: m.socketGroup,
		Ident: inst.uuid,
		Done:  inst.be.Done,
		NewHinter: func(pid int) (agentchan.Hinter, error) {
			return agentchan.NewProcHinter(pid, "")
		},
		Logger:        inst.log,
		OnAcceptRetry: func() { m.acceptRetries.Add(1) },
		Peer:          inst.VMPID,
	}
}

// serveAgent runs inst's agent channel server.
func (m *Manager) serveAgent(inst *Instance, a *agentchan.Server) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := a.Serve(m.ctx); err != nil && !errors.Is(err, agentchan.ErrServerClosed) {
			inst.log.Error("agent channel", "err", err)
		}
	}()
}

// vmPID returns the PID of the VM process that made c, an instance
// socket's connection, where the transport's VMs dial it themselves
// (vfio-user); 0 where another process dials and passes the socket on
// (mpqemu), or the credentials cannot be read.
func (m *Manager) vmPID(inst *Instance, c *net.UnixConn) int {
	if v, ok := m.transport.(interface{ ConnectedByVM() bool }); !ok || !v.ConnectedByVM() {
		return 0
	}
	pid, err := accept.PeerPID(c)
	if err != nil {
		inst.log.Warn("vm connection: peer credentials", "err", err)
	}
	return pid
}

// MaxInstanceConns bounds the connections an instance socket holds at
// once: the attached VM's and a few waiting their turn (Attach refuses
// them after attachGrace); more are closed as soon as they are accepted.
const MaxInstanceConns = 4

func (m *Manager) acceptLoop(inst *Instance, l *net.UnixListener) {
	limit := &accept.Limit{Max: MaxInstanceConns, Name: "instance", Logger: inst.log, OnRefuse: m.RefuseConn}
	for {
		c, err := accept.Retry(m.ctx, l.AcceptUnix, func(err error, delay time.Duration) {
			m.acceptRetries.Add(1)
			inst.log.Warn("accept failed, retrying", "err", err, "in", delay)
		})
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && m.waitResume() {
				l.SetDeadline(time.Time{})
				continue // paused for a handover, which was abandoned
			}
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) {
				inst.log.Error("accept", "err", err)
			}
			return
		}
		if !limit.Acquire() {
			c.Close()
			continue
		}
		pid := m.vmPID(inst, c)
		m.wg.Add(1)
		kept := m.keeper.Keep(c)
		go func() {
			defer m.wg.Done()
			defer limit.Release()
			defer m.keeper.Drop(kept) // the session has closed its connection
			if err := inst.attach(m.ctx, m.transport.NewSession(c, inst.Endpoint()), pid); err != nil && !errors.Is(err, context.Canceled) {
				inst.log.Warn("vm connection ended", "err", err)
			}
		}()
	}
}

// Get returns the instance with the given UUID.
func (m *Manager) Get(id string) (*Instance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	inst, ok := m.instances[id]
	if !ok {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	return inst, nil
}

// List returns all instances ordered by creation.
func (m *Manager) List() []*Instance {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.listLocked()
}

func (m *Manager) listLocked() []*Instance {
	out := make([]*Instance, 0, len(m.instances))
	for _, in := range m.instances {
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b *Instance) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.uuid, b.uuid)
	})
	return out
}

// changedUnless calls Config.OnChange unless *err is set. Deferred first
// in a method, it runs after the method's deferred unlocks.
func (m *Manager) changedUnless(err *error) {
	if *err == nil && m.onChange != nil {
		m.onChange()
	}
}

// Destroy detaches and frees an instance.
func (m *Manager) Destroy(id string) (err error) {
	defer m.changedUnless(&err)
	m.mu.Lock()
	inst, ok := m.instances[id]
	delete(m.instances, id)
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("destroy %s: %w", id, ErrNotFound)
	}
	defer func() {
		m.mu.Lock()
		m.rebalanceReuseLocked()
		m.mu.Unlock()
	}()
	if err := inst.close(); err != nil {
		return fmt.Errorf("destroy %s: %w", id, err)
	}
	inst.log.Info("instance destroyed")
	return nil
}

// Close destroys every instance and waits for all connections to end.
// After HandOver it does nothing: what it would close and unlink is the
// new process's.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.handedOver {
		m.mu.Unlock()
		return ErrHandedOver
	}
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	insts := m.instances
	m.instances = map[string]*Instance{}
	m.mu.Unlock()
	m.cancel()
	var errs []error
	for _, in := range insts {
		errs = append(errs, in.close())
	}
	m.wg.Wait()
	errs = append(errs, m.pool.Close())
	return errors.Join(errs...)
}

// trustDomain is the name of an instance's trust domain under setting:
// the operator-named reuse domain, else the instance's private one (also
// with reuse off: an instance alone is its own domain).
func trustDomain(id string, setting ReuseSetting) string {
	if setting.Domain != "" {
		return setting.Domain
	}
	return reuse.PrivatePrefix + id
}

// limitsOf is what an instance of profile p may use.
func limitsOf(p Profile) worker.Limits {
	return worker.Limits{Profile: p.Name, MemBytes: p.MemBytes, ProgramBytes: p.ProgramBytes,
		KernelTimeout: p.kernelTimeout(), Slice: p.slice(), BuildTimeout: p.BuildTimeout.D(), Contexts: p.Contexts}
}

// AcceptRetries counts the transient accept errors (out of descriptors,
// memory) the instances' sockets survived.
func (m *Manager) AcceptRetries() uint64 { return m.acceptRetries.Load() }

// RefuseConn counts one connection refused over a listener's limit
// (accept.Limit.OnRefuse of vgpud's listeners).
func (m *Manager) RefuseConn() { m.connsRefused.Add(1) }

// ConnsRefused counts the connections refused over a listener's limit.
func (m *Manager) ConnsRefused() uint64 { return m.connsRefused.Load() }

// Pool returns the manager's worker pool (for counters).
func (m *Manager) Pool() *worker.Pool { return m.pool }
