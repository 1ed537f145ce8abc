package metrics

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/interference"
	"github.com/vgpud/vgpud/internal/buildinfo"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/sched"
	"github.com/vgpud/vgpud/worker"
)

const ns = "vgpud"

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, labels, nil)
}

var instLabels = []string{"instance", "profile", "device"}

var (
	devInfo      = desc("device_info", "Physical device (value 1).", "device", "name", "platform")
	devPolicy    = desc("device_policy", "Scheduling policy of the device (value 1 for the active one).", "device", "policy")
	devBusy      = desc("device_busy_seconds_total", "Wall time the device was held by some instance's turn.", "device")
	devTurns     = desc("device_turns_total", "Device turns granted by the scheduler.", "device")
	devInstances = desc("device_instances", "Instances placed on the device.", "device")
	devMemCap    = desc("device_memory_capacity_bytes", "Device memory all instances on the device may hold together (docs/overcommit.md).", "device")
	devMemUsed   = desc("device_memory_held_bytes", "Device memory the instances on the device hold, by the ledger.", "device")
	devShortage  = desc("device_memory_shortages_total", "Allocations the device could not hold, by what the overcommit policy did (refused, waited, wait_timeout, relocated).", "device", "decision")

	instMoves     = desc("instance_overcommit_moves_total", "Moves of the instance for want of device memory, by kind (migration, suspension, failed).", append(instLabels, "kind")...)
	instSuspended = desc("instance_suspended", "1 while the instance's device state is out in host memory (overcommit policy suspend).", instLabels...)

	instCommands  = desc("instance_commands_total", "Commands completed.", instLabels...)
	instErrors    = desc("instance_errors_total", "Commands completed with an error, by status code.", append(instLabels, "status")...)
	instBytes     = desc("instance_copied_bytes_total", "Bytes copied between guest RAM and device memory.", append(instLabels, "direction")...)
	instLaunches  = desc("instance_launches_total", "Kernel launches executed on the device.", instLabels...)
	instKernel    = desc("instance_kernel_seconds_total", "Kernel time measured by OpenCL profiling.", instLabels...)
	instDevice    = desc("instance_device_seconds_total", "Device time charged by the scheduler (kernels by profiling, copies by wall time).", instLabels...)
	instWait      = desc("instance_queue_wait_seconds_total", "Time spent waiting for device turns.", instLabels...)
	instTurns     = desc("instance_turns_total", "Device turns granted.", instLabels...)
	instSlices    = desc("instance_launch_slices_total", "Launch slices cut by the scheduler.", instLabels...)
	instTaken     = desc("instance_turns_taken_total", "Device turns taken from a free turn parked at the instance, without a request (of instance_turns_total).", instLabels...)
	instShare     = desc("instance_share", "Weight under the fixed-share policy.", instLabels...)
	instDoorbells = desc("instance_doorbells_total", "Doorbell writes by the guest.", instLabels...)
	instKicks     = desc("instance_kicks_total", "Signals of the kick ioeventfd (vfio-user), by who read them: the instance's worker (direct) or vgpud's main process while no worker could (relayed).", append(instLabels, "route")...)
	instMemUsed   = desc("instance_memory_used_bytes", "Device memory held by the instance.", instLabels...)
	instMemQuota  = desc("instance_memory_quota_bytes", "Device memory quota of the instance.", instLabels...)
	instAttached  = desc("instance_attached", "1 while a VM is attached.", instLabels...)
	instLost      = desc("instance_device_lost", "1 while the instance's device context is lost (its worker ended; a guest reset brings it back).", instLabels...)
	instProgBytes = desc("instance_program_bytes", "Bytes of programs (source, options, binaries) the instance holds.", instLabels...)
	instFeature   = desc("instance_placement_feature", "The instance's placement features over the feature window (docs/placement.md \"Features\"), by feature.", append(instLabels, "feature")...)
	placePolicy   = desc("placement_policy", "Placement policy of new instances (value 1 for the active one).", "policy")

	workers       = desc("workers", "Worker processes running (one per trust domain and device).")
	acceptRetries = desc("accept_retries_total", "Transient accept errors (out of file descriptors or memory) on instance and agent sockets, each retried with a backoff.")
	connsRefused  = desc("connections_refused_total", "Connections closed as soon as accepted because their listener (control, metrics, migration, an instance socket) held its limit of connections.")
	workerExits   = desc("worker_exits_total", "Worker processes that ended other than by being stopped, by cause (watchdog, build-timeout, signal, exit, protocol, start, context-lost, executor).", "cause")

	instReuse        = desc("instance_reuse_launches_total", "Launches by result-reuse outcome (hit, miss, skipped, recorded).", append(instLabels, "outcome")...)
	instReuseBytes   = desc("instance_reuse_saved_bytes_total", "Bytes of results served from the shadow-result table.", instLabels...)
	instReuseDevice  = desc("instance_reuse_saved_device_seconds_total", "Device time the hits did not spend (the recorded launches' time).", instLabels...)
	instReuseEvicted = desc("instance_reuse_evictions_total", "Recorded results evicted by the byte budget.", instLabels...)

	domLabels     = []string{"domain", "shared"}
	domReuse      = desc("reuse_domain_launches_total", "Launches by result-reuse outcome, per reuse domain.", append(domLabels, "outcome")...)
	domEntries    = desc("reuse_domain_entries", "Recorded results held by the domain.", domLabels...)
	domBytes      = desc("reuse_domain_bytes", "Bytes of recorded results held by the domain.", domLabels...)
	domBudget     = desc("reuse_domain_budget_bytes", "Byte budget of the domain.", domLabels...)
	domUsers      = desc("reuse_domain_instances", "Instances using the domain.", domLabels...)
	domEvicted    = desc("reuse_domain_evictions_total", "Recorded results evicted by the domain's byte budget.", domLabels...)
	domSavedBytes = desc("reuse_domain_saved_bytes_total", "Bytes of results served from the domain.", domLabels...)
)

// Collector reads a Manager's counters at each scrape.
type Collector struct {
	m *mdev.Manager
}

// NewCollector returns a collector over m.
func NewCollector(m *mdev.Manager) *Collector { return &Collector{m: m} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{devInfo, devPolicy, devBusy, devTurns, devInstances, devMemCap, devMemUsed, devShortage, instMoves, instSuspended,
		instCommands, instErrors, instBytes, instLaunches, instKernel, instDevice, instWait, instTurns,
		instSlices, instTaken, instShare, instDoorbells, instKicks, instMemUsed, instMemQuota, instAttached, instLost, instProgBytes, instFeature, placePolicy, workers, workerExits, acceptRetries, connsRefused,
		instReuse, instReuseBytes, instReuseDevice, instReuseEvicted,
		domReuse, domEntries, domBytes, domBudget, domUsers, domEvicted, domSavedBytes} {
		ch <- d
	}
}

func seconds(ns uint64) float64 { return float64(ns) / 1e9 }

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	pool := c.m.Pool()
	ch <- prometheus.MustNewConstMetric(workers, prometheus.GaugeValue, float64(pool.Workers()))
	ch <- prometheus.MustNewConstMetric(acceptRetries, prometheus.CounterValue, float64(c.m.AcceptRetries()))
	ch <- prometheus.MustNewConstMetric(connsRefused, prometheus.CounterValue, float64(c.m.ConnsRefused()))
	for _, cause := range worker.Causes {
		ch <- prometheus.MustNewConstMetric(workerExits, prometheus.CounterValue, float64(pool.Exits()[cause]), cause)
	}
	cur := c.m.Placement().Policy
	for _, p := range mdev.PlacementPolicies {
		v := 0.0
		if p == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(placePolicy, prometheus.GaugeValue, v, string(p))
	}
	for _, d := range c.m.Devices() {
		dev := strconv.Itoa(d.Index)
		ch <- prometheus.MustNewConstMetric(devInfo, prometheus.GaugeValue, 1, dev, d.Name, d.Platform)
		ch <- prometheus.MustNewConstMetric(devInstances, prometheus.GaugeValue, float64(d.Instances), dev)
		ms := pool.MemoryStats(d.Index)
		ch <- prometheus.MustNewConstMetric(devMemCap, prometheus.GaugeValue, float64(ms.Capacity), dev)
		ch <- prometheus.MustNewConstMetric(devMemUsed, prometheus.GaugeValue, float64(ms.Used), dev)
		for _, o := range []struct {
			name string
			v    uint64
		}{{"refused", ms.Refused}, {"waited", ms.Waited}, {"wait_timeout", ms.WaitTimeouts}, {"relocated", ms.Relocated}} {
			ch <- prometheus.MustNewConstMetric(devShortage, prometheus.CounterValue, float64(o.v), dev, o.name)
		}
		s, err := c.m.Sched(d.Index)
		if err != nil {
			continue
		}
		for _, p := range sched.Policies {
			v := 0.0
			if p == s.Policy {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(devPolicy, prometheus.GaugeValue, v, dev, string(p))
		}
		ch <- prometheus.MustNewConstMetric(devBusy, prometheus.CounterValue, seconds(s.HeldNanos), dev)
		ch <- prometheus.MustNewConstMetric(devTurns, prometheus.CounterValue, float64(s.Turns), dev)
	}
	for _, in := range c.m.List() {
		st := in.Stats()
		sc := in.Sched()
		lv := []string{in.UUID(), in.Profile().Name, strconv.Itoa(in.Device())}
		counter := func(d *prometheus.Desc, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append(lv[:3:3], extra...)...)
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
		}
		counter(instCommands, float64(st.Commands.Load()))
		for s := abi.Status(1); int(s) < abi.NumStatus; s++ {
			if n := st.ByStatus(s); n > 0 {
				counter(instErrors, float64(n), s.String())
			}
		}
		counter(instBytes, float64(st.BytesToDev.Load()), "to_device")
		counter(instBytes, float64(st.BytesFromDev.Load()), "from_device")
		counter(instLaunches, float64(st.Launches.Load()))
		counter(instKernel, seconds(st.KernelNanos.Load()))
		counter(instDevice, seconds(sc.DeviceNanos))
		counter(instWait, seconds(sc.WaitNanos))
		counter(instTurns, float64(sc.Turns))
		counter(instSlices, float64(sc.Slices))
		counter(instTaken, float64(sc.Taken))
		counter(instDoorbells, float64(st.Doorbells.Load()))
		kicks := in.Kicks()
		counter(instKicks, float64(kicks.Direct), "direct")
		counter(instKicks, float64(kicks.Relayed), "relayed")
		gauge(instShare, float64(sc.Share))
		gauge(instMemUsed, float64(in.MemUsed()))
		gauge(instProgBytes, float64(in.ProgramBytes()))
		lost := 0.0
		if in.Lost() {
			lost = 1
		}
		gauge(instLost, lost)
		gauge(instMemQuota, float64(in.MemQuota()))
		oc := in.Overcommit()
		counter(instMoves, float64(oc.Migrations), "migration")
		counter(instMoves, float64(oc.Suspensions), "suspension")
		counter(instMoves, float64(oc.Failed), "failed")
		susp := 0.0
		if oc.Suspended {
			susp = 1
		}
		gauge(instSuspended, susp)
		f := in.Features()
		for k := range interference.NumFeatures {
			ch <- prometheus.MustNewConstMetric(instFeature, prometheus.GaugeValue, f.Get(k), append(lv[:3:3], k.String())...)
		}
		att := 0.0
		if in.Attached() {
			att = 1
		}
		gauge(instAttached, att)
		r := in.ReuseStats()
		counter(instReuse, float64(r.Hits), "hit")
		counter(instReuse, float64(r.Misses), "miss")
		counter(instReuse, float64(r.Skipped), "skipped")
		counter(instReuse, float64(r.Recorded), "recorded")
		counter(instReuseBytes, float64(r.BytesSaved))
		counter(instReuseDevice, seconds(r.DeviceNanos))
		counter(instReuseEvicted, float64(r.Evictions))
	}
	for _, d := range c.m.ReuseDomains() {
		lv := []string{d.Name, strconv.FormatBool(d.Shared)}
		for _, o := range []struct {
			name string
			v    uint64
		}{{"hit", d.Hits}, {"miss", d.Misses}, {"skipped", d.Skipped}, {"recorded", d.Recorded}} {
			ch <- prometheus.MustNewConstMetric(domReuse, prometheus.CounterValue, float64(o.v), append(lv[:2:2], o.name)...)
		}
		ch <- prometheus.MustNewConstMetric(domEntries, prometheus.GaugeValue, float64(d.Entries), lv...)
		ch <- prometheus.MustNewConstMetric(domBytes, prometheus.GaugeValue, float64(d.Bytes), lv...)
		ch <- prometheus.MustNewConstMetric(domBudget, prometheus.GaugeValue, float64(d.Budget), lv...)
		ch <- prometheus.MustNewConstMetric(domUsers, prometheus.GaugeValue, float64(d.Users), lv...)
		ch <- prometheus.MustNewConstMetric(domEvicted, prometheus.CounterValue, float64(d.Evictions), lv...)
		ch <- prometheus.MustNewConstMetric(domSavedBytes, prometheus.CounterValue, float64(d.BytesSaved), lv...)
	}
}

// Registry returns a registry holding a Collector over m, the Go runtime
// (go_*) and process (process_*) collectors, Go's go_build_info and
// vgpud_build_info: which build serves (buildinfo).
func Registry(m *mdev.Manager) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(NewCollector(m),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
		buildInfoGauge(buildinfo.Get("vgpud")))
	return r
}

// buildInfoGauge is vgpud_build_info: 1, labelled with the build.
func buildInfoGauge(in buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "build_info",
		Help: "The running vgpud's build (value 1): module version, VCS revision, Go version.",
		ConstLabels: prometheus.Labels{"version": in.Version, "revision": in.Revision,
			"modified": strconv.FormatBool(in.Modified), "goversion": in.GoVersion}})
	g.Set(1)
	return g
}

// Handler serves /metrics for m.
func Handler(m *mdev.Manager) http.Handler {
	return promhttp.HandlerFor(Registry(m), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
