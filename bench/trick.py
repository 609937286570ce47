#!/usr/bin/env python3
"""Trick-play figures for issue 13, measured as a plain-UDP RTSP client:

  1. Scale change to the first trick-play packet on the wire: a session
     plays at 1x for a second, then PLAY with Scale: 4 and a Range; the
     time from sending that PLAY to the first packet carrying the sequence
     number its RTP-Info names (repeated --trials times; p50 / p99 / max).
  2. Position after --seconds at Scale 4 from 0: the npt a PLAY at Scale 1
     without a Range resumes from (the key frame the trick stream stands
     at), next to 4 x seconds.
  3. The trick stream's bit rate over those seconds next to the title's
     (file size over duration).

With --cold (root), the page cache is dropped before every trial and
trials jump to places spread over the title, so each Scale change reads
from the disk; --throttle MAJ:MIN caps that disk's reads at 120 MB/s and
300 IOPS for the run (cgroup v1 blkio, as `fjord bench storage` does) and
lifts the cap at the end.

Usage: bench/trick.py rtsp://HOST:PORT/TITLE FILE [--trials N] [--seconds S]
       [--cold] [--throttle MAJ:MIN]
"""
import argparse
import os
import re
import socket
import statistics
import time


class Rtsp:
    def __init__(self, url):
        m = re.match(r"rtsp://([^:/]+):(\d+)/", url)
        self.url, self.cseq, self.session = url, 0, None
        self.sock = socket.create_connection((m.group(1), int(m.group(2))))
        self.buf = b""

    def request(self, method, url=None, headers=()):
        self.cseq += 1
        lines = [f"{method} {url or self.url} RTSP/1.0", f"CSeq: {self.cseq}"]
        if self.session:
            lines.append(f"Session: {self.session}")
        lines += [f"{k}: {v}" for k, v in headers]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        text = head.decode()
        n = int(re.search(r"(?im)^content-length:\s*(\d+)", text).group(1)) if "ontent-" in text else 0
        while len(self.buf) < n:
            self.buf += self.sock.recv(65536)
        body, self.buf = self.buf[:n], self.buf[n:]
        hdr = {k.lower(): v.strip() for k, v in re.findall(r"(?m)^([^:\r\n]+):(.*)$", text)}
        return int(text.split()[1]), hdr, body.decode(errors="replace")

    def open(self):
        _, _, sdp = self.request("DESCRIBE", headers=[("Accept", "application/sdp")])
        control = re.findall(r"a=control:(\S+)", sdp)[-1]
        track = control if control.startswith("rtsp:") else self.url.rstrip("/") + "/" + control
        rtp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rtp.bind(("0.0.0.0", 0))
        port = rtp.getsockname()[1]
        status, hdr, _ = self.request(
            "SETUP", track, [("Transport", f"RTP/AVP;unicast;client_port={port}-{port + 1}")])
        assert status == 200, status
        self.session = hdr["session"].split(";")[0]
        return rtp


def rtp_seq(packet):
    return int.from_bytes(packet[2:4], "big")


def drain(rtp):
    rtp.setblocking(False)
    try:
        while True:
            rtp.recv(2048)
    except BlockingIOError:
        pass
    rtp.setblocking(True)


def drop_page_cache():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def scale_change(url, trials, cold, duration):
    waits = []
    for k in range(trials):
        c = Rtsp(url)
        rtp = c.open()
        c.request("PLAY", headers=[("Range", "npt=0-")])
        time.sleep(1.0)
        drain(rtp)
        at = (5 + k * 37) % int(duration - 10) if cold else 5 + k % 20
        if cold:
            drop_page_cache()
        sent = time.monotonic()
        status, hdr, _ = c.request("PLAY", headers=[("Scale", "4"), ("Range", f"npt={at}-")])
        assert status == 200 and hdr.get("scale") == "4", (status, hdr)
        want = int(re.search(r"seq=(\d+)", hdr["rtp-info"]).group(1))
        rtp.settimeout(2)
        while rtp_seq(rtp.recv(2048)) != want:
            pass
        waits.append((time.monotonic() - sent) * 1e3)
        c.request("TEARDOWN")
    waits.sort()
    p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))]
    where = "page cache dropped before each" if cold else "title cached"
    print(f"scale change to first trick packet ({where}): {trials} trials, p50 {statistics.median(waits):.1f} ms, "
          f"p99 {p99:.1f} ms, max {waits[-1]:.1f} ms")


def duration_of(url):
    c = Rtsp(url)
    _, _, sdp = c.request("DESCRIBE", headers=[("Accept", "application/sdp")])
    return float(re.search(r"a=range:npt=0-([\d.]+)", sdp).group(1))


def position_and_rate(url, path, seconds, cold, duration):
    if cold:
        drop_page_cache()
    c = Rtsp(url)
    rtp = c.open()
    status, hdr, _ = c.request("PLAY", headers=[("Scale", "4"), ("Range", "npt=0-")])
    assert status == 200, status
    rtp.settimeout(0.5)
    received, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            received += len(rtp.recv(2048))
        except socket.timeout:
            pass
    status, hdr, _ = c.request("PLAY", headers=[("Scale", "1")])
    position = float(re.match(r"npt=([\d.]+)", hdr["range"]).group(1))
    c.request("TEARDOWN")
    title_bps = os.path.getsize(path) * 8 / duration
    trick_bps = received * 8 / seconds
    print(f"after {seconds} s at 4x: position {position:.1f} s (4 x {seconds} = {4 * seconds} s)")
    print(f"trick stream {trick_bps / 1e6:.2f} Mbit/s (RTP payload and headers), "
          f"title {title_bps / 1e6:.2f} Mbit/s: {trick_bps / title_bps:.2f}x")


if __name__ == "__main__":
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("url")
    a.add_argument("file", help="the title's media file (for its bit rate)")
    a.add_argument("--trials", type=int, default=100)
    a.add_argument("--seconds", type=float, default=60)
    a.add_argument("--cold", action="store_true", help="drop the page cache before each trial")
    a.add_argument("--throttle", metavar="MAJ:MIN", help="cap this disk's reads during the run")
    args = a.parse_args()
    limits = [("blkio.throttle.read_bps_device", 120_000_000), ("blkio.throttle.read_iops_device", 300)]
    if args.throttle:
        for name, value in limits:
            with open(f"/sys/fs/cgroup/blkio/{name}", "w") as f:
                f.write(f"{args.throttle} {value}\n")
    try:
        duration = duration_of(args.url)
        scale_change(args.url, args.trials, args.cold, duration)
        position_and_rate(args.url, args.file, args.seconds, args.cold, duration)
    finally:
        if args.throttle:
            for name, _ in limits:
                with open(f"/sys/fs/cgroup/blkio/{name}", "w") as f:
                    f.write(f"{args.throttle} 0\n")
