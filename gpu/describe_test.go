package gpu

import "testing"

func TestDescribe(t *testing.T) {
	in := Info{Index: 1, Name: "pthread-x", Platform: "PoCL", ComputeUnits: 2, GlobalMemBytes: 3 << 30, MaxAllocBytes: 1536 << 20}
	want := "#1 pthread-x (PoCL): 2 compute units, 3.0 GiB memory, 1.5 GiB max allocation"
	if got := Describe(in); got != want {
		t.Errorf("Describe(%+v) = %q, want %q", in, got, want)
	}
	for _, tc := range []struct {
		n    uint64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {5 << 20, "5.0 MiB"}, {1 << 62, "4.0 EiB"}, {^uint64(0), "16.0 EiB"}} {
		if got := bytesString(tc.n); got != tc.want {
			t.Errorf("bytesString(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
