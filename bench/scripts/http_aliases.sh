#!/bin/bash
# 300 alias spellings of a subdirectory title (the finding's experiment):
# open files and resident memory of the server before and after.
# Run from the repository root after `cargo build --release`.
set -e
root=$(mktemp -d); mkdir -p $root/films
cp "${1:?usage: http_aliases.sh CLIP.ts}" $root/films/movie.ts
target/release/fjord serve --root $root --port 0 --http-port 18080 --admin-bind "" >/dev/null 2>$root/log &
pid=$!; sleep 2
curl -s -o /dev/null http://127.0.0.1:18080/films/movie.ts
sleep 1
m() { echo "files=$(ls /proc/$pid/fd | wc -l) rss_kb=$(awk '/VmRSS/{print $2}' /proc/$pid/status) maps=$(wc -l < /proc/$pid/maps)"; }
echo "before: $(m)"
codes=""
for i in $(seq 1 300); do
  s=$(printf '/%.0s' $(seq 1 $((i % 7 + 2))))
  case $((i % 3)) in
    0) p="/films${s}movie.ts";;
    1) p="/films/$(printf './%.0s' $(seq 1 $((i % 5 + 1))))movie.ts/index.m3u8";;
    2) p="/films${s}movie.ts/manifest.mpd";;
  esac
  codes="$codes $(curl -s --path-as-is -o /dev/null -w '%{http_code}' http://127.0.0.1:18080$p)"
done
sleep 1
echo "after:  $(m)"
echo "statuses: $(echo $codes | tr ' ' '\n' | sort | uniq -c | tr '\n' ' ')"
kill $pid; rm -rf $root
