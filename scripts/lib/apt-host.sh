# lib/apt-host.sh: what the scripts that build Debian roots from the host's
# apt sources share (vmm-root.sh, deb-root.sh). Sourced; it defines
# functions and sets nothing. Callers define say and die first.

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
