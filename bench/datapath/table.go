package main

import (
	"fmt"
	"time"
)

// Cell formats. A missing value prints as "-".
const missing = "-"

func nsCell(ns float64) string {
	if ns <= 0 {
		return missing
	}
	return fmt.Sprintf("%.0f", ns)
}

func ratioCell(x, base float64) string {
	if x <= 0 || base <= 0 {
		return missing
	}
	return fmt.Sprintf("%.2fx", x/base)
}

func msCell(d time.Duration) string {
	if d <= 0 {
		return missing
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
