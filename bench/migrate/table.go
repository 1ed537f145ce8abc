package main

import (
	"fmt"
	"time"

	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/migrate"
)

// cell is one (size, rate, mode): the mean of its migrations (one each
// way).
type cell struct {
	tr    string
	size  uint64
	rate  string
	mode  mode
	n     int
	sum   phases
	bytes uint64
	final uint64 // bytes of the final round
	guest uint64 // bytes of guest RAM the device wrote during QEMU's copy
	rnds  int
}

// phases are a migration's durations.
type phases struct {
	quiesce, final, unplug, qemu, plug, resume, stun, downtime, total, liveCopy time.Duration
	// hello: within resume, the guest's first answer (its agent's Hello).
	hello time.Duration
}

func (p *phases) add(r *migrate.Report) {
	p.quiesce += r.Quiesce
	p.final += r.Final
	p.unplug += r.Unplug
	p.qemu += r.QEMU
	p.plug += r.Plug
	p.resume += r.Resume
	p.stun += r.Stun
	p.downtime += r.QEMUDowntime
	p.total += r.Total
	p.liveCopy += r.LiveCopy
	p.hello += r.GuestHello
}

func (p phases) div(n int) phases {
	d := time.Duration(max(n, 1))
	return phases{p.quiesce / d, p.final / d, p.unplug / d, p.qemu / d, p.plug / d, p.resume / d, p.stun / d, p.downtime / d, p.total / d, p.liveCopy / d, p.hello / d}
}

// vgpud is the part of the stun that is vgpud's own: quiescing (the agent
// round trip and the guest draining), the final round beyond the unplug
// it overlaps, and plugging (restoring the register file, device_add,
// cont) on the destination.
func (p phases) vgpud() time.Duration { return p.quiesce + max(0, p.final-p.unplug) + p.plug }

// qemu is the part that is QEMU's and the guest kernel's: the ACPI
// unplug, QEMU's migration of the VM's RAM, and the guest finding the
// re-plugged device until its programs resumed.
func (p phases) qemuPart() time.Duration { return p.unplug + p.qemu + p.resume }

// cells groups results in their order of first appearance.
func cells(rs []result) []*cell {
	var out []*cell
	idx := map[string]*cell{}
	for _, r := range rs {
		k := fmt.Sprintf("%s/%d/%s/%s", r.transport, r.size, r.rate, r.mode)
		c := idx[k]
		if c == nil {
			c = &cell{tr: r.transport, size: r.size, rate: r.rate, mode: r.mode}
			idx[k] = c
			out = append(out, c)
		}
		c.n++
		c.sum.add(r.rep)
		c.bytes += r.rep.StreamBytes
		c.guest += r.rep.GuestBytes
		for _, rd := range r.rep.Rounds {
			if rd.Final {
				c.final += rd.StreamBytes
			} else {
				c.rnds++
			}
		}
	}
	return out
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }

func mib(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// tables are the two printed tables: every (size, rate, mode) with its
// phases, and pre-copy against the stop-and-copy baseline.
func tables(rs []result) []*table.Table {
	cs := cells(rs)
	t1 := &table.Table{
		Title: "Table 1: a migration, phase by phase (ms; mean of one migration each way)",
		Header: []string{"transport, device memory, dirty rate, mode", "rounds", "sent MiB", "final MiB",
			"GPU stun", "vgpud part", "QEMU+guest part", "quiesce", "final round", "unplug", "QEMU migrate", "plug+cont", "guest resume", "QEMU downtime", "total",
			"QEMU copy, vGPU running", "guest KiB"},
	}
	for _, c := range cs {
		p := c.sum.div(c.n)
		t1.Add(fmt.Sprintf("%s, %d MiB, %s, %s", c.tr, c.size>>20, c.rate, c.mode),
			fmt.Sprintf("%.1f", float64(c.rnds)/float64(c.n)), mib(c.bytes/uint64(c.n)), mib(c.final/uint64(c.n)),
			ms(p.stun), ms(p.vgpud()), ms(p.qemuPart()), ms(p.quiesce), ms(p.final), ms(p.unplug), ms(p.qemu), ms(p.plug), ms(p.resume), ms(p.downtime), ms(p.total),
			ms(p.liveCopy), fmt.Sprint(c.guest/uint64(c.n)>>10))
	}
	t1.Note("GPU stun: from the quiesce request to the guest's programs resumed on the destination; the final round runs beside the unplug.")
	t1.Note("vgpud part = quiesce + (final round - unplug, if longer) + plug+cont; QEMU+guest part = unplug + QEMU migrate + guest resume.")
	t1.Note("Under TCG the QEMU+guest part is the guest kernel's ACPI eject and hot-plug scan (mpqemu only) and QEMU copying 512 MiB of guest RAM.")
	t1.Note("vfio-user: no unplug or plug. Pre-copy keeps the vGPU running while QEMU copies the VM (\"QEMU copy, vGPU running\", outside the stun) and quiesce the guest as QEMU's copy nears its end; \"QEMU migrate\" is then QEMU's rest inside the stun, and the final round carries the guest RAM the device wrote (\"guest KiB\"). \"Quiesce first\" is the baseline that quiesces before QEMU copies (docs/migration.md).")

	t2 := &table.Table{
		Title:  "Table 2: pre-copy against the stop-and-copy baseline (same VM, same run)",
		Header: []string{"transport, device memory, dirty rate", "stun pre-copy", "stun stop-and-copy", "ratio", "vgpud part pre-copy", "vgpud part stop-and-copy", "ratio", "final MiB pre-copy", "final MiB stop-and-copy"},
	}
	for _, c := range cs {
		if c.mode != precopy {
			continue
		}
		var base *cell
		for _, o := range cs {
			if o.tr == c.tr && o.size == c.size && o.rate == c.rate && o.mode == stopCopy {
				base = o
			}
		}
		if base == nil {
			continue
		}
		p, q := c.sum.div(c.n), base.sum.div(base.n)
		t2.Add(fmt.Sprintf("%s, %d MiB, %s", c.tr, c.size>>20, c.rate), ms(p.stun), ms(q.stun), ratio(p.stun, q.stun),
			ms(p.vgpud()), ms(q.vgpud()), ratio(p.vgpud(), q.vgpud()), mib(c.final/uint64(c.n)), mib(base.final/uint64(base.n)))
	}
	t2.Note("ratio = pre-copy / stop-and-copy: below 1 is pre-copy's gain. The goal (docs/migration.md): GPU stun under 100 ms at 256 MiB, low dirty rate.")
	return []*table.Table{t1, t2, liveTable(cs)}
}

// liveTable is vfio-user's pre-copy with the vGPU running during QEMU's
// copy against the quiesce-first baseline, and the goal of issue 44: a
// GPU stun of at most QEMU's downtime + 100 ms.
func liveTable(cs []*cell) *table.Table {
	t := &table.Table{
		Title: "Table 3: vfio-user, the vGPU running while QEMU copies the VM against quiescing first (same VM, same run)",
		Header: []string{"device memory, dirty rate", "stun, vGPU running", "stun, quiesce first", "ratio",
			"QEMU downtime", "stun - downtime", "of which guest resume", "goal: stun - downtime <= 100 ms",
			"guest's first answer", "resume - first answer", "goal: resume - first answer <= 20 ms"},
	}
	for _, c := range cs {
		if c.tr != vfioUserT || c.mode != precopy {
			continue
		}
		for _, o := range cs {
			if o.tr != c.tr || o.size != c.size || o.rate != c.rate || o.mode != quiesceFirst {
				continue
			}
			p, q := c.sum.div(c.n), o.sum.div(o.n)
			over := p.stun - p.downtime
			met := "no"
			if over <= 100*time.Millisecond {
				met = "yes"
			}
			first, beyond, metResume := "-", "-", "-"
			if p.hello > 0 {
				first, beyond, metResume = ms(p.hello), ms(p.resume-p.hello), "no"
				if p.resume-p.hello <= 20*time.Millisecond {
					metResume = "yes"
				}
			}
			t.Add(fmt.Sprintf("%d MiB, %s", c.size>>20, c.rate), ms(p.stun), ms(q.stun), ratio(p.stun, q.stun),
				ms(p.downtime), ms(over), ms(p.resume), met, first, beyond, metResume)
		}
	}
	t.Note("ratio below 1 is the gain of running the vGPU during QEMU's copy. Guest resume: from cont to the guest agent's answer; the agent writes back the PCI configuration QEMU did not carry, and the programs go on on the BAR0 they kept mapped (docs/migration.md).")
	t.Note("Guest's first answer: from cont to the guest agent's Hello on the destination, which asks nothing of the vGPU: what any guest takes to run again after QEMU's switchover (QEMU's own, and the guest's). The goal of issue 44: the resume within 20 ms of it. A dash: not measured (a destination of an earlier release).")
	return t
}

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3fx", float64(a)/float64(b))
}
