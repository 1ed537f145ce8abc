package mdev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev/agentchan"
	"github.com/vgpud/vgpud/mdev/guestmem"
	"github.com/vgpud/vgpud/mmio"
	"github.com/vgpud/vgpud/reuse"
)

// Errors callers tell apart.
var (
	ErrNotFound       = errors.New("no such instance")
	ErrExists         = errors.New("instance exists")
	ErrUnknownProfile = errors.New("unknown profile")
	ErrNoCapacity     = errors.New("no device has room for the instance")
	ErrManagerClosed  = errors.New("manager closed")
)

// Config configures a Manager.
type Config struct {
	// Devices are the physical devices instances are placed on. The
	// manager does not close them.
	Devices []gpu.Device
	// Profiles are the vGPU types; nil means DefaultProfiles().
	Profiles []Profile
	// SocketDir, if set, is where each instance listens for QEMU at
	// <SocketDir>/<uuid>.sock.
	SocketDir string
	Logger    *slog.Logger
	// Reuse configures result reuse (docs/reuse.md); the zero value turns
	// it on with a private domain per instance.
	Reuse ReuseConfig
}

// Manager owns the physical devices' schedulers and all instances.
type Manager struct {
	devs      []*aggregator.Device
	profiles  map[string]Profile
	socketDir string
	log       *slog.Logger
	// reuse is nil when result reuse is off (Config.Reuse.Off).
	reuse       *reuse.Engine
	reuseBudget int64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loops and connections

	mu sync.Mutex
	// Guarded by mu.
	instances   map[string]*Instance
	closed      bool
	reusePinned map[string]int64 // domain budgets set by the operator
}

// NewManager validates cfg and returns a Manager with no instances.
func NewManager(cfg Config) (*Manager, error) {
	if len(cfg.Devices) == 0 {
		return nil, errors.New("new manager: no physical device")
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
		socketDir: cfg.SocketDir,
		log:       log,
		instances: make(map[string]*Instance),
	}
	if !cfg.Reuse.Off {
		m.reuseBudget = cfg.Reuse.Budget
		if m.reuseBudget <= 0 {
			m.reuseBudget = DefaultReuseBudget
		}
		m.reuse = reuse.New(reuse.Config{Budget: m.reuseBudget})
		m.reusePinned = make(map[string]int64)
	}
	for _, p := range profiles {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("new manager: %w", err)
		}
		if _, dup := m.profiles[p.Name]; dup {
			return nil, fmt.Errorf("new manager: profile %s defined twice", p.Name)
		}
		m.profiles[p.Name] = p
	}
	if m.socketDir != "" {
		if err := os.MkdirAll(m.socketDir, 0o700); err != nil {
			return nil, fmt.Errorf("new manager: %w", err)
		}
	}
	for _, d := range cfg.Devices {
		m.devs = append(m.devs, aggregator.NewDevice(d, log))
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// DeviceStatus describes a physical device and its load.
type DeviceStatus struct {
	gpu.Info
	Instances int `json:"instances"`
}

// Devices describes the physical devices.
func (m *Manager) Devices() []DeviceStatus {
	out := make([]DeviceStatus, len(m.devs))
	for i, d := range m.devs {
		out[i] = DeviceStatus{Info: d.Info(), Instances: d.Instances()}
		out[i].Index = i
	}
	return out
}

// Profiles lists the vGPU types by name.
func (m *Manager) Profiles() []Profile { return sortedProfiles(m.profiles) }

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
}

// Create places and starts a new instance.
func (m *Manager) Create(req CreateRequest) (*Instance, error) {
	p, ok := m.profiles[req.Profile]
	if !ok {
		return nil, fmt.Errorf("create: %w %q (have %s)", ErrUnknownProfile, req.Profile, strings.Join(m.profileNames(), ", "))
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

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("create: %w", ErrManagerClosed)
	}
	if _, ok := m.instances[id]; ok {
		return nil, fmt.Errorf("create %s: %w", id, ErrExists)
	}
	dev, err := m.placeLocked(p, req.Device)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	log := m.log.With("instance", id, "profile", p.Name)
	inst := &Instance{uuid: id, profile: p, device: dev, created: time.Now(), log: log, mem: &guestmem.Map{}}
	inst.agg, err = m.devs[dev].NewInstance(aggregator.InstanceConfig{
		ID: id, Profile: p.Name, MemBytes: p.MemBytes, Memory: inst.mem, Logger: log,
		Notify: inst.notify,
	})
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	if err := m.devs[dev].SetShare(id, min(p.Share, aggregator.MaxShare)); err != nil {
		inst.agg.Close()
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	if m.reuse != nil || req.ReuseDomain != "" {
		if err := m.applyReuseLocked(inst, ReuseSetting{Domain: req.ReuseDomain, Off: req.NoReuse}); err != nil {
			m.dropReuseLocked(inst)
			inst.agg.Close()
			return nil, fmt.Errorf("create %s: %w", id, err)
		}
	}
	inst.regs = mmio.New(backend{inst.agg})
	inst.cfg = mmio.NewConfigSpace()
	if m.socketDir != "" {
		if err := m.listenLocked(inst); err != nil {
			m.dropReuseLocked(inst)
			inst.close()
			return nil, fmt.Errorf("create %s: %w", id, err)
		}
	}
	m.instances[id] = inst
	log.Info("instance created", "device", dev, "socket", inst.socket)
	return inst, nil
}

func (m *Manager) profileNames() []string {
	var names []string
	for _, p := range m.Profiles() {
		names = append(names, p.Name)
	}
	return names
}

// placeLocked picks a device: the requested one if it has room, else the
// one with the fewest instances among those with room for p.
func (m *Manager) placeLocked(p Profile, want *int) (int, error) {
	count := func(dev int) (all, same int) {
		for _, in := range m.instances {
			if in.device == dev {
				all++
				if in.profile.Name == p.Name {
					same++
				}
			}
		}
		return all, same
	}
	if want != nil {
		if *want < 0 || *want >= len(m.devs) {
			return 0, fmt.Errorf("device %d: have %d devices", *want, len(m.devs))
		}
		if _, same := count(*want); same >= p.MaxPerDevice {
			return 0, fmt.Errorf("device %d holds %d %s instances: %w", *want, same, p.Name, ErrNoCapacity)
		}
		return *want, nil
	}
	best, bestAll := -1, 0
	for dev := range m.devs {
		all, same := count(dev)
		if same < p.MaxPerDevice && (best < 0 || all < bestAll) {
			best, bestAll = dev, all
		}
	}
	if best < 0 {
		return 0, ErrNoCapacity
	}
	return best, nil
}

// listenLocked opens the instance's socket and starts its accept loop.
func (m *Manager) listenLocked(inst *Instance) error {
	path := filepath.Join(m.socketDir, inst.uuid+".sock")
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return err
	}
	if err := os.Chmod(path, 0o600); err != nil {
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
	agg := inst.agg
	a, err := agentchan.Listen(agentchan.Config{
		Path:  filepath.Join(m.socketDir, inst.uuid+".agent.sock"),
		Ident: inst.uuid,
		Done:  agg.Done,
		NewHinter: func(pid int) (agentchan.Hinter, error) {
			return agentchan.NewProcHinter(pid, "")
		},
		Logger: inst.log,
	})
	if err != nil {
		return err
	}
	inst.agent.Store(a)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := a.Serve(m.ctx); err != nil && !errors.Is(err, agentchan.ErrServerClosed) {
			inst.log.Error("agent channel", "err", err)
		}
	}()
	return nil
}

func (m *Manager) acceptLoop(inst *Instance, l *net.UnixListener) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				inst.log.Error("accept", "err", err)
			}
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			if err := inst.ServeQEMU(m.ctx, c); err != nil && !errors.Is(err, context.Canceled) {
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
	out := make([]*Instance, 0, len(m.instances))
	for _, in := range m.instances {
		out = append(out, in)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b *Instance) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.uuid, b.uuid)
	})
	return out
}

// Destroy detaches and frees an instance.
func (m *Manager) Destroy(id string) error {
	m.mu.Lock()
	inst, ok := m.instances[id]
	delete(m.instances, id)
	if ok {
		m.dropReuseLocked(inst)
	}
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("destroy %s: %w", id, ErrNotFound)
	}
	if err := inst.close(); err != nil {
		return fmt.Errorf("destroy %s: %w", id, err)
	}
	inst.log.Info("instance destroyed")
	return nil
}

// Close destroys every instance and waits for all connections to end.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	insts := m.instances
	m.instances = map[string]*Instance{}
	for _, in := range insts {
		m.dropReuseLocked(in)
	}
	m.mu.Unlock()
	m.cancel()
	var errs []error
	for _, in := range insts {
		errs = append(errs, in.close())
	}
	m.wg.Wait()
	for _, d := range m.devs {
		errs = append(errs, d.Close())
	}
	return errors.Join(errs...)
}
