"""TLS clients for the HTTPS tests (Python's ssl module: OpenSSL), each
printing one JSON line.

  resume PORT PATH   two connections, the second resuming the first's
                     session; the MD5 of each body
  stall PORT PATH    after the handshake, half of a request's record,
                     then nothing: when the server closed
  garbage PORT PATH  after the handshake, a request's record with one
                     byte flipped: when and how the server closed
  halfclose PORT PATH  the handshake's last flight and the request in one
                     write, then a half-close: the answer's status and MD5
"""

import hashlib
import json
import socket
import ssl
import sys
import time


def context():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def request(path):
    return f"GET /{path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode()


def body_sha(sock):
    data = b""
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), hashlib.md5(body).hexdigest()


def resume(port, path):
    ctx, session, out = context(), None, []
    for _ in range(2):
        raw = socket.create_connection(("127.0.0.1", port), timeout=20)
        with ctx.wrap_socket(raw, session=session) as s:
            s.sendall(request(path))
            status, sha = body_sha(s)
            out.append({"status": status, "md5": sha, "reused": s.session_reused,
                        "version": s.version(), "cipher": s.cipher()[0]})
            session = s.session
    return out


def handshaken(port, last_flight=True):
    """A socket and the TLS object over memory buffers that did its
    handshake (its last flight left in `outg` unless `last_flight`), and
    its buffers."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context().wrap_bio(inc, outg)
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            raw.sendall(outg.read())
            data = raw.recv(1 << 16)
            if not data:
                raise SystemExit("closed during the handshake")
            inc.write(data)
    if last_flight:
        raw.sendall(outg.read())
    return raw, tls, inc, outg


def closed_after(raw):
    """Seconds until the server closed `raw` (its bytes before, discarded)."""
    t0 = time.monotonic()
    try:
        while raw.recv(1 << 16):
            pass
    except (ConnectionResetError, socket.timeout) as e:
        return time.monotonic() - t0, type(e).__name__
    return time.monotonic() - t0, "closed"


def misbehave(port, path, how):
    raw, tls, _, outg = handshaken(port)
    tls.write(request(path))
    record = bytearray(outg.read())
    if how == "stall":
        raw.sendall(record[: len(record) // 2])
    else:
        record[-3] ^= 0x55
        raw.sendall(record)
    after, how_closed = closed_after(raw)
    return {"closed_after_s": round(after, 2), "how": how_closed}


def half_closed(port, path):
    raw, tls, inc, outg = handshaken(port, last_flight=False)
    tls.write(request(path))
    raw.sendall(outg.read())
    raw.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        try:
            got = tls.read(1 << 16)
            if not got:  # the server's close_notify
                break
            data += got
        except ssl.SSLWantReadError:
            got = raw.recv(1 << 16)
            if not got:
                break
            inc.write(got)
        except ssl.SSLZeroReturnError:
            break
    head, _, body = data.partition(b"\r\n\r\n")
    return {"status": head.split(b"\r\n")[0].decode(), "md5": hashlib.md5(body).hexdigest()}


def main():
    mode, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "resume":
        out = resume(port, path)
    elif mode == "halfclose":
        out = half_closed(port, path)
    else:
        out = misbehave(port, path, mode)
    print(json.dumps(out))


main()
