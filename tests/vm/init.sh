#!/bin/busybox sh
# PID 1 of tests/vm/run.sh's VM. In the initramfs: mounts the host's root
# (9p, read-only) under a RAM overlay and switches to it. There, as
# `init.sh stage2`: a fresh /proc, /sys, /dev, /tmp and /run; the kernel's
# modules (from the host's cache, so the kernel's own module requests, the
# ciphers kTLS asks for, are met); `lo` up and `tls` loaded; then the run's
# command, its status written back to the host; then power off.
b=/bin/busybox
arg() { $b sed -n "s/.*\\<$1=\\([^ ]*\\).*/\\1/p" /proc/cmdline; }
off() {
  $b sync
  $b poweroff -f
}

if [ "$1" != stage2 ]; then
  $b mkdir -p /proc /sys /dev
  $b mount -t proc proc /proc
  $b mount -t sysfs sys /sys
  $b mount -t devtmpfs dev /dev
  for m in virtio_pci 9pnet_virtio 9p overlay; do $b modprobe $m || off; done
  $b mkdir -p /host /rw /new
  p9=trans=virtio,version=9p2000.L,msize=512000
  $b mount -t 9p -o ro,$p9,cache=loose host /host || off
  $b mount -t tmpfs -o mode=755 rw /rw
  $b mkdir -p /rw/upper /rw/work
  $b mount -t overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work root /new || off
  for d in proc sys dev; do $b mount --move /$d /new/$d; done
  $b mount -t tmpfs -o mode=755 run /new/run
  $b mkdir -p /new/run/fjord-vm
  $b cp /bin/busybox /init /new/run/fjord-vm/
  exec $b switch_root /new /run/fjord-vm/busybox sh /run/fjord-vm/init stage2
fi

b=/run/fjord-vm/busybox
# The modules first: the cache may be under /tmp, which a tmpfs covers next.
ver=$($b uname -r)
$b mkdir -p /lib/modules/$ver
$b mount --bind "$(arg fjord.modules)/$ver" /lib/modules/$ver || off
$b ln -s busybox /run/fjord-vm/modprobe
echo /run/fjord-vm/modprobe >/proc/sys/kernel/modprobe
$b mount -t tmpfs -o mode=1777 tmp /tmp
$b mkdir -p /dev/pts /dev/shm
$b mount -t devpts devpts /dev/pts
$b mount -t tmpfs -o mode=1777 shm /dev/shm
run=$(arg fjord.run)
$b mkdir -p "$run"
$b mount -t 9p -o trans=virtio,version=9p2000.L run "$run" || off
$b ip link set lo up
$b hostname fjord-vm
# Without kTLS the tests would pass on the user-space path: no status, a
# failed run.
$b modprobe tls || off
read -r up _ </proc/uptime
echo "$up" >"$run/booted"
/bin/bash "$run/cmd.sh" </dev/null
status=$?
read -r end _ </proc/uptime
$b awk "BEGIN { print $end - $up }" >"$run/ran"
echo $status >"$run/status"
off
