#!/usr/bin/env bash
# fuzz-all.sh DURATION: run every Fuzz target of the module for DURATION each.
set -euo pipefail
t=${1:-20s}
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		echo "== $pkg $f"
		go test -run='^$' -fuzz="^$f\$" -fuzztime="$t" "$pkg"
	done
done
