"""GStreamer's rtspsrc asks for trick play as a player does: a flushing
key-unit seek at `rate` (the RTSP Scale) before PLAY. Writes the H.264
access units it receives to OUT (Annex B) and to OUT.seconds how long the
trick stream took from the seek to its end (BYE, then EOS).
Usage: trick_gst.py URL RATE START STOP OUT"""
import sys
import time

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402

url, rate, start, stop, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
Gst.init(None)
pipe = Gst.parse_launch(
    f"rtspsrc location={url} latency=300 ! rtph264depay ! h264parse config-interval=-1 "
    "! video/x-h264,stream-format=byte-stream,alignment=au ! appsink name=sink sync=false"
)
sink = pipe.get_by_name("sink")
# Play first (rtspsrc seeks a session it has set up), then seek.
pipe.set_state(Gst.State.PLAYING)
if sink.emit("try-pull-sample", 10 * Gst.SECOND) is None:
    sys.exit("nothing played before the seek")
flags = Gst.SeekFlags.FLUSH | Gst.SeekFlags.KEY_UNIT | Gst.SeekFlags.TRICKMODE
ok = pipe.seek(rate, Gst.Format.TIME, flags, Gst.SeekType.SET, int(start * Gst.SECOND),
               Gst.SeekType.SET, int(stop * Gst.SECOND))
if not ok:
    sys.exit("seek refused")
seeked = time.monotonic()
units = open(out, "wb")
deadline = time.monotonic() + 40
while time.monotonic() < deadline:
    sample = sink.emit("try-pull-sample", Gst.SECOND)
    if sample is None:
        if sink.get_property("eos"):
            break
        continue
    buf = sample.get_buffer()
    units.write(buf.extract_dup(0, buf.get_size()))
ended = time.monotonic()
pipe.set_state(Gst.State.NULL)
with open(out + ".seconds", "w") as f:
    f.write(f"{ended - seeked:.3f}\n")
