package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseCmdline(t *testing.T) {
	tests := []struct {
		in      string
		want    config
		wantErr bool
	}{
		{in: "console=ttyS0 vgpu.run=vgpu-mmiobench vgpu.args=-dev,1234:11e8\n",
			want: config{Run: "vgpu-mmiobench", Args: []string{"-dev", "1234:11e8"}}},
		{in: "vgpu.run=prog", want: config{Run: "prog"}},
		{in: "vgpu.run=prog vgpu.args=", want: config{Run: "prog"}},
		{in: "vgpu.run=prog vgpu.args=-n=5", want: config{Run: "prog", Args: []string{"-n=5"}}},
		{in: `vgpu.run=prog "vgpu.args=a b,c" quiet`, want: config{Run: "prog", Args: []string{"a b", "c"}}},
		{in: `vgpu.run=prog vgpu.args="x y"`, want: config{Run: "prog", Args: []string{"x y"}}},
		{in: "vgpu.run=a vgpu.run=b vgpu.args=1 vgpu.args=2", want: config{Run: "b", Args: []string{"2"}}},
		{in: "vgpu.run=prog vgpu.args=a,,b", want: config{Run: "prog", Args: []string{"a", "", "b"}}},
		{in: "vgpu.run=prog vgpu.klog", want: config{Run: "prog", Klog: true}},
		{in: "vgpu.run=prog vgpu.klog=0", want: config{Run: "prog"}},
		{in: "vgpu.runner=x vgpu.run=p", want: config{Run: "p"}},
		{in: "vgpu.run=p vgpu.wait=2m", want: config{Run: "p", Wait: 2 * time.Minute}},
		{in: "vgpu.run=p vgpu.wait=0", want: config{Run: "p"}},
		{in: "vgpu.run=p vgpu.wait", wantErr: true},
		{in: "vgpu.run=p vgpu.wait=-1s", wantErr: true},
		{in: "vgpu.run=p vgpu.wait=2h", wantErr: true},
		{in: "vgpu.run=p vgpu.wait=soon", wantErr: true},
		{in: "", wantErr: true},
		{in: "console=ttyS0 vgpu.args=a", wantErr: true},
		{in: "vgpu.run=", wantErr: true},
		{in: "vgpu.run=../sbin/x", wantErr: true},
		{in: "vgpu.run=/bin/x", wantErr: true},
		{in: "vgpu.run=..", wantErr: true},
		{in: "vgpu.run=p vgpu.args=" + strings.Repeat(",", maxArgs), wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseCmdline(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseCmdline(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("parseCmdline(%q) mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
}

func FuzzParseCmdline(f *testing.F) {
	f.Add("console=ttyS0 vgpu.run=vgpu-mmiobench vgpu.args=-dev,1234:11e8")
	f.Add(`vgpu.run="a b" vgpu.args="x,y z" vgpu.klog`)
	f.Add(`"`)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseCmdline(s)
		if err != nil {
			return
		}
		if c.Run == "" || strings.Contains(c.Run, "/") || len(c.Args) > maxArgs {
			t.Errorf("parseCmdline(%q) = %+v, want a plain program name and at most %d args", s, c, maxArgs)
		}
	})
}
