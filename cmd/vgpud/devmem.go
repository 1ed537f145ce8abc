package main

import (
	"fmt"
	"strconv"
	"strings"
)

// parseDeviceMemory reads the -device-memory values, one per device in
// order ("" or "0": the device's own).
func parseDeviceMemory(vals []string, devices int) ([]uint64, error) {
	if len(vals) > devices {
		return nil, fmt.Errorf("-device-memory given %d times for %d devices", len(vals), devices)
	}
	out := make([]uint64, len(vals))
	for i, v := range vals {
		n, err := parseBytes(v)
		if err != nil {
			return nil, fmt.Errorf("-device-memory %q: %w", v, err)
		}
		out[i] = n
	}
	return out, nil
}

// parseBytes reads a size: a number of bytes, or one with a KiB, MiB or
// GiB suffix.
func parseBytes(s string) (uint64, error) {
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > (1<<63)/mult {
		return 0, fmt.Errorf("want a size like 268435456, 256MiB or 4GiB")
	}
	return n * mult, nil
}
