#!/usr/bin/env python3
"""Serve one MPEG-TS file over RTSP with GStreamer's rtsp-server, video on
demand: every client gets its own pipeline (media not shared), which reads
the file from the start and sends it paced by its PCR, in RTP (MP2T, RFC
2250, payload type 33).

Used by `fjord bench peers`; needs python3-gi and gir1.2-gst-rtsp-server-1.0.

    gst_rtsp_vod.py FILE [--port PORT] [--bind ADDR] [--mount /NAME]

Prints `listening on rtsp://ADDR:PORT/NAME` on stdout once it listens
(PORT 0 picks a free port).
"""

import argparse
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def launch_line(path):
    # tsparse stamps the packets from the PCR, so the sink paces them as
    # muxed; rtpmp2tpay packs 7 TS packets per RTP packet, as fjord does.
    location = path.replace("\\", "\\\\").replace('"', '\\"')
    return (
        f'( filesrc location="{location}" ! tsparse set-timestamps=true '
        "! rtpmp2tpay name=pay0 pt=33 )"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--mount", default=None)
    a = ap.parse_args()
    Gst.init(None)
    mount = a.mount or "/" + a.file.rsplit("/", 1)[-1]
    server = GstRtspServer.RTSPServer()
    server.set_address(a.bind)
    server.set_service(str(a.port))
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(launch_line(a.file))
    factory.set_shared(False)
    server.get_mount_points().add_factory(mount, factory)
    if server.attach(None) == 0:
        print(f"cannot listen on {a.bind}:{a.port}", file=sys.stderr)
        return 1
    loop = GLib.MainLoop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, loop.quit)
    print(f"listening on rtsp://{a.bind}:{server.get_bound_port()}{mount}", flush=True)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
