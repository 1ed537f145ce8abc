package icdserver

import (
	"encoding/binary"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/vgpud/vgpud/guestagent/icdproto"
)

// encodeMsgs frames messages for FuzzConn: each is a u16 length and bytes.
func encodeMsgs(t testing.TB, msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	return b
}

func msg(t testing.TB, op icdproto.Op, body any) []byte {
	t.Helper()
	b, err := icdproto.Marshal(op, 1, body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzConn feeds raw messages to one connection (after a Hello and the
// Attach of a 64 KiB arena): the daemon must not crash, must end the
// connection cleanly, and must leave no buffer behind.
func FuzzConn(f *testing.F) {
	fx := newFixture(f)
	src := msg(f, icdproto.OpBuild, &icdproto.Build{Program: 2, Arena: 1, SrcLen: 64, OutOffset: 32768, OutCap: 32768})
	f.Add(encodeMsgs(f,
		msg(f, icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 4096, Event: 1}),
		msg(f, icdproto.OpWrite, &icdproto.Transfer{Buffer: 1, Arena: 1, Length: 4096, Event: 2}),
		msg(f, icdproto.OpRead, &icdproto.Transfer{Buffer: 1, Arena: 1, ArenaOffset: 4096, Length: 4096, Event: 3}),
		msg(f, icdproto.OpWait, &icdproto.Wait{Events: []uint64{1, 2, 3}}),
	))
	f.Add(encodeMsgs(f, src,
		msg(f, icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 4096}),
		msg(f, icdproto.OpLaunch, launchFill(2, 1, 1024, 5, 4)),
		msg(f, icdproto.OpMarker, &icdproto.Marker{Event: 5}),
		msg(f, icdproto.OpPoll, &icdproto.Wait{}),
		msg(f, icdproto.OpWait, &icdproto.Wait{}),
	))
	fill := &icdproto.Fill{Buffer: 1, PatternLen: 2, Length: 64, Event: 9}
	f.Add(encodeMsgs(f,
		msg(f, icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 4096}),
		msg(f, icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 2, Size: 4096}),
		msg(f, icdproto.OpCopy, &icdproto.Copy{Src: 1, Dst: 2, Length: 100, Event: 8}),
		msg(f, icdproto.OpFill, fill),
		msg(f, icdproto.OpBufferFree, &icdproto.BufferFree{Buffer: 1}),
		msg(f, icdproto.OpFlush, &icdproto.Flush{}),
	))
	f.Add(encodeMsgs(f,
		msg(f, icdproto.OpDeviceInfo, &icdproto.DeviceInfo{}),
		msg(f, icdproto.OpDeviceInfo, &icdproto.DeviceInfo{}),
		msg(f, icdproto.OpDeviceInfo, &icdproto.DeviceInfo{Device: 1}),
	))
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		defer func() {
			if el := time.Since(start); el > 2*time.Second {
				t.Fatalf("input took %v", el)
			}
		}()
		cl, _ := fx.hello(t)
		cl.attach(1, 1<<16)
		// Read replies as they come, or a daemon blocked writing them and a
		// client blocked writing requests would wait for each other.
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			buf := make([]byte, icdproto.MaxMessage)
			for {
				if n, err := cl.c.Read(buf); err != nil || n == 0 {
					return
				}
			}
		}()
		for len(data) >= 2 {
			n := int(binary.LittleEndian.Uint16(data))
			data = data[2:]
			n = min(n, len(data))
			if n == 0 {
				continue // a 0-byte datagram reads as end of file
			}
			if _, err := cl.c.Write(data[:n]); err != nil {
				break // the daemon closed the connection
			}
			data = data[n:]
		}
		cl.c.CloseWrite()
		<-drained
		cl.c.Close()
		fx.waitIdle(t)
		if b := fx.fakes[0].Buffers(); b != 0 {
			t.Fatalf("%d buffers left after the connection ended", b)
		}
	})
}

// TestEventTable checks the event table against a model: every event is
// reported exactly once, by a Wait naming it or by a Wait or Poll of
// count 0, and an id is free again once reported.
func TestEventTable(t *testing.T) {
	fx := newFixture(t)
	rapid.Check(t, func(rt *rapid.T) {
		cl, _ := fx.hello(t)
		defer func() { cl.c.Close(); fx.waitIdle(t) }()
		cl.attach(1, 4096)
		cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 4096})
		live := map[uint64]bool{} // submitted, not reported
		reported := 0
		submitted := 0
		report := func(recs []icdproto.EventRecord) {
			for _, r := range recs {
				if r.Status == icdproto.NotComplete {
					continue
				}
				if !live[r.Event] {
					rt.Fatalf("event %d reported but not live", r.Event)
				}
				delete(live, r.Event)
				reported++
			}
		}
		ids := rapid.Uint64Range(1, 40)
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0, 1: // submit with a fresh id
				id := ids.Draw(rt, "event")
				if live[id] {
					continue
				}
				live[id] = true
				submitted++
				if rapid.Bool().Draw(rt, "marker") {
					cl.send(icdproto.OpMarker, &icdproto.Marker{Event: id})
				} else {
					cl.send(icdproto.OpWrite, &icdproto.Transfer{Buffer: 1, Arena: 1, Length: 64, Event: id})
				}
			case 2: // wait for some live events
				var want []uint64
				for id := range live {
					if rapid.Bool().Draw(rt, "pick") {
						want = append(want, id)
					}
				}
				if len(want) == 0 {
					continue
				}
				recs := cl.wait(want...)
				for i, r := range recs {
					if r.Event != want[i] || r.Status != 0 {
						rt.Fatalf("wait %v: record %d = %+v", want, i, r)
					}
				}
				report(recs)
			case 3:
				report(cl.call(icdproto.OpPoll, &icdproto.Wait{}).(*icdproto.WaitReply).Events)
			case 4:
				r := cl.call(icdproto.OpWait, &icdproto.Wait{}).(*icdproto.WaitReply)
				report(r.Events)
				if len(live) != 0 || r.Pending != 0 {
					rt.Fatalf("after wait 0: %d events live, pending %d", len(live), r.Pending)
				}
			}
		}
		report(cl.wait())
		if len(live) != 0 || reported != submitted {
			rt.Fatalf("%d submitted, %d reported, %d never", submitted, reported, len(live))
		}
	})
}
