#!/usr/bin/env python3
"""One real run of periodic broadcasting (issue 15): a server broadcasting a
title by each scheme in a network namespace of its own, its viewers in a
second one across a veth pair (198.18.0.0/24, RFC 2544; multicast never
leaves the two), first with no viewer, then with VIEWERS `fjord play
--broadcast` clients joining at random times (DROP of their packets lost on
arrival, rebuilt by the channels' FEC). Reports per scheme the server's CPU
and the bytes it sends per second in both phases (they must not grow with
viewers), and per viewer its wait to start, late packets, packets rebuilt
and whether the file it wrote equals the stored one. Then, for one scheme,
the server's CPU and bytes with 0, 1, 10, 100 and 1,000 listeners per
channel (sockets joined to every channel's group, never read: the kernel
copies every datagram to each, which is what a viewer costs a host).

The viewers' end of the veth runs NAPI in a kernel thread of its own (GRO
on, `threaded`), so the kernel's copies to the listeners are not charged to
the server's threads, as they are not when viewers sit behind a NIC
(`--no-threaded-napi` shows the difference).

    sudo bench/broadcast_real.py --fjord target/release/fjord [--viewers 20]
        [--seconds 30] [--max-start 3] [--drop 0.01]
        [--listeners 0,1,10,100,1000] [--out bench/results/broadcast-real.md]
"""

import argparse
import contextlib
import json
import os
import random
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SCHEMES = ["staggered", "pyramid", "skyscraper", "harmonic", "cautious-harmonic"]


SERVER_NS, VIEWER_NS = "fjordbc-server", "fjordbc-viewers"
SERVER_IP = "198.18.0.1"


def in_namespaces():
    """Makes the two namespaces and their veth link, re-runs this script in
    the server's, and removes them after."""
    if os.environ.get("FJORD_BROADCAST_NS") == "1":
        return
    ip = lambda *a: subprocess.run(["ip", *a], check=True)
    try:
        for ns in (SERVER_NS, VIEWER_NS):
            ip("netns", "add", ns)
        ip("link", "add", "fjbc-s", "type", "veth", "peer", "name", "fjbc-v")
        for dev, ns, addr in (("fjbc-s", SERVER_NS, SERVER_IP), ("fjbc-v", VIEWER_NS, "198.18.0.2")):
            ip("link", "set", dev, "netns", ns)
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "route", "add", "239.0.0.0/8", "dev", dev)
        if "--no-threaded-napi" not in sys.argv:
            threaded_napi()
        env = dict(os.environ, FJORD_BROADCAST_NS="1")
        code = subprocess.call(["ip", "netns", "exec", SERVER_NS, sys.executable] + sys.argv, env=env)
    finally:
        for ns in (SERVER_NS, VIEWER_NS):
            subprocess.run(["ip", "netns", "del", ns])
    sys.exit(code)


def threaded_napi():
    """NAPI for the viewers' end of the veth (GRO on), in a kernel thread.
    veth hands a datagram of a local socket to NAPI only when the sending
    end has no TSO (`veth_skb_is_eligible_for_gro`), so TSO goes off there
    (it concerns TCP only)."""
    subprocess.run(["ip", "netns", "exec", SERVER_NS, "ethtool", "-K", "fjbc-s", "tso", "off"], check=True)
    subprocess.run(["ip", "netns", "exec", VIEWER_NS, "ethtool", "-K", "fjbc-v", "gro", "on"], check=True)
    subprocess.run(["ip", "netns", "exec", VIEWER_NS, "sh", "-c", "echo 1 > /sys/class/net/fjbc-v/threaded"],
                   check=True)


def make_title(path, seconds):
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc2=size=640x360:rate=25", "-t", str(seconds), "-c:v", "libx264",
                    "-preset", "veryfast", "-g", "25", "-b:v", "1500k", "-maxrate", "1500k",
                    "-bufsize", "1500k", "-muxrate", "2000k", "-f", "mpegts", path], check=True)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def engine(admin):
    """Payload bytes the server's engine threads sent and their CPU seconds
    (its admin API)."""
    with urllib.request.urlopen(f"http://{admin}/api/v1/threads", timeout=10) as r:
        threads = json.load(r)
    return sum(t["bytes"] for t in threads), sum(t["cpu_s"] for t in threads)


def napi_threads():
    """The kernel threads running the viewers' veth NAPI."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and
            open(f"/proc/{p}/comm").read().startswith("napi/fjbc-v")]


def measure(pid, admin, seconds):
    """Over `seconds`: the server's CPU and its engine threads' (% of a
    core), the payload bytes they sent per second, and the veth NAPI
    threads' CPU (% of a core: the kernel's copies to the viewers)."""
    napi = napi_threads()
    kernel = lambda: sum(cpu_seconds(p) for p in napi)
    c0, (b0, e0), k0, t0 = cpu_seconds(pid), engine(admin), kernel(), time.monotonic()
    time.sleep(seconds)
    c1, (b1, e1), k1, t1 = cpu_seconds(pid), engine(admin), kernel(), time.monotonic()
    dt = t1 - t0
    return 100 * (c1 - c0) / dt, (b1 - b0) / dt, 100 * (e1 - e0) / dt, 100 * (k1 - k0) / dt


@contextlib.contextmanager
def broadcasting(args, scheme, root, source):
    """A server broadcasting the title by `scheme`: its pid, admin address
    and the title's URL."""
    name = f"{scheme}.ts"
    os.link(source, os.path.join(root, name)) if not os.path.exists(os.path.join(root, name)) else None
    config = os.path.join(root, f"{scheme}.toml")
    with open(config, "w") as f:
        f.write(f'[[broadcast]]\ntitle = "{name}"\nscheme = "{scheme}"\nmax_start_s = {args.max_start}\n')
    server = subprocess.Popen([args.fjord, "serve", "--config", config, "--root", root, "--bind",
                               SERVER_IP, "--port", "0", "--http-port", "0", "--admin-bind", "127.0.0.1:0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = admin = None
        for line in server.stdout:
            m = re.match(r"fjord: status page on http://(\S+)/", line)
            if m:
                admin = m.group(1)
            m = re.match(r"fjord: listening on (rtsp://\S+)/", line)
            if m:
                url = f"{m.group(1)}/{name}"
                break
        yield server.pid, admin, url
    finally:
        server.terminate()
        server.wait(timeout=10)


def run_scheme(args, scheme, root, source):
    with broadcasting(args, scheme, root, source) as (pid, admin, url):
        # Every channel has started within one title length (staggered
        # channels start D/K apart): measure the steady state.
        time.sleep(args.seconds + 2)
        idle = measure(pid, admin, args.seconds)
        viewers = start_viewers(args, url, root, scheme)
        busy = measure(pid, admin, args.seconds)
        results = [finish(v, source) for v in viewers]
        return idle, busy, results


def start_viewers(args, url, root, scheme):
    """VIEWERS clients, each starting at a random time in the first half
    of the measured window."""
    viewers = []
    starts = sorted(random.uniform(0, args.seconds / 2) for _ in range(args.viewers))
    t0 = time.monotonic()
    for k, at in enumerate(starts):
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        out = os.path.join(root, f"{scheme}-{k}.out.ts")
        p = subprocess.Popen(["ip", "netns", "exec", VIEWER_NS, args.fjord, "play", "--broadcast", url, "-o", out,
                              "--drop", str(args.drop), "--seed", str(k)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        viewers.append((p, out))
    return viewers


def finish(viewer, source):
    p, out = viewer
    text, _ = p.communicate(timeout=600)
    same = os.path.exists(out) and open(out, "rb").read() == open(source, "rb").read()
    wait = re.search(r"wait[ =]+([0-9.]+) ?ms", text)
    late = re.search(r"(underruns|late)[ =]+([0-9]+)", text)
    rebuilt = re.search(r"([0-9]+) rebuilt by FEC", text)
    return {
        "ok": p.returncode == 0 and same,
        "wait_ms": float(wait.group(1)) if wait else None,
        "late": int(late.group(2)) if late else None,
        "rebuilt": int(rebuilt.group(1)) if rebuilt else 0,
        "report": text.strip().splitlines()[-1] if text.strip() else "",
    }


def describe(url):
    """The published schedule of `url` (RTSP DESCRIBE `?broadcast`)."""
    host, port = re.match(r"rtsp://([^:/]+):(\d+)/", url).groups()
    with socket.create_connection((host, int(port)), timeout=10) as c:
        c.sendall(f"DESCRIBE {url}?broadcast RTSP/1.0\r\nCSeq: 1\r\nAccept: application/json\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += c.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = int(re.search(rb"Content-Length: *(\d+)", head, re.I).group(1))
        while len(body) < length:
            body += c.recv(65536)
    return json.loads(body)


def listen(url, per_channel):
    """Listener mode (in the viewers' namespace): `per_channel` sockets
    joined to every channel's group with a small buffer, never read, until
    stdin closes."""
    channels = describe(url)["channels"]
    need = per_channel * len(channels) + 100
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
    sockets = []
    for ch in channels:
        for _ in range(per_channel):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.setsockopt(socket.IPPROTO_IP, 49, 0)  # IP_MULTICAST_ALL off
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.bind(("0.0.0.0", ch["port"]))
            mreq = socket.inet_aton(ch["group"]) + socket.inet_aton("0.0.0.0")
            s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
            sockets.append(s)
    print("ready", len(sockets), flush=True)
    sys.stdin.read()


def run_listeners(args, root, source):
    """The server's CPU and bytes with each count of listeners per channel."""
    scheme = args.listeners_scheme
    rows = []
    with broadcasting(args, scheme, root, source) as (pid, admin, url):
        time.sleep(args.seconds + 2)
        for n in [int(x) for x in args.listeners.split(",")]:
            listener = subprocess.Popen(["ip", "netns", "exec", VIEWER_NS, sys.executable, os.path.abspath(__file__),
                                         "--listen", str(n), "--url", url],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            ready = listener.stdout.readline().split()
            time.sleep(2)
            rows.append((n, int(ready[1]) if len(ready) > 1 else 0, measure(pid, admin, args.seconds)))
            listener.stdin.close()
            listener.wait(timeout=60)
            print("listeners", rows[-1], flush=True)
    return scheme, rows


def report_listeners(scheme, rows):
    base = rows[0][2]
    lines = [
        "",
        f"## Listeners: {scheme}, the same server, more and more listeners",
        "",
        "Each listener is one socket per channel joined to the channel's group (small buffer, never read): the "
        "kernel copies every datagram to it, as it does for a viewer. Ratios are to the first row.",
        "",
        "| listeners per channel | sockets | server CPU % | ratio | engine threads CPU % | ratio | sent Mbit/s | ratio | veth NAPI thread CPU % |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, sockets, (cpu, bps, eng, napi) in rows:
        lines.append(f"| {n} | {sockets} | {cpu:.2f} | {cpu / base[0]:.2f} | {eng:.2f} | {eng / base[2]:.2f} | "
                     f"{bps * 8 / 1e6:.2f} | {bps / base[1]:.4f} | {napi:.2f} |")
    return "\n".join(lines) + "\n"


def report(args, rows):
    lines = [
        "# Periodic broadcasting, one real run",
        "",
        f"`{' '.join(['bench/broadcast_real.py'] + sys.argv[1:])}`",
        "",
        f"Title: {args.seconds} s of 640x360 H.264 in MPEG-TS at 2 Mbit/s (mux rate); each scheme with max start {args.max_start} s, "
        f"in a network namespace of its own, the viewers in a second one across a veth pair. Server CPU is "
        f"utime+stime of `fjord serve`; Mbit/s are the payload bytes its engine threads sent (its "
        f"admin API). {args.viewers} viewers "
        f"(`fjord play --broadcast -o FILE --drop {args.drop}`) start at random times in the first half of the "
        f"second window; {args.drop:.0%} of what they receive is dropped on arrival and rebuilt by FEC. NAPI of the "
        f"viewers' veth end: {'in a kernel thread of its own' if not args.no_threaded_napi else 'in the sender (softirq)'}.",
        "",
        "| scheme | server CPU %, no viewer | with viewers | engine threads CPU %, no viewer | with viewers | sent Mbit/s, no viewer | with viewers | viewers bit-exact | worst wait s | late packets | rebuilt by FEC |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scheme, (idle, busy, results) in rows:
        ok = sum(r["ok"] for r in results)
        waits = [r["wait_ms"] for r in results if r["wait_ms"] is not None]
        late = sum(r["late"] or 0 for r in results)
        lines.append(
            f"| {scheme} | {idle[0]:.2f} | {busy[0]:.2f} | {idle[2]:.2f} | {busy[2]:.2f} | "
            f"{idle[1] * 8 / 1e6:.2f} | "
            f"{busy[1] * 8 / 1e6:.2f} | {ok}/{len(results)} | "
            f"{(max(waits) / 1e3 if waits else float('nan')):.3f} | {late} | {sum(r['rebuilt'] for r in results)} |")
    lines += ["", "Viewers' last report lines:", ""]
    for scheme, (_, _, results) in rows:
        for r in results[:3]:
            lines.append(f"    {scheme}: {r['report']}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fjord", default="target/release/fjord")
    ap.add_argument("--viewers", type=int, default=20)
    ap.add_argument("--seconds", type=int, default=30, help="title length and each measured window")
    ap.add_argument("--max-start", type=float, default=3.0)
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="bench/results/broadcast-real.md")
    ap.add_argument("--drop", type=float, default=0.01, help="share of the viewers' packets dropped on arrival")
    ap.add_argument("--listeners", default="0,1,10,100,1000", help="listeners per channel, one window each")
    ap.add_argument("--listeners-scheme", default="cautious-harmonic")
    ap.add_argument("--no-threaded-napi", action="store_true")
    ap.add_argument("--listen", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.listen is not None:
        return listen(args.url, args.listen)
    args.fjord = os.path.abspath(args.fjord)
    out = os.path.abspath(args.out)
    in_namespaces()
    random.seed(args.seed)
    with tempfile.TemporaryDirectory(prefix="fjord-broadcast-") as root:
        source = os.path.join(root, "title.ts")
        make_title(source, args.seconds)
        rows = []
        for scheme in filter(None, args.schemes.split(",")):
            rows.append((scheme, run_scheme(args, scheme, root, source)))
            print(scheme, rows[-1][1][:2], sum(r["ok"] for r in rows[-1][1][2]), "ok", flush=True)
        text = report(args, rows)
        if args.listeners:
            text += report_listeners(*run_listeners(args, root, source))
    with open(out, "w") as f:
        f.write(text)
    print(text)
    print("written:", out)


if __name__ == "__main__":
    main()
