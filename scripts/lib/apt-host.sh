# lib/apt-host.sh: what the scripts that build Debian roots from the host's
# apt sources share (vmm-root.sh, xen-root.sh, deb-root.sh, guest-os.sh).
# Sourced; it defines functions and sets nothing. Callers define say and
# die first.

# ensure_debootstrap installs debootstrap on the host if it is missing.
ensure_debootstrap() {
	local lock=(-o DPkg::Lock::Timeout=600)
	command -v debootstrap >/dev/null && return 0
	say "debootstrap missing: installing it on the host"
	apt-get "${lock[@]}" install -y -qq --no-install-recommends debootstrap >/dev/null ||
		{ apt-get "${lock[@]}" update -qq && apt-get "${lock[@]}" install -y -qq --no-install-recommends debootstrap >/dev/null; } ||
		die "cannot install debootstrap"
}

# apt_entries prints "URI SUITE" for every enabled deb entry of the host's
# apt sources, one-line (*.list) and deb822 (*.sources) formats alike.
apt_entries() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -f $f ]] || continue
		# deb [options] URI SUITE COMPONENT...
		sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk '$1 == "deb" && NF >= 3 { print $2, $3 }'
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -f $f ]] || continue
		awk '
			function flush(   i, j, nu, ns, u, s) {
				if (types ~ /(^| )deb( |$)/ && enabled != "no") {
					nu = split(uris, u, " "); ns = split(suites, s, " ")
					for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print u[i], s[j]
				}
				types = uris = suites = ""; enabled = "yes"
			}
			BEGIN { enabled = "yes" }
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); next }
			{
				field = tolower($1); sub(/:$/, "", field)
				val = $0; sub(/^[^:]*:[ \t]*/, "", val)
				if (field == "types") types = val
				else if (field == "uris") uris = val
				else if (field == "suites") suites = val
				else if (field == "enabled") enabled = tolower(val)
			}
			END { flush() }
		' "$f"
	done
}

# host_codename prints the host's Debian release codename, or nothing on
# another distribution.
host_codename() {
	[[ -r /etc/os-release ]] || return 0
	# shellcheck disable=SC1091
	(. /etc/os-release && [[ ${ID:-} == debian ]] && echo "${VERSION_CODENAME:-}")
}

# host_mirror SUITE prints the URI that serves SUITE in the host's apt
# sources (the first one), or nothing.
host_mirror() {
	apt_entries | awk -v c="$1" '$2 == c { print $1; exit }'
}

# build_key SCRIPT prints the cache key of what SCRIPT builds: a hash of
# SCRIPT and of this library. A build's stamp holds it as its first line,
# so that a changed script or library rebuilds.
build_key() {
	echo "script $(cat "$(realpath "$1")" "$(realpath "${BASH_SOURCE[0]}")" | sha256sum | cut -d' ' -f1)"
}

# lock_build DIR exits the script (0: nothing to do) if the caller's
# uptodate says DIR is built, before and after it takes DIR.lock, which
# fd 9 then holds until the script exits: concurrent runs for one DIR are
# serialised, and the later one finds the earlier one's build.
lock_build() {
	uptodate && exit 0
	mkdir -p "$(dirname "$1")"
	exec 9>"$1.lock"
	flock 9
	uptodate && exit 0
	return 0
}

# fresh_dir DIR removes a previous run's half-built DIR. Its mounts lived
# in a private mount namespace and died with it; it refuses to delete
# through a mount anyway.
fresh_dir() {
	[[ -e $1 ]] || return 0
	if findmnt -rn -o TARGET | grep -qF "$1/"; then
		die "$1 has mounts under it; unmount them first"
	fi
	rm -rf "$1"
}

# logged LOG WHAT CMD...: runs CMD with its output in LOG; if it fails,
# shows LOG's tail and dies naming WHAT and LOG.
logged() {
	local log=$1 what=$2
	shift 2
	"$@" >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "$what failed (log: $log)"; }
}

# debian_sources ROOT MIRROR SECURITY SUITES writes ROOT's apt sources
# (deb822): SUITES (space-separated) from MIRROR, and trixie-security
# from SECURITY unless that is empty.
debian_sources() {
	local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	{
		printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' "$2" "$4" "$keyring"
		if [[ -n $3 ]]; then
			printf '\nTypes: deb\nURIs: %s\nSuites: trixie-security\nComponents: main\nSigned-By: %s\n' "$3" "$keyring"
		fi
	} >"$1/etc/apt/sources.list.d/debian.sources"
	rm -f "$1/etc/apt/sources.list"
}

# no_services ROOT: no init runs in ROOT, so its package scripts must not
# start services (policy-rc.d refuses them all).
no_services() {
	printf '#!/bin/sh\nexit 101\n' >"$1/usr/sbin/policy-rc.d"
	chmod 755 "$1/usr/sbin/policy-rc.d"
}

# root_apt ROOT STEPS runs STEPS (bash) between an apt-get update and an
# apt-get clean of ROOT, in a private mount namespace with /proc, /dev and
# /sys bound into ROOT only for that (nothing reaches the host's mount
# table, even if the script is killed: a trap unmounts them, and the
# namespace's end drops them regardless). In STEPS, inroot CMD... runs CMD
# in ROOT by chroot with a clean environment, and "${apt[@]}" is an
# apt-get that asks nothing and installs no recommends.
root_apt() {
	unshare -m --propagation private bash -euo pipefail -c '
		root=$1
		cleanup() { umount -R "$root/sys" "$root/dev" "$root/proc" 2>/dev/null || true; }
		trap cleanup EXIT
		mount --bind /proc "$root/proc"
		mount --rbind /dev "$root/dev"
		mount --rbind /sys "$root/sys"
		inroot() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LC_ALL=C "$@"; }
		apt=(apt-get -y -q -o Dpkg::Use-Pty=0 --no-install-recommends)
		inroot apt-get -q update
		eval "$2"
		inroot apt-get clean
	' root-apt "$1" "$2"
}

# swap_in TMP DIR renames the finished TMP to DIR: DIR is either the old
# complete build or the new one, never a partial one.
swap_in() {
	if [[ -e $2 ]]; then
		rm -rf "$2.old"
		mv -T "$2" "$2.old"
	fi
	mv -T "$1" "$2"
	rm -rf "$2.old"
}
