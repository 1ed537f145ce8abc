package agentchan

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/vgpud/vgpud/abi/agentmsg"
)

// stutter returns at most n bytes per Read, then a deadline error once
// after cut bytes, as a pause between two reads of one frame would.
type stutter struct {
	r        io.Reader
	n, cut   int
	read     int
	deadline bool
}

func (s *stutter) Read(p []byte) (int, error) {
	if s.read >= s.cut && !s.deadline {
		s.deadline = true
		return 0, os.ErrDeadlineExceeded
	}
	if len(p) > s.n {
		p = p[:s.n]
	}
	if room := s.cut - s.read; room > 0 && len(p) > room {
		p = p[:room]
	}
	k, err := s.r.Read(p)
	s.read += k
	return k, err
}

// TestFrameReaderKeepsAFrameBegun: a pause in the middle of a frame loses
// none of it: the bytes read go over with the connection (or back to the
// resumed reader) and the frame parses whole.
func TestFrameReaderKeepsAFrameBegun(t *testing.T) {
	var wire []byte
	wire = agentmsg.Append(wire, &agentmsg.Watch{Index: 7})
	wire = agentmsg.Append(wire, &agentmsg.Ping{Cookie: 99})
	first := len(agentmsg.Marshal(&agentmsg.Watch{Index: 7}))
	for cut := first; cut < len(wire); cut++ {
		src := &stutter{r: bytes.NewReader(wire), n: 3, cut: cut}
		f := &frameReader{r: src}
		r := agentmsg.NewReader(f)
		f.mark()
		if m, err := r.Read(); err != nil || m.(*agentmsg.Watch).Index != 7 {
			t.Fatalf("cut %d: first frame %v, %v", cut, m, err)
		}
		f.mark()
		_, err := r.Read()
		if cut == len(wire) {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("cut %d: read across the pause = %v, want the deadline", cut, err)
		}
		// Handed over: the next process reads the bytes begun, then the
		// socket.
		next := &frameReader{r: src, unread: append([]byte(nil), f.since...)}
		m, err := agentmsg.NewReader(next).Read()
		if err != nil {
			t.Fatalf("cut %d: frame after the handover: %v", cut, err)
		}
		if p, ok := m.(*agentmsg.Ping); !ok || p.Cookie != 99 {
			t.Fatalf("cut %d: frame after the handover = %#v", cut, m)
		}
		// Or resumed in place: rewind gives the same.
		f.rewind()
		if len(f.unread) != cut-first {
			t.Errorf("cut %d: rewind kept %d bytes, want %d", cut, len(f.unread), cut-first)
		}
	}
}
