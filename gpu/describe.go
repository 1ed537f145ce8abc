package gpu

import "fmt"

// Describe returns a one-line summary of a device for logs and the CLI, e.g.
// "#1 pthread-skylake-avx512 (Portable Computing Language): 2 compute units,
// 5.8 GiB memory, 2.0 GiB max allocation".
func Describe(i Info) string {
	return fmt.Sprintf("#%d %s (%s): %d compute units, %s memory, %s max allocation",
		i.Index, i.Name, i.Platform, i.ComputeUnits, bytesString(i.GlobalMemBytes), bytesString(i.MaxAllocBytes))
}

// bytesString formats n in binary units with one decimal.
func bytesString(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
