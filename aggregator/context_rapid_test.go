package aggregator

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/vgpud/vgpud/abi"
)

// rring plays one ring (the default one, or a context's) for the
// property test: its own slots in the shared test RAM.
type rring struct {
	rb, cb, shadow uint64
	tail           uint32
	ctx            uint32
}

// TestContextLifecycleProperty drives an instance's device contexts with
// random creates, destroys, kicks, buffer creations and resets, against a
// model of which ids are live: every command gets the status the model
// says, Contexts() lists exactly the live ids, and the instance's memory
// charge is the sum of the live contexts' buffers and the default ring's.
func TestContextLifecycleProperty(t *testing.T) {
	d, _ := newDevice(t)
	rapid.Check(t, func(rt *rapid.T) {
		mem := &sliceMemory{ram: make([]byte, 1<<20)}
		bell := newBroadcast()
		const maxCtx = 3
		in, err := d.NewInstance(InstanceConfig{ID: "prop", Profile: "test", MemBytes: 1 << 20, Memory: mem,
			Contexts: maxCtx, Notify: func(uint32) { bell.ring() }})
		if err != nil {
			rt.Fatal(err)
		}
		defer in.Close()
		// Ring i (0: default) at 0x1000*(2i+1), completions a page later,
		// the shadow in the completion page's last word.
		rings := make([]*rring, maxCtx+1)
		for i := range rings {
			rb := uint64(0x1000 * (2*i + 1))
			rings[i] = &rring{rb: rb, cb: rb + 0x1000, shadow: rb + 0x1ffc, ctx: uint32(i)}
		}
		enable := func() {
			mem.WriteAt(make([]byte, 0x1000), rings[0].cb)
			rings[0].tail = 0
			if err := in.EnableRing(RingConfig{Base: rings[0].rb, ComplBase: rings[0].cb, Slots: 16}); err != nil {
				rt.Fatal(err)
			}
		}
		enable()
		run := func(r *rring, p abi.Payload) abi.Status {
			var b [abi.CommandSize]byte
			c := abi.NewCommand(p, 0, 7)
			c.Marshal(b[:])
			idx := r.tail
			mem.WriteAt(b[:], r.rb+uint64(idx%16)*abi.CommandSize)
			r.tail++
			if r.ctx == 0 {
				if err := in.Doorbell(r.tail); err != nil {
					rt.Fatalf("doorbell: %v", err)
				}
			} else {
				mem.WriteAt(binary.LittleEndian.AppendUint32(nil, r.tail), r.shadow)
				if err := in.ContextKick(r.ctx); err != nil {
					rt.Fatalf("kick of live context %d: %v", r.ctx, err)
				}
			}
			timeout := time.After(time.Minute)
			for {
				rang := bell.wait()
				var rb [abi.ComplSize]byte
				mem.ReadAt(rb[:], r.cb+uint64(idx%16)*abi.ComplSize)
				rec, _ := abi.UnmarshalCompletion(rb[:])
				if rec.Seq == abi.SeqOf(uint64(idx)) {
					return rec.Status
				}
				select {
				case <-rang:
				case <-timeout:
					rt.Fatalf("ring %d: command %d did not complete", r.ctx, idx)
				}
			}
		}
		live := map[uint32]uint64{} // id -> bytes its buffers hold
		var defaultBytes uint64
		nextHandle := uint32(1)
		rt.Repeat(map[string]func(*rapid.T){
			"create": func(rt *rapid.T) {
				id := rapid.Uint32Range(1, maxCtx+1).Draw(rt, "id")
				want := abi.StatusOK
				switch _, ok := live[id]; {
				case id > maxCtx:
					want = abi.StatusInvalidArgument
				case ok:
					want = abi.StatusExists
				}
				r := rings[min(id, maxCtx)]
				if want == abi.StatusOK {
					mem.WriteAt(make([]byte, 0x1000), r.cb)
					r.tail = 0
				}
				st := run(rings[0], &abi.ContextCreate{ID: id, Slots: 16, Ring: r.rb, Compl: r.cb, Shadow: r.shadow})
				if st != want {
					rt.Fatalf("create %d = %v, want %v", id, st, want)
				}
				if st == abi.StatusOK {
					live[id] = 0
				}
			},
			"destroy": func(rt *rapid.T) {
				id := rapid.Uint32Range(1, maxCtx).Draw(rt, "id")
				_, ok := live[id]
				want := abi.StatusNotFound
				if ok {
					want = abi.StatusOK
				}
				if st := run(rings[0], &abi.ContextDestroy{ID: id}); st != want {
					rt.Fatalf("destroy %d = %v, want %v", id, st, want)
				}
				delete(live, id)
			},
			"kick": func(rt *rapid.T) {
				id := rapid.Uint32Range(1, maxCtx).Draw(rt, "id")
				if _, ok := live[id]; !ok {
					if err := in.ContextKick(id); abi.StatusOf(err) != abi.StatusNotFound {
						rt.Fatalf("kick of dead context %d = %v, want not found", id, err)
					}
					return
				}
				if st := run(rings[id], &abi.Nop{}); st != abi.StatusOK {
					rt.Fatalf("nop on context %d = %v", id, st)
				}
			},
			"buffer": func(rt *rapid.T) {
				id := rapid.Uint32Range(0, maxCtx).Draw(rt, "id")
				if _, ok := live[id]; id != 0 && !ok {
					return
				}
				n := uint64(rapid.SampledFrom([]int{4096, 64 << 10}).Draw(rt, "size"))
				nextHandle++
				st := run(rings[id], &abi.BufferCreate{Handle: nextHandle, Size: n})
				var total uint64 = defaultBytes
				for _, b := range live {
					total += b
				}
				want := abi.StatusOK
				if total+n > 1<<20 {
					want = abi.StatusQuotaExceeded
				}
				if st != want {
					rt.Fatalf("buffer of %d on ring %d with %d held = %v, want %v", n, id, total, st, want)
				}
				if st == abi.StatusOK {
					if id == 0 {
						defaultBytes += n
					} else {
						live[id] += n
					}
				}
			},
			"reset": func(rt *rapid.T) {
				in.Reset()
				clear(live)
				defaultBytes = 0
				enable()
				if st := run(rings[0], &abi.Nop{}); st != abi.StatusOK {
					rt.Fatalf("nop after reset = %v", st)
				}
			},
			"": func(rt *rapid.T) {
				var ids []uint32
				for _, c := range in.Contexts() {
					ids = append(ids, c.ID)
				}
				var want []uint32
				total := defaultBytes
				for id, b := range live {
					want = append(want, id)
					total += b
				}
				slices.Sort(want)
				if !slices.Equal(ids, want) {
					rt.Fatalf("Contexts() = %v, want %v", ids, want)
				}
				if got := in.MemUsed(); got != total {
					rt.Fatalf("MemUsed = %d, want %d", got, total)
				}
			},
		})
	})
}
