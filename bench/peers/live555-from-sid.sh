#!/bin/bash
# live555MediaServer on Debian bookworm, which has no livemedia-utils: takes
# the binary packages from Debian sid (apt-get download with a private
# source list; the system's apt configuration is not touched), unpacks them
# under /opt/live555 and puts wrappers on the PATH as
# /usr/local/bin/live555MediaServer and /usr/local/bin/openRTSP (the
# trick-play tests' client).
#
# sid's build wants glibc 2.38 for two symbols only (__isoc23_strtol,
# __isoc23_sscanf, C23's strtol/sscanf that also take 0b prefixes); the
# wrapper preloads isoc23.c, which maps them to the C99 functions, and
# weakver.py marks that version need weak so bookworm's glibc 2.36 loads
# the libraries. Used for the measurements in bench/results/peers/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=${PREFIX:-/opt/live555}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/sid.sources" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
mkdir -p "$work/lists/partial" "$work/cache"
apt_opts=(-o Dir::Etc::sourcelist="$work/sid.sources" -o Dir::Etc::sourceparts=/nonexistent
  -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache")
apt-get "${apt_opts[@]}" update -qq
mkdir -p "$work/debs" && cd "$work/debs"
pkgs=(livemedia-utils)
for dep in $(apt-cache "${apt_opts[@]}" depends livemedia-utils | awk '/Depends: lib(livemedia|groupsock|usageenvironment|basicusageenvironment)/ {print $2}'); do
  pkgs+=("$dep")
done
apt-get "${apt_opts[@]}" download "${pkgs[@]}" 2>&1 | grep -v unsandboxed || true
mkdir -p "$prefix"
for f in *.deb; do dpkg -x "$f" "$prefix"; done
python3 "$here/weakver.py" "$prefix"/usr/bin/live555MediaServer "$prefix"/usr/bin/openRTSP "$prefix"/usr/lib/x86_64-linux-gnu/*.so.*.*
gcc -O2 -shared -fPIC -o "$prefix/libisoc23.so" "$here/isoc23.c"
for tool in live555MediaServer openRTSP; do
  cat > "/usr/local/bin/$tool" <<WRAP
#!/bin/sh
# $tool from Debian sid's livemedia-utils, unpacked in $prefix
# by bench/peers/live555-from-sid.sh.
export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu
export LD_PRELOAD=$prefix/libisoc23.so
exec $prefix/usr/bin/$tool "\$@"
WRAP
  chmod +x "/usr/local/bin/$tool"
done
echo "installed /usr/local/bin/live555MediaServer and openRTSP ($(ls "$work/debs" | grep livemedia-utils))"
