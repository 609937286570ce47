#!/bin/bash
# Server CPU per packet sent, for A/B comparisons of two fjord builds:
#   bench/engine/cpu_per_packet.sh FJORD [SESSIONS] [TITLE]
# One `fjord serve` (one engine thread, pinned to CPU 0) serves SESSIONS
# (default 100) `fjord load` sessions with plain receivers (no UDP GRO,
# pinned to CPU 1) of TITLE (default: the 4.5 Mbit/s title `fjord bench
# peers` makes, in ~/.cache/fjord/peers); the server's utime+stime and its
# /metrics counters are read 6 s and 18 s into the load. Prints CPU s,
# packets, µs of CPU per packet, packets per send call, late packets.
# Run the builds interleaved (A B A B ...) and compare within one sitting.
set -e
BIN=$(realpath "$1"); N=${2:-100}
TITLE=${3:-$HOME/.cache/fjord/peers/peers-60s.ts}
OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT
cat > "$OUT/serve.toml" <<TOML
root = "$(dirname "$TITLE")"
bind = "127.0.0.1"
port = 8601
threads = 1
capacity_pps_per_core = 1000000000000
max_sessions = 100000
max_connections = 100000
max_connections_per_address = 0
TOML
taskset -c 0 "$BIN" serve --config "$OUT/serve.toml" --http-port 0 --admin-bind 127.0.0.1:9601 >"$OUT/serve.log" 2>&1 &
SP=$!
trap 'kill $SP 2>/dev/null; rm -rf "$OUT"' EXIT
sleep 2
taskset -c 1 "$BIN" load "rtsp://127.0.0.1:8601/$(basename "$TITLE")" -n "$N" -t 22 --no-gro --json >"$OUT/load.json" 2>"$OUT/load.err" &
LP=$!
sum() { awk -v m="$1" '$1 ~ "^"m"[{ ]" {s+=$2} END{print s+0}'; }
snap() {
  local m; m=$(curl -s http://127.0.0.1:9601/metrics)
  echo "$(awk '{print $14+$15}' /proc/$SP/stat) $(sum fjord_packets_sent_total <<<"$m") $(sum fjord_datapath_send_calls_total <<<"$m") $(sum fjord_late_packets_total <<<"$m")"
}
sleep 6; A=$(snap); sleep 12; B=$(snap)
wait $LP || true
python3 - "$A" "$B" "$(getconf CLK_TCK)" <<'PY'
import sys
a = list(map(float, sys.argv[1].split())); b = list(map(float, sys.argv[2].split()))
cpu = (b[0] - a[0]) / float(sys.argv[3]); pk = b[1] - a[1]; calls = b[2] - a[2]
print(f"cpu_s={cpu:.2f} packets={pk:.0f} us_per_pkt={cpu * 1e6 / max(pk, 1):.3f} "
      f"packets_per_send={pk / max(calls, 1):.1f} late={b[3] - a[3]:.0f}")
PY
