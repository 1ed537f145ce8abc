package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vgpud/vgpud/abi/agentmsg"
)

// ReadProcStat reads the aggregate cpu line of /proc/stat and the uptime.
func ReadProcStat() (agentmsg.GuestStats, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return agentmsg.GuestStats{}, err
	}
	st, err := ParseProcStat(b)
	if err != nil {
		return st, err
	}
	if u, err := os.ReadFile("/proc/uptime"); err == nil {
		if f := strings.Fields(string(u)); len(f) > 0 {
			if s, err := strconv.ParseFloat(f[0], 64); err == nil && s >= 0 && s < 1e9 {
				st.UptimeNs = uint64(s * float64(time.Second))
			}
		}
	}
	return st, nil
}

// ParseProcStat parses the "cpu" line of /proc/stat.
func ParseProcStat(b []byte) (agentmsg.GuestStats, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		var v [8]uint64
		for i := range v {
			if i+1 >= len(f) {
				break // older kernels have fewer columns
			}
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return agentmsg.GuestStats{}, fmt.Errorf("/proc/stat cpu column %d: %w", i+1, err)
			}
			v[i] = n
		}
		return agentmsg.GuestStats{User: v[0], Nice: v[1], System: v[2], Idle: v[3], IOWait: v[4], IRQ: v[5], SoftIRQ: v[6], Steal: v[7]}, nil
	}
	return agentmsg.GuestStats{}, fmt.Errorf("/proc/stat: no cpu line")
}
