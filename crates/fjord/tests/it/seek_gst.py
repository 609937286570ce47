"""GStreamer's rtspsrc seeking mid-stream as a player does
(`seek_simple`, flushing, to a key unit): plays, seeks to each of SEEKS
(seconds) after COUNT access units, then plays to the end. Writes every
H.264 access unit it receives to OUT (Annex B).
Usage: seek_gst.py URL OUT COUNT SEEK..."""
import sys
import time

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402

url, out, count, seeks = sys.argv[1], sys.argv[2], int(sys.argv[3]), [float(s) for s in sys.argv[4:]]
Gst.init(None)
pipe = Gst.parse_launch(
    f"rtspsrc location={url} latency=300 ! rtph264depay ! h264parse config-interval=-1 "
    "! video/x-h264,stream-format=byte-stream,alignment=au ! appsink name=sink sync=false"
)
sink = pipe.get_by_name("sink")
pipe.set_state(Gst.State.PLAYING)
units = open(out, "wb")
deadline = time.monotonic() + 60


def pull(n):
    """Writes up to n units (all, to the end of the stream, when n is None)."""
    while (n is None or n > 0) and time.monotonic() < deadline:
        sample = sink.emit("try-pull-sample", Gst.SECOND)
        if sample is None:
            if sink.get_property("eos"):
                return
            continue
        buf = sample.get_buffer()
        units.write(buf.extract_dup(0, buf.get_size()))
        n = None if n is None else n - 1


for at in seeks:
    pull(count)
    flags = Gst.SeekFlags.FLUSH | Gst.SeekFlags.KEY_UNIT
    if not pipe.seek_simple(Gst.Format.TIME, flags, int(at * Gst.SECOND)):
        sys.exit(f"seek to {at} refused")
pull(None)
pipe.set_state(Gst.State.NULL)
