package main

import "testing"

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"4096", 4096, true}, {"256MiB", 256 << 20, true}, {"4GiB", 4 << 30, true}, {"8KiB", 8 << 10, true},
		{"", 0, false}, {"-1", 0, false}, {"1.5GiB", 0, false}, {"12TB", 0, false}, {"99999999999GiB", 0, false},
	} {
		got, err := parseBytes(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if _, err := parseDeviceMemory([]string{"1MiB", "2MiB"}, 1); err == nil {
		t.Error("two values for one device accepted")
	}
}
