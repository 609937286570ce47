#!/usr/bin/env python3
"""Server CPU spent on clients that PLAY over TCP (interleaved) and never
read again (issue 17: "a stalled client costs nothing").

Starts `fjord serve` on MEDIA with a stall timeout longer than the run,
opens N such clients (receive buffer 4 KiB, so they fill at once) on
TITLE, waits for their connections to fill, then samples the server's
CPU time (/proc/PID/stat utime + stime) for SECONDS. Prints one markdown
table row. Bounded: every process it starts is killed at the end.
"""
import argparse, os, re, signal, socket, subprocess, sys, tempfile, time

def rtsp(sock, text):
    sock.sendall(text.encode())
    got = b""
    while not got.endswith(b"\r\n\r\n"):
        b = sock.recv(1)
        if not b:
            sys.exit("server closed the connection")
        got += b
    return got.decode(errors="replace")

def stalled_client(port, title):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    desc = rtsp(s, f"DESCRIBE rtsp://127.0.0.1:{port}/{title} RTSP/1.0\r\nCSeq: 1\r\n\r\n")
    n = int(re.search(r"Content-Length: (\d+)", desc).group(1))
    sdp = b""
    while len(sdp) < n:
        sdp += s.recv(n - len(sdp))
    control = re.search(rb"a=control:(\S+)", sdp.split(b"m=", 1)[1]).group(1).decode()
    track = control if control.startswith("rtsp:") else f"rtsp://127.0.0.1:{port}/{title}/{control}"
    head = rtsp(s, f"SETUP {track} RTSP/1.0\r\nCSeq: 2\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n")
    session = re.search(r"Session: ([^;\r]+)", head).group(1)
    head = rtsp(s, f"PLAY rtsp://127.0.0.1:{port}/{title}/ RTSP/1.0\r\nCSeq: 3\r\nSession: {session}\r\n\r\n")
    assert head.startswith("RTSP/1.0 200"), head
    return s

def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

def main():
    a = argparse.ArgumentParser(description=__doc__)
    a.add_argument("--fjord", default="target/release/fjord")
    a.add_argument("--media", required=True)
    a.add_argument("--title", required=True)
    a.add_argument("--clients", type=int, default=100)
    a.add_argument("--seconds", type=float, default=20)
    a.add_argument("--fill-seconds", type=float, default=8)
    a.add_argument("--port", type=int, default=18654)
    a.add_argument("--before-stall-timeout", action="store_true",
                   help="the server predates stall_timeout_s: leave it out of the config")
    o = a.parse_args()
    cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    if not o.before_stall_timeout:
        cfg.write(f"stall_timeout_s = {int(o.fill_seconds + o.seconds + 30)}\n")
    cfg.write("session_timeout_s = 600\n")
    cfg.close()
    server = subprocess.Popen([o.fjord, "serve", "--config", cfg.name, "--root", o.media,
                               "--port", str(o.port), "--bind", "127.0.0.1", "--admin-bind", ""],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        clients = [stalled_client(o.port, o.title) for _ in range(o.clients)]
        time.sleep(o.fill_seconds)
        c0, t0 = cpu_s(server.pid), time.time()
        time.sleep(o.seconds)
        c1, t1 = cpu_s(server.pid), time.time()
        share = (c1 - c0) / (t1 - t0) * 100
        per100 = f"{share / o.clients * 100:.2f} %" if o.clients else "-"
        print(f"| {o.clients} | {o.seconds:.0f} s | {c1 - c0:.2f} CPU-s | {share:.2f} % of a core |"
              f" {per100} |")
        for c in clients:
            c.close()
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait()
        os.unlink(cfg.name)

if __name__ == "__main__":
    main()
