#!/usr/bin/env bash
# Runs a command inside Debian's own kernel (the distribution's
# linux-image-amd64, which has kTLS: CONFIG_TLS=m) booted in QEMU, on this
# machine's filesystem seen read-only under a RAM overlay, and exits with
# the command's status. For what the host kernel lacks (kTLS on the test
# machines, whose kernels have no `tls` ULP).
#
#   tests/vm/run.sh [--timeout SECONDS] COMMAND [ARGS...]
#
# The command runs as root in the current directory with the current
# environment, `lo` up and the `tls` module loaded; what it writes is lost
# when the VM powers off. The kernel and busybox-static are fetched once with
# `apt-get download` and unpacked into FJORD_VM_CACHE (~/.cache/fjord/vm),
# never installed on the host (their hooks would touch its boot setup);
# qemu-system-x86 is installed when missing. KVM is used where it works,
# else QEMU's TCG. A script, not Rust: it is apt-get, dpkg-deb, cpio and
# qemu in a row.
set -euo pipefail

timeout_s=${FJORD_VM_TIMEOUT:-900}
if [ "${1-}" = --timeout ]; then
  timeout_s=$2
  shift 2
fi
[ $# -gt 0 ] || { sed -n '2,17s/^# \{0,1\}//p' "$0" >&2; exit 2; }
cache=${FJORD_VM_CACHE:-$HOME/.cache/fjord/vm}
here=$(cd "$(dirname "$0")" && pwd)
sudo=$([ "$(id -u)" = 0 ] || echo sudo)

if ! command -v qemu-system-x86_64 >/dev/null; then
  $sudo apt-get update -q
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends qemu-system-x86
fi

# The kernel package linux-image-amd64 names (linux-image-6.1.0-…-amd64 on
# bookworm) and busybox-static, unpacked side by side, with modules.dep.
kernel_package() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n 1
}
pkg=$(kernel_package)
if [ -z "$pkg" ]; then
  $sudo apt-get update -q
  pkg=$(kernel_package)
fi
[ -n "$pkg" ] || { echo "vm: apt knows no linux-image-amd64" >&2; exit 1; }
kdir=$cache/$pkg
if ! [ -e "$kdir/.unpacked" ]; then
  echo "vm: fetching $pkg and busybox-static into $kdir" >&2
  debs=$(mktemp -d)
  (cd "$debs" && apt-get download -q -o APT::Sandbox::User=root "$pkg" busybox-static)
  rm -rf "$kdir" && mkdir -p "$kdir"
  for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$kdir"; done
  rm -rf "$debs"
  ver=$(ls "$kdir/lib/modules")
  grep -q '^CONFIG_TLS=[ym]' "$kdir/boot/config-$ver" ||
    { echo "vm: $pkg has no kTLS (CONFIG_TLS)" >&2; exit 1; }
  "$kdir/bin/busybox" depmod -b "$kdir" "$ver"
  touch "$kdir/.unpacked"
fi
ver=$(ls "$kdir/lib/modules")

# The initramfs: busybox, the modules that mount the host's root (virtio
# PCI, 9p, overlay) with what they depend on, and init.sh.
initrd=$cache/initrd-$ver.gz
if ! [ -e "$initrd" ] || [ "$here/init.sh" -nt "$initrd" ] || [ "$0" -nt "$initrd" ]; then
  ird=$(mktemp -d)
  mkdir -p "$ird/bin" "$ird/lib/modules/$ver"
  cp "$kdir/bin/busybox" "$ird/bin/"
  cp "$here/init.sh" "$ird/init"
  cp "$kdir/lib/modules/$ver"/modules.* "$ird/lib/modules/$ver/"
  dep=$kdir/lib/modules/$ver/modules.dep
  for m in virtio_pci 9pnet_virtio 9p overlay; do
    line=$(grep -E "/$m\.ko(\.[a-z]+)?:" "$dep")
    for ko in ${line/:/}; do
      mkdir -p "$ird/lib/modules/$ver/$(dirname "$ko")"
      cp "$kdir/lib/modules/$ver/$ko" "$ird/lib/modules/$ver/$ko"
    done
  done
  (cd "$ird" && find . | "$kdir/bin/busybox" cpio -o -H newc 2>/dev/null) | gzip -1 >"$initrd.tmp"
  mv "$initrd.tmp" "$initrd"
  rm -rf "$ird"
fi

# The run's directory, shared read-write: the command as a script (its
# directory and environment kept), and where the VM writes its status.
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
{
  export -p | grep -v -E '^declare -x (OLDPWD|PWD|SHLVL|_)='
  printf 'cd %q\nexec' "$PWD"
  printf ' %q' "$@"
  printf '\n'
} >"$run/cmd.sh"

# KVM where the CPU shows hardware virtualisation (on the test machines
# /dev/kvm exists without it, and a KVM guest there never runs), else TCG
# on every vCPU thread; FJORD_VM_ACCEL overrides.
accel=tcg,thread=multi cpu=max
if grep -q -w -E 'vmx|svm' /proc/cpuinfo && [ -w /dev/kvm ]; then
  accel=kvm cpu=host
fi
accel=${FJORD_VM_ACCEL:-$accel}
echo "vm: booting $ver with $accel (timeout ${timeout_s} s)" >&2

t0=$(date +%s%N)
# The serial console carries the kernel's warnings and the command's
# output; carriage returns dropped.
set +e
timeout --kill-after=10 "$timeout_s" nice qemu-system-x86_64 \
  -accel "$accel" -machine q35 -cpu "$cpu" -smp 2 -m 2G \
  -nodefaults -no-user-config -display none -no-reboot -monitor none -serial stdio \
  -kernel "$kdir/boot/vmlinuz-$ver" -initrd "$initrd" \
  -append "console=ttyS0 loglevel=4 panic=-1 fjord.modules=$kdir/lib/modules fjord.run=$run" \
  -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap \
  -virtfs local,path="$run",mount_tag=run,security_model=none,multidevs=remap \
  </dev/null | tr -d '\r'
qemu=${PIPESTATUS[0]}
set -e
took=$(( ($(date +%s%N) - t0) / 1000000000 ))
if ! [ -e "$run/status" ]; then
  echo "vm: no status from the VM (qemu exited $qemu after ${took} s)" >&2
  exit 125
fi
echo "vm: $accel, booted in $(cat "$run/booted") s, $(cat "$run/ran") s for the command, ${took} s in all; status $(cat "$run/status")" >&2
exit "$(cat "$run/status")"
