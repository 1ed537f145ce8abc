package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/mdev/control"
)

func TestSchedCommands(t *testing.T) {
	sock := daemon(t)
	id, err := ctl(t, sock, "create", "-profile", "vgpu-medium")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	ctlSteps(t, sock, []ctlStep{
		{[]string{"policy", "0"}, []string{"fixed-share"}},
		{[]string{"policy", "0", "timeslice"}, []string{"timeslice"}},
		{[]string{"policy", "0"}, []string{"timeslice"}},
		{[]string{"set-share", id, "5"}, []string{id + " share 5"}},
		{[]string{"stats"}, []string{"POLICY", "timeslice", id, "vgpu-medium"}},
		{[]string{"top", "-n", "1", "-interval", "20ms"}, []string{"vgpud top", "UTIL", "timeslice", id, "WAIT/TURN"}},
	})
	out, err := ctl(t, sock, "stats", "-json")
	if err != nil {
		t.Fatal(err)
	}
	var st control.StatsReply
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Instances) != 1 || st.Instances[0].Sched.Share != 5 {
		t.Errorf("stats -json = %q (%v)", out, err)
	}
	for _, args := range [][]string{{"policy"}, {"policy", "x"}, {"policy", "0", "fifo"}, {"policy", "9"},
		{"set-share", id}, {"set-share", id, "0"}, {"set-share", id, "-1"}, {"top", "-interval", "0s"}} {
		if _, err := ctl(t, sock, args...); err == nil {
			t.Errorf("vgpuctl %q = nil error", args)
		}
	}
}
