package main

import (
	"strings"
	"testing"
)

func TestReuseCommands(t *testing.T) {
	sock := daemon(t)
	id, err := ctl(t, sock, "create", "-profile", "vgpu-medium", "-reuse-domain", "team")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	ctlSteps(t, sock, []ctlStep{
		{[]string{"reuse"}, []string{"DOMAIN", "team", id, "HITS"}},
		{[]string{"reuse", "budget", "team", "4096"}, []string{"team budget 4096"}},
		{[]string{"reuse", "-json"}, []string{`"pinned_budget": true`, `"domain": "team"`}},
		{[]string{"reuse", "set", id, "private"}, []string{id + " reuse instance:" + id}},
		{[]string{"reuse", "set", id, "off"}, []string{id + " reuse off"}},
		{[]string{"show", id}, []string{`"reuse"`}},
	})
	for _, args := range [][]string{{"reuse", "set", id}, {"reuse", "budget", "team", "-3"}, {"reuse", "budget", "nope", "1"}} {
		if out, err := ctl(t, sock, args...); err == nil {
			t.Errorf("vgpuctl %q = %q, want an error", args, out)
		}
	}
}
