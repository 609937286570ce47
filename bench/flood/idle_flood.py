#!/usr/bin/env python3
"""Idle connection flood (issue 16): N TCP connections from one address
(127.0.0.2) that never send a byte, then how long a client on another
address (127.0.0.1) waits for OPTIONS and DESCRIBE answers. Starts its own
`fjord serve` on MEDIA with the default limits; bounded: everything it
starts is closed or killed at the end. Prints one markdown table row.
Usage: idle_flood.py --fjord BIN --media DIR --title NAME [--idle 3000]"""
import argparse, resource, socket, subprocess, sys, tempfile, time

def ask(port, text):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    t = time.monotonic()
    s.sendall(text.encode())
    got = b""
    while b"\r\n\r\n" not in got:
        b = s.recv(4096)
        if not b:
            break
        got += b
    ms = (time.monotonic() - t) * 1e3
    s.close()
    return got.split(b"\r\n", 1)[0].decode(), ms

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fjord", required=True)
    ap.add_argument("--media", required=True)
    ap.add_argument("--title", required=True)
    ap.add_argument("--idle", type=int, default=3000)
    ap.add_argument("--port", type=int, default=18600)
    o = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, o.idle + 1024), hard))
    server = subprocess.Popen([o.fjord, "serve", "--root", o.media, "--port", str(o.port),
                               "--bind", "0.0.0.0", "--http-port", "0", "--admin-bind", ""],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    idle = []
    try:
        time.sleep(1.5)
        for _ in range(o.idle):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.settimeout(2)
            try:
                s.connect(("127.0.0.2", o.port))
            except OSError:
                pass
            idle.append(s)
        time.sleep(1)
        url = f"rtsp://127.0.0.1:{o.port}/{o.title}"
        opt, opt_ms = ask(o.port, f"OPTIONS {url} RTSP/1.0\r\nCSeq: 1\r\n\r\n")
        desc, desc_ms = ask(o.port, f"DESCRIBE {url} RTSP/1.0\r\nCSeq: 2\r\n\r\n")
        print(f"| {o.idle} from 127.0.0.2 | {opt} in {opt_ms:.1f} ms | {desc} in {desc_ms:.1f} ms |")
    finally:
        for s in idle:
            s.close()
        server.kill()
        server.wait()

if __name__ == "__main__":
    main()
