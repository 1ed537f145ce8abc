package reuse

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Errors callers tell apart.
var (
	ErrBadDomain = errors.New("invalid reuse domain name")
)

// DefaultBudget is a domain's byte budget when Config.Budget is 0.
const DefaultBudget = 256 << 20

// maxEntries bounds the table's entry count independently of bytes, so
// that many tiny results cannot grow the index without bound.
const maxEntries = 1 << 16

// maxSeen bounds the keys a domain remembers having missed once (32 bytes
// each plus the index: about 6 MiB at most), and likewise the keys whose
// entries were abandoned.
const maxSeen = 1 << 16

// retryAbandoned: a key whose entry was abandoned is recorded again only
// on every retryAbandoned-th attempt, so that a workload whose access
// pattern changes (a result that is downloaded after all) is relearnt.
const retryAbandoned = 64

// Config configures an Engine.
type Config struct {
	// Budget is each domain's default byte budget for shadow results.
	Budget int64
}

// Engine holds the reuse domains of one vgpud.
type Engine struct {
	budget int64

	mu      sync.Mutex
	domains map[string]*Domain // guarded by mu
}

// New returns an Engine with no domains.
func New(cfg Config) *Engine {
	if cfg.Budget <= 0 {
		cfg.Budget = DefaultBudget
	}
	return &Engine{budget: cfg.Budget, domains: make(map[string]*Domain)}
}

// Budget is the default per-domain budget.
func (e *Engine) Budget() int64 { return e.budget }

// PrivatePrefix starts the names of the domains the engine makes for a
// single instance; operators cannot name a domain so.
const PrivatePrefix = "instance:"

// ValidDomainName checks a name an operator gives.
func ValidDomainName(name string) error {
	if name == "" || len(name) > 64 || strings.ContainsFunc(name, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return fmt.Errorf("%w %q: want 1-64 of [A-Za-z0-9._-]", ErrBadDomain, name)
	}
	return nil
}

// Private returns the private domain of instance id (created on first use).
func (e *Engine) Private(id string) *Domain {
	return e.domain(PrivatePrefix+id, false)
}

// Shared returns the operator-named domain name (created on first use).
func (e *Engine) Shared(name string) (*Domain, error) {
	if err := ValidDomainName(name); err != nil {
		return nil, err
	}
	return e.domain(name, true), nil
}

// Drop removes a domain from the engine (its entries are freed once no
// instance uses it); private domains are dropped when their instance goes.
func (e *Engine) Drop(d *Domain) {
	e.mu.Lock()
	if e.domains[d.name] == d {
		delete(e.domains, d.name)
	}
	e.mu.Unlock()
	d.Purge()
}

func (e *Engine) domain(name string, shared bool) *Domain {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d, ok := e.domains[name]; ok {
		return d
	}
	d := newDomain(name, shared, e.budget)
	e.domains[name] = d
	return d
}

// Domains returns the domains ordered by name.
func (e *Engine) Domains() []*Domain {
	e.mu.Lock()
	out := make([]*Domain, 0, len(e.domains))
	for _, d := range e.domains {
		out = append(out, d)
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// Lookup returns the named domain, if it exists.
func (e *Engine) Lookup(name string) (*Domain, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	d, ok := e.domains[name]
	return d, ok
}

// Stats are counters of a domain or an instance, safe to read at any time.
type Stats struct {
	Hits        atomic.Uint64
	Misses      atomic.Uint64 // probes of reusable launches that found nothing usable
	Skipped     atomic.Uint64 // launches not eligible (uncertain, nondeterministic, unknown input)
	Recorded    atomic.Uint64
	Evictions   atomic.Uint64
	BytesSaved  atomic.Uint64 // host-to-device bytes never copied and result bytes never computed
	DeviceNanos atomic.Uint64 // recorded device time of the launches answered from the table
}

// Snapshot is a copy of Stats.
type Snapshot struct {
	Hits        uint64 `json:"hits"`
	Misses      uint64 `json:"misses"`
	Skipped     uint64 `json:"skipped"`
	Recorded    uint64 `json:"recorded"`
	Evictions   uint64 `json:"evictions"`
	BytesSaved  uint64 `json:"bytes_saved"`
	DeviceNanos uint64 `json:"device_ns_saved"`
}

// Snapshot copies the counters.
func (s *Stats) Snapshot() Snapshot {
	return Snapshot{Hits: s.Hits.Load(), Misses: s.Misses.Load(), Skipped: s.Skipped.Load(), Recorded: s.Recorded.Load(),
		Evictions: s.Evictions.Load(), BytesSaved: s.BytesSaved.Load(), DeviceNanos: s.DeviceNanos.Load()}
}

// Output is one written buffer of a recorded launch.
type Output struct {
	Arg    int    // argument index
	Digest Digest // Domain.Output(key, Arg) until captured, then the content digest
	Size   uint64
	data   []byte // nil until captured; immutable afterwards
}

// Data returns the captured bytes (nil before capture). Callers must not
// modify them.
func (o *Output) Data() []byte { return o.data }

// Entry is a recorded launch. It serves hits once every output has been
// captured.
type Entry struct {
	Key        Key
	DeviceTime time.Duration
	Outputs    []Output
	missing    int  // guarded by the domain's mu
	live       bool // in the table; guarded by the domain's mu
	bytes      int64
}

// Domain is a reuse domain: one lookup table and shadow result memory
// with its own byte budget. Instances in one domain share results.
type Domain struct {
	name   string
	shared bool
	seed   uint64 // secret seed of the fast content digest (private domains)

	Stats Stats

	mu sync.Mutex
	// Guarded by mu.
	lru  *simplelru.LRU[Key, *Entry]
	seen *simplelru.LRU[Key, struct{}] // keys missed once and not recorded
	// abandoned holds keys whose entries were abandoned (an output was
	// overwritten before it could be captured cheaply), with the records
	// skipped since: such a launch's result is recomputed, so recording
	// it again would only pay a record and an abandon per occurrence.
	abandoned *simplelru.LRU[Key, uint32]
	bytes     int64
	budget    int64
	users     int
}

func newDomain(name string, shared bool, budget int64) *Domain {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("reuse: crypto/rand: %v", err)) // crypto/rand does not fail on Linux
	}
	d := &Domain{name: name, shared: shared, seed: binary.LittleEndian.Uint64(b[:]), budget: budget}
	d.lru, _ = simplelru.NewLRU[Key, *Entry](maxEntries, d.onEvict) // size > 0: no error
	d.seen, _ = simplelru.NewLRU[Key, struct{}](maxSeen, nil)
	d.abandoned, _ = simplelru.NewLRU[Key, uint32](maxSeen, nil)
	return d
}

// Name returns the domain's name.
func (d *Domain) Name() string { return d.name }

// Shared reports whether the domain was named by an operator (and may
// hold several instances).
func (d *Domain) Shared() bool { return d.shared }

// Content returns the content digest of a whole buffer's data. Shared
// domains use SHA-256, so that no guest can forge a collision with
// another's data; a private domain uses XXH3-128 under its secret seed,
// which keeps cryptographic hashing off the upload path where the only
// party a forged collision could mislead is the guest that forged it.
func (d *Domain) Content(data []byte) Digest {
	if d.shared {
		return SHA256(data)
	}
	return fastDigest(data, d.seed)
}

// Budget returns the byte budget.
func (d *Domain) Budget() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.budget
}

// Bytes returns the bytes of shadow results held.
func (d *Domain) Bytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.bytes
}

// Entries returns the number of recorded launches held.
func (d *Domain) Entries() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lru.Len()
}

// SetBudget changes the byte budget, evicting at once if over it.
func (d *Domain) SetBudget(n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.budget = max(n, 0)
	d.shrinkLocked(0)
}

// Attach and Detach count the instances using the domain.
func (d *Domain) Attach() {
	d.mu.Lock()
	d.users++
	d.mu.Unlock()
}

// Detach undoes Attach and reports how many users remain.
func (d *Domain) Detach() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.users--
	return d.users
}

// Users returns the number of attached instances.
func (d *Domain) Users() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.users
}

func (d *Domain) onEvict(_ Key, e *Entry) {
	e.live = false
	d.bytes -= e.bytes
}

func (d *Domain) shrinkLocked(need int64) {
	for d.bytes+need > d.budget && d.lru.Len() > 0 {
		d.lru.RemoveOldest()
		d.Stats.Evictions.Add(1)
	}
}

// Probe looks k up. It returns the entry only if all its outputs are
// captured; the caller then serves the launch from it. Probe counts the
// hit or the miss.
func (d *Domain) Probe(k Key) (*Entry, bool) {
	d.mu.Lock()
	e, ok := d.lru.Get(k)
	ok = ok && e.missing == 0
	d.mu.Unlock()
	if ok {
		d.Stats.Hits.Add(1)
		d.Stats.DeviceNanos.Add(uint64(e.DeviceTime))
		return e, true
	}
	d.Stats.Misses.Add(1)
	return nil, false
}

// Seen reports whether k was looked up with Seen before (among the last
// 65536 such keys) and remembers it. The aggregator records a launch only
// when its key (or its sample key, SampleKey) repeats: recording costs a
// read of the results and hashing the inputs costs a pass over them,
// which a workload that never repeats should not pay.
func (d *Domain) Seen(k Key) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen.Contains(k) {
		d.seen.Get(k) // refresh
		return true
	}
	d.seen.Add(k, struct{}{})
	return false
}

// Key returns the key kb describes. Shared domains use SHA-256, so that no
// guest can forge a key equal to another's launch; a private domain uses
// XXH3-128 under its secret seed (a key is formed for every candidate
// launch, so it must cost little), on the argument of Content: the only
// party a forged collision could mislead is the guest that forged it.
func (d *Domain) Key(kb *KeyBuilder) Key {
	if d.shared {
		return kb.Sum()
	}
	return Key(fastTagged(tagLaunch, kb.buf, d.seed))
}

// Output names the content a launch with key k left at argument arg
// (OutputDigest), hashed as Key hashes.
func (d *Domain) Output(k Key, arg int) Digest {
	if d.shared {
		return OutputDigest(k, arg)
	}
	return fastTagged(tagOutput, outputName(k, arg), d.seed)
}

// Sample returns a cheap fingerprint of data (see SampleDigest) under
// the domain's seed.
func (d *Domain) Sample(data []byte) Digest { return SampleDigest(data, d.seed) }

// Record adds a launch that just ran with key k and device time t, whose
// written buffers are outs (Arg, Size set; Digest is filled in). It
// replaces any entry under k. It returns nil, recording nothing, if the
// results cannot fit the budget at all, or if an entry under k was
// abandoned before (see Abandon; one attempt in retryAbandoned records
// anyway). The outputs are captured later with Capture.
func (d *Domain) Record(k Key, t time.Duration, outs []Output) *Entry {
	if d.skipAbandoned(k) {
		return nil
	}
	e := &Entry{Key: k, DeviceTime: t, Outputs: outs, missing: len(outs)}
	for i := range outs {
		outs[i].Digest = d.Output(k, outs[i].Arg)
		outs[i].data = nil
		e.bytes += int64(outs[i].Size)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.bytes > d.budget {
		return nil
	}
	// The first measurement of a key's device time stands while an entry
	// under it lives: decisions made from it (the aggregator captures an
	// expensive output at once and renames the buffer by its content)
	// must come out the same at every occurrence, or a chain's later keys
	// would depend on how fast the device happened to be.
	if old, ok := d.lru.Peek(k); ok {
		e.DeviceTime = old.DeviceTime
	}
	d.lru.Remove(k)
	d.shrinkLocked(e.bytes)
	e.live = true
	d.lru.Add(k, e)
	d.bytes += e.bytes
	d.Stats.Recorded.Add(1)
	return e
}

// skipAbandoned reports whether a Record of k is to be skipped because an
// entry under k was abandoned before (one attempt in retryAbandoned goes
// through, and forgets the abandon).
func (d *Domain) skipAbandoned(k Key) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, ok := d.abandoned.Get(k)
	if !ok {
		return false
	}
	if n+1 < retryAbandoned {
		d.abandoned.Add(k, n+1)
		return true
	}
	d.abandoned.Remove(k)
	return false
}

// Live reports whether e is still in the table.
func (d *Domain) Live(e *Entry) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return e.live
}

// Capture stores output i of e. data must be the whole buffer as the
// launch left it; the domain keeps it (the caller must not modify it).
// The output is renamed by its content digest, which the caller gives the
// buffer too: so a later launch that overwrites the buffer with the same
// result finds the same key (a digest derived from the launch key would
// carry the buffer's history along and never repeat). It returns the
// digest and whether the capture was taken.
func (d *Domain) Capture(e *Entry, i int, data []byte) (Digest, bool) {
	c := d.Content(data)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !e.live || i < 0 || i >= len(e.Outputs) || e.Outputs[i].data != nil || uint64(len(data)) != e.Outputs[i].Size {
		return Digest{}, false
	}
	e.Outputs[i].data = data
	e.Outputs[i].Digest = c
	e.missing--
	return c, true
}

// Abandon removes e: one of its outputs can no longer be captured. Its
// key is remembered, and Record skips it for a while: the same access
// pattern would abandon it again.
func (d *Domain) Abandon(e *Entry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.live {
		d.lru.Remove(e.Key)
		d.abandoned.Add(e.Key, 0)
	}
}

// Purge drops every entry.
func (d *Domain) Purge() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lru.Purge()
	d.seen.Purge()
	d.abandoned.Purge()
}
