package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/handover"
	"github.com/vgpud/vgpud/sched"
	"github.com/vgpud/vgpud/worker/child"
	"github.com/vgpud/vgpud/worker/wire"
)

// key names a worker process: a trust domain on a physical device.
type key struct {
	domain string
	device int
}

// helloTimeout bounds a worker's start: exec, runtime and OpenCL
// initialisation, opening its device.
const helloTimeout = 60 * time.Second

// stopGrace is how long a worker that was asked to stop (its socket
// closed) may take to exit before it is killed.
const stopGrace = 5 * time.Second

// logLineMax and logBurst bound what a worker's stderr may put into the
// main process's log: lines are cut, and at most logBurst lines a second
// are relayed (a worker taken over by guest code could flood it).
const (
	logLineMax = 1024
	logBurst   = 50
)

// process is one worker process as the main process sees it: an
// untrusted peer that speaks the protocol, holds device turns of the
// scheduler and may die at any moment.
type process struct {
	pool  *Pool
	key   key
	sched *sched.Scheduler
	log   *slog.Logger
	os    osProcess // the process: a child, or adopted in an upgrade
	conn  *wire.Conn
	logs  *os.File // the read end of its stderr
	info  wire.HelloReply
	cache string // its private compiler cache directory

	ctx    context.Context // ends when the process is gone
	cancel context.CancelFunc
	done   chan struct{} // closed once the process is reaped and cleaned up

	mu sync.Mutex
	// Guarded by mu.
	nextID   uint32
	pending  map[uint32]chan *wire.Reply
	turns    map[uint32]func(dev time.Duration, slices uint32) // turns of the worker in progress; nil: being granted
	slots    map[uint32]*procInstance
	nextSlot uint32
	pinned   int // relocations on their way here: not retired while idle
	// An upgrade in place (handover.go) pauses the process: turns asked
	// for meanwhile wait in deferred, calls are refused, and the reader
	// stops between two messages.
	acquiring int  // turns waiting for the scheduler
	deferTurn bool // turn requests go to deferred
	deferred  []handover.Turn
	noCalls   bool          // calls are refused (ErrUpgrading)
	pausing   bool          // the reader stops at its next deadline
	readStop  chan struct{} // closed when the reader stopped for a pause
	logStop   chan struct{} // closed when the log relay stopped for a pause
	readDone  chan struct{} // closed when the connection ended
	logsDone  chan struct{} // closed when the log pipe ended
	stopping  bool          // asked to exit (not a failure)
	stopped   bool          // SIGSTOPped by a preemption (preempt.go)
	why       string        // why it was ended, for the log
	cause     string        // the metrics label of a kill (Pool.Exits)
}

// start spawns the worker for k and says hello.
func (p *Pool) start(k key) (*process, error) {
	conn, peer, err := wire.Pair()
	if err != nil {
		return nil, err
	}
	cacheDir, err := os.MkdirTemp(p.cfg.Dir, "worker-cache-")
	if err != nil {
		conn.Close()
		peer.Close()
		return nil, fmt.Errorf("worker cache directory: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		conn.Close()
		peer.Close()
		os.RemoveAll(cacheDir)
		return nil, err
	}
	cmd, err := p.command(k, cacheDir)
	if err != nil {
		conn.Close()
		peer.Close()
		errR.Close()
		errW.Close()
		os.RemoveAll(cacheDir)
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{peer}
	var execFiles []*os.File
	if p.KernelsInExecutor(k.device) {
		if execFiles, err = p.executorFiles(k); err != nil {
			conn.Close()
			peer.Close()
			errR.Close()
			errW.Close()
			os.RemoveAll(cacheDir)
			return nil, fmt.Errorf("worker for domain %s on device %d: executor: %w", k.domain, k.device, err)
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, execFiles...)
		cmd.Env = append(cmd.Env, child.EnvExecutor+"=1", child.EnvArena+"=1")
	}
	cmd.Stderr = errW
	err = cmd.Start()
	peer.Close()
	errW.Close()
	for _, f := range execFiles {
		f.Close()
	}
	if err != nil {
		conn.Close()
		errR.Close()
		os.RemoveAll(cacheDir)
		p.count(CauseStart) // no process to reap: counted here
		return nil, fmt.Errorf("start worker for domain %s on device %d: %w: %w", k.domain, k.device, err, ErrWorker)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr := &process{
		pool: p, key: k, sched: p.scheds[k.device], os: childProcess{cmd}, conn: conn, logs: errR,
		log:     p.log.With("domain", k.domain, "device", k.device, "worker_pid", cmd.Process.Pid),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
		cache:   cacheDir,
		pending: map[uint32]chan *wire.Reply{}, turns: map[uint32]func(time.Duration, uint32){},
		slots: map[uint32]*procInstance{},
	}
	pr.run()

	// A worker that does not answer its hello in time (its device hangs
	// at open) is ended.
	hctx, cancel := context.WithTimeout(context.Background(), helloTimeout)
	defer cancel()
	r, err := pr.call(hctx, &wire.Hello{
		Version: wire.Version, Device: uint32(p.cfg.Devices[k.device].Index), Domain: k.domain, Shared: p.isShared(k.domain),
		ReuseBudget: p.budget(k.domain), CacheBytes: p.cfg.CacheBytes,
	})
	if err == nil {
		pr.info, err = wire.DecodeHelloReply(r.Body)
	}
	if err == nil && pr.info.Name != p.cfg.Devices[k.device].Name {
		err = fmt.Errorf("worker opened device %q, want %q", pr.info.Name, p.cfg.Devices[k.device].Name)
	}
	if err != nil {
		pr.kill(CauseStart, fmt.Sprintf("hello: %v", err))
		<-pr.done
		return nil, fmt.Errorf("worker for domain %s on device %d: %w: %w", k.domain, k.device, err, ErrWorker)
	}
	pr.log.Info("worker started")
	return pr, nil
}

// run starts the process's goroutines in this process: the reader, the
// log relay and the reaper.
func (pr *process) run() {
	pr.readDone, pr.logsDone = make(chan struct{}), make(chan struct{})
	pr.startLogs(pr.logsDone)
	pr.startReader(pr.readDone)
	go pr.reap(pr.readDone, pr.logsDone, pr.cache)
}

// startLogs starts the log relay; done is closed when the pipe ended
// (and was closed), not when the relay stopped for a pause.
func (pr *process) startLogs(done chan struct{}) {
	pr.mu.Lock()
	stop := make(chan struct{})
	pr.logStop = stop
	pr.mu.Unlock()
	go func() {
		pr.relayLogs(pr.logs)
		pr.mu.Lock()
		pausing := pr.pausing
		pr.mu.Unlock()
		if pausing {
			close(stop)
			return
		}
		pr.logs.Close()
		close(done)
	}()
}

// startReader starts the reader; done is closed when the connection
// ended (not when the reader stopped for a pause).
func (pr *process) startReader(done chan struct{}) {
	pr.mu.Lock()
	stop := make(chan struct{})
	pr.readStop = stop
	pr.mu.Unlock()
	go func() {
		if pr.read() {
			close(stop)
			return
		}
		close(done)
	}()
}

// read serves the worker's messages until the connection ends (false) or
// the reader is paused (true).
func (pr *process) read() (paused bool) {
	for {
		h, m, _, err := pr.conn.Recv()
		if err != nil {
			pr.mu.Lock()
			pausing := pr.pausing
			pr.mu.Unlock()
			if pausing && errors.Is(err, os.ErrDeadlineExceeded) {
				return true
			}
			if wire.IsProtocol(err) {
				pr.kill(CauseProtocol, fmt.Sprintf("protocol violation: %v", err))
			} else {
				pr.ended("connection closed: " + err.Error())
			}
			return false
		}
		switch m := m.(type) {
		case *wire.Reply:
			pr.mu.Lock()
			ch, ok := pr.pending[h.ID]
			delete(pr.pending, h.ID)
			pr.mu.Unlock()
			if !ok {
				pr.kill(CauseProtocol, fmt.Sprintf("protocol violation: reply to request %d, which is not waiting", h.ID))
				return false
			}
			ch <- m
		case *wire.Turn:
			if err := pr.turn(h.ID, m); err != nil {
				pr.kill(CauseProtocol, fmt.Sprintf("protocol violation: %v", err))
				return false
			}
		case *wire.TurnTaken:
			if err := pr.taken(m); err != nil {
				pr.kill(CauseProtocol, fmt.Sprintf("protocol violation: %v", err))
				return false
			}
		case *wire.TurnRelease:
			if err := pr.release(m); err != nil {
				pr.kill(CauseProtocol, fmt.Sprintf("protocol violation: %v", err))
				return false
			}
		case *wire.Reserve:
			pr.reserve(h.ID, m)
		case *wire.Unreserve:
			pr.unreserve(m)
		case *wire.Arena:
			pr.arena(h.ID, m)
		default:
			pr.kill(CauseProtocol, fmt.Sprintf("protocol violation: the worker sent %v, a main-process message", m.Type()))
			return false
		}
	}
}

// turn serves a worker's turn request.
func (pr *process) turn(id uint32, m *wire.Turn) error {
	pr.mu.Lock()
	if _, busy := pr.turns[m.Turn]; busy {
		pr.mu.Unlock()
		return fmt.Errorf("turn %d asked for while in progress", m.Turn)
	}
	if pr.deferTurn {
		if len(pr.deferred) >= handover.MaxItems {
			pr.mu.Unlock()
			return fmt.Errorf("%d turns asked for at once", len(pr.deferred))
		}
		pr.deferred = append(pr.deferred, handover.Turn{ID: id, Turn: m.Turn, Slot: m.Slot, Kind: uint8(m.Kind), Cost: int64(m.Cost)})
		pr.mu.Unlock()
		return nil
	}
	inst := pr.slots[m.Slot]
	if inst == nil {
		pr.mu.Unlock()
		// A race with a removal, or a lie: either way no turn.
		go pr.reply(id, abi.StatusNotFound, fmt.Sprintf("no instance in slot %d", m.Slot), nil)
		return nil
	}
	pr.turns[m.Turn] = nil
	pr.mu.Unlock()
	lim := inst.limitsNow()
	if m.Kind == wire.TurnCompile {
		var w *buildWatch
		if lim.BuildTimeout > 0 {
			w = watchBuild(pr.os.Pid(), lim.BuildTimeout, func(reason string) {
				pr.kill(CauseBuildTimeout, fmt.Sprintf("a build of instance %s %s", inst.cfg.ID, reason))
			})
		}
		pr.grant(m.Turn, func(time.Duration, uint32) {
			if w != nil {
				w.stop()
			}
		})
		go pr.reply(id, abi.StatusOK, "", (&wire.TurnGrant{}).EncodeBody())
		return nil
	}
	go func() {
		budget, release, err := pr.sched.Acquire(pr.ctx, inst.cfg.ID, m.Cost)
		if err != nil {
			pr.mu.Lock()
			delete(pr.turns, m.Turn)
			pr.mu.Unlock()
			pr.reply(id, abi.StatusDeviceLost, "no turn: "+err.Error(), nil)
			return
		}
		if !pr.grant(m.Turn, func(dev time.Duration, slices uint32) { release(dev, int(slices)) }) {
			release(0, 0) // the process died meanwhile
			return
		}
		pr.reply(id, abi.StatusOK, "", (&wire.TurnGrant{SliceBudget: budget}).EncodeBody())
	}()
	return nil
}

// taken claims the turn a worker took from a free turn parked in its
// instance's page (sched/offer.go). The turn is in progress from now on,
// whatever the scheduler says: one it knows nothing of (a worker that
// lies, or took the offer from the process it was handed over from) is
// recorded with nothing to release, so that its TurnRelease is no
// violation.
func (pr *process) taken(m *wire.TurnTaken) error {
	pr.mu.Lock()
	if _, busy := pr.turns[m.Turn]; busy {
		pr.mu.Unlock()
		return fmt.Errorf("turn %d taken while in progress", m.Turn)
	}
	inst := pr.slots[m.Slot]
	pr.turns[m.Turn] = func(time.Duration, uint32) {}
	pr.mu.Unlock()
	if inst == nil {
		return nil
	}
	release, ok := pr.sched.Take(inst.cfg.ID, m.Offer)
	if !ok {
		pr.log.Debug("turn taken from an offer the scheduler does not know", "instance", inst.cfg.ID, "offer", m.Offer)
		return nil
	}
	if !pr.grant(m.Turn, func(dev time.Duration, slices uint32) { release(dev, int(slices)) }) {
		release(0, 0) // the process died meanwhile
	}
	return nil
}

// grant records a turn granted to the worker; false if it is gone.
func (pr *process) grant(turn uint32, release func(time.Duration, uint32)) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.ctx.Err() != nil {
		return false
	}
	pr.turns[turn] = release
	return true
}

func (pr *process) release(m *wire.TurnRelease) error {
	pr.mu.Lock()
	rel, ok := pr.turns[m.Turn]
	if ok && rel != nil {
		delete(pr.turns, m.Turn)
	}
	pr.mu.Unlock()
	if !ok || rel == nil {
		return fmt.Errorf("release of turn %d, which was not granted", m.Turn)
	}
	rel(m.Device, m.Slices)
	return nil
}

func (pr *process) reply(id uint32, st abi.Status, msg string, body []byte) {
	if err := pr.conn.Send(id, &wire.Reply{Status: uint32(st), Msg: msg, Body: body}); err != nil && pr.ctx.Err() == nil {
		pr.log.Warn("reply to worker", "err", err)
	}
}

// call sends a request and waits for its Reply; a Reply with a status
// other than OK is an error carrying it (abi.StatusOf).
func (pr *process) call(ctx context.Context, m wire.Msg, fds ...int) (*wire.Reply, error) {
	ch := make(chan *wire.Reply, 1)
	pr.mu.Lock()
	if pr.ctx.Err() != nil {
		pr.mu.Unlock()
		return nil, fmt.Errorf("%v: %w", m.Type(), ErrLost)
	}
	if pr.noCalls {
		pr.mu.Unlock()
		return nil, fmt.Errorf("%v: %w", m.Type(), ErrUpgrading)
	}
	pr.nextID++
	id := pr.nextID
	pr.pending[id] = ch
	stopped := pr.stopped
	pr.mu.Unlock()
	if stopped {
		pr.wake() // it cannot answer while stopped
	}
	if err := pr.conn.Send(id, m, fds...); err != nil {
		pr.mu.Lock()
		delete(pr.pending, id)
		pr.mu.Unlock()
		return nil, fmt.Errorf("%v: %w: %w", m.Type(), err, ErrLost)
	}
	select {
	case r := <-ch:
		if r.Status != uint32(abi.StatusOK) {
			st := abi.Status(r.Status)
			if int(st) >= abi.NumStatus {
				st = abi.StatusDeviceError
			}
			return r, abi.Errorf(st, "worker: %v: %s", m.Type(), r.Msg)
		}
		return r, nil
	case <-pr.ctx.Done():
		return nil, fmt.Errorf("%v: %w", m.Type(), ErrLost)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// The causes of a worker's end, the label of Pool's exit counters.
const (
	CauseWatchdog     = "watchdog"      // a device turn held the device over its budget
	CauseBuildTimeout = "build-timeout" // a build ran over its budget
	CauseProtocol     = "protocol"      // the worker broke the protocol
	CauseStart        = "start"         // it failed to start or to open its device
	CauseSignal       = "signal"        // it died of a signal (a crash, or killed from outside)
	CauseExit         = "exit"          // it exited by itself
	// CauseContextLost: it exited because its device context became
	// unusable (child.ExitContextLost: a kernel's illegal memory access
	// on NVIDIA's OpenCL). The exit code is the worker's word: a worker
	// taken over by guest code may claim it, which only mislabels its
	// own end.
	CauseContextLost = "context-lost"
	// CauseExecutor: it exited because the executor that ran its
	// kernels ended (child.ExitExecutor: a crashing kernel or compiler);
	// the worker's word, as above.
	CauseExecutor = "executor"
)

// Causes lists the causes of a worker's end.
var Causes = []string{CauseWatchdog, CauseBuildTimeout, CauseProtocol, CauseStart, CauseSignal, CauseExit, CauseContextLost, CauseExecutor}

// kill ends the worker for reason (a failure: counted under cause, its
// instances lost).
func (pr *process) kill(cause, reason string) {
	pr.mu.Lock()
	first := pr.why == ""
	if first {
		pr.why, pr.cause = reason, cause
		pr.log.Warn("ending worker", "reason", reason)
	}
	pr.cont() // a preempted worker is continued before it is killed
	pr.mu.Unlock()
	_ = pr.os.Kill()
	pr.conn.Close()
}

// ended notes that the connection ended without kill.
func (pr *process) ended(reason string) {
	pr.mu.Lock()
	if pr.why == "" {
		pr.why = reason
	}
	pr.mu.Unlock()
}

// stop asks the worker to exit (its socket closed), killing it if it has
// not within stopGrace, and waits until it is reaped.
func (pr *process) stop() {
	pr.mu.Lock()
	pr.stopping = true
	stopped := pr.stopped
	pr.mu.Unlock()
	if stopped {
		pr.wake() // it cannot exit while stopped
	}
	pr.conn.Close()
	select {
	case <-pr.done:
	case <-time.After(stopGrace):
		pr.kill(CauseExit, "did not exit within "+stopGrace.String()+" of being stopped")
		<-pr.done
	}
}

// reap waits for the worker to end and cleans up after it: requests and
// turns in progress end, and its instances lose their device context.
func (pr *process) reap(readDone, logsDone <-chan struct{}, cacheDir string) {
	<-readDone
	pr.mu.Lock()
	stopping := pr.stopping
	pr.mu.Unlock()
	if !stopping {
		// The connection failed: the process must not outlive it.
		_ = pr.os.Kill()
	}
	err := pr.os.Wait()
	<-logsDone
	pr.conn.Close()
	pr.mu.Lock()
	pr.cancel()
	turns := pr.turns
	pr.turns = map[uint32]func(time.Duration, uint32){}
	slots := pr.slots
	pr.slots = map[uint32]*procInstance{}
	why, cause := pr.why, pr.cause
	pr.mu.Unlock()
	for _, rel := range turns {
		if rel != nil {
			rel(0, 0) // charged the wall time it held
		}
	}
	for _, inst := range slots {
		pr.sched.Forfeit(inst.cfg.ID) // a parked turn it took and never claimed
	}
	status := exitStatus(err)
	if stopping && len(slots) == 0 && cause == "" {
		pr.log.Info("worker stopped", "exit", status)
	} else {
		if why == "" {
			why = "exited"
		}
		pr.log.Warn("worker ended", "reason", why, "exit", status, "instances", len(slots))
		if cause == "" {
			cause = exitCause(err)
		}
		pr.pool.count(cause)
		for _, inst := range slots {
			inst.lose(pr, fmt.Sprintf("%s (%s)", why, status))
		}
	}
	os.RemoveAll(cacheDir)
	pr.pool.forget(pr)
	close(pr.done)
}

// exitStatus describes how a process ended.
func exitStatus(err error) string {
	if errors.Is(err, errAdopted) {
		return "exit status unknown (adopted in an upgrade)"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exit code %d", ee.ExitCode())
	}
	if err != nil {
		return err.Error()
	}
	return "exit code 0"
}

// exitCause is the cause of an end nobody asked for.
func exitCause(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return CauseSignal
		}
		switch ee.ExitCode() {
		case child.ExitContextLost:
			return CauseContextLost
		case child.ExitExecutor:
			return CauseExecutor
		}
	}
	return CauseExit
}

// relayLogs copies the worker's stderr lines into the main log,
// attributed to the worker, cut and rate-limited, and quoted: a worker
// taken over by guest code writes what it likes there, so no line becomes
// a record of the main process's own. Each is one record with a fixed
// message and the line as the value of "untrusted" (the handler quotes
// it); the level a JSON line claims is kept for filtering, but never
// above WARN. The executors write into the same pipe (they inherit the
// worker's stderr).
//
// It reads until the pipe ends (or fails, as at a pause's deadline) and
// never stops for what it reads: a line longer than logLineMax (guest
// code or the OpenCL runtime can write one of any length) is cut there,
// the rest of it read and discarded up to its newline, and its record
// carries "cut_bytes", the number of bytes dropped. A relay that stopped
// would close the pipe, and the worker's next log line would end it
// (EPIPE), and every context of the domain on the device with it.
func (pr *process) relayLogs(r io.Reader) {
	br := bufio.NewReaderSize(r, 4096)
	window, n := time.Now(), 0
	for {
		line, cut, err := readLogLine(br, logLineMax)
		if err != nil && len(line) == 0 && cut == 0 {
			return
		}
		if time.Since(window) > time.Second {
			window, n = time.Now(), 0
		}
		if n++; n > logBurst {
			if n == logBurst+1 {
				pr.log.Warn("worker log lines dropped (over the rate limit)")
			}
		} else {
			pr.relayLine(string(line), cut)
		}
		if err != nil {
			return
		}
	}
}

// relayLine logs one line of a worker's stderr, cut bytes dropped from
// its end (see relayLogs).
func (pr *process) relayLine(line string, cut int) {
	var attrs []any
	if cut > 0 {
		attrs = []any{"cut_bytes", cut}
	}
	var rec struct {
		Level string `json:"level"`
	}
	if cut > 0 || json.Unmarshal([]byte(line), &rec) != nil {
		// Not the worker's own log (the OpenCL runtime or compiler
		// writing to stderr), or a line cut short.
		pr.log.Debug("worker stderr (untrusted)", append([]any{"untrusted", line}, attrs...)...)
		return
	}
	lvl := slog.LevelInfo
	_ = lvl.UnmarshalText([]byte(rec.Level))
	pr.log.Log(context.Background(), min(lvl, slog.LevelWarn), "worker log line (untrusted)", "untrusted", line)
}

// readLogLine reads one line from br: at most max bytes of it, without
// its newline (nor a carriage return before it); the rest of a longer
// line is read and discarded, and cut is how many bytes were. err is the
// reader's error, with the bytes of a last line that had no newline.
func readLogLine(br *bufio.Reader, max int) (line []byte, cut int, err error) {
	var last byte
	for {
		frag, err := br.ReadSlice('\n')
		if err == nil {
			frag = frag[:len(frag)-1]
		}
		if len(frag) > 0 {
			last = frag[len(frag)-1]
		}
		take := min(max-len(line), len(frag))
		line = append(line, frag[:take]...)
		cut += len(frag) - take
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == nil && last == '\r' {
			// The line's last byte: dropped if it was cut, else taken off.
			if cut > 0 {
				cut--
			} else {
				line = line[:len(line)-1]
			}
		}
		return line, cut, err
	}
}

// KernelsInExecutor reports whether workers on device dev run their
// kernels in an executor process: on a CPU device, where a kernel runs in the process
// that launches it (docs/isolation.md "Executors"), where the worker is
// its PID namespace's init (its seccomp filter then lets the executor
// signal its own threads, and the executor ends with the worker), or
// unconfined.
func (p *Pool) KernelsInExecutor(dev int) bool {
	return !p.cfg.KernelsInWorker && p.cfg.Devices[dev].CPU && (p.pidNS || p.cfg.NoSandbox)
}

// socketPair returns the two ends of a Unix stream socket pair.
// executorFiles are what a worker whose kernels run in an executor is
// given for it: the worker may make neither sockets nor shared memory,
// so the main process makes the executor's socket pair
// (child.WorkerExecutorFD and WorkerExecutorPeerFD) and the memory the
// two share for the executor's buffers (child.WorkerArenaFD), the size
// of the device's memory: the most the domain's buffers can ever hold on
// it.
func (p *Pool) executorFiles(k key) ([]*os.File, error) {
	pair, err := socketPair()
	if err != nil {
		return nil, err
	}
	arena, err := arenaFile(p.cfg.Devices[k.device].GlobalMemBytes)
	if err != nil {
		pair[0].Close()
		pair[1].Close()
		return nil, err
	}
	return append(pair, arena), nil
}

func socketPair() ([]*os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	return []*os.File{os.NewFile(uintptr(fds[0]), "executor"), os.NewFile(uintptr(fds[1]), "executor-peer")}, nil
}
