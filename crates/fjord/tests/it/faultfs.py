#!/usr/bin/python3
"""faultfs: a read-only FUSE passthrough that fails chosen byte ranges (EIO).

    faultfs.py SOURCE MOUNTPOINT CONTROL

Mounts directory SOURCE read-only at MOUNTPOINT (in the foreground; unmount
with `umount MOUNTPOINT` or `fusermount3 -u MOUNTPOINT`). CONTROL is a JSON
file, read again whenever it changes (write it to a temporary name and
rename it over):

    {"a.ts": [[300000, 300001]], "a.ts.fjpkt": [[0, 4096], [8192, 9000]]}

A read of a file (named relative to SOURCE) whose requested bytes overlap
one of its ranges fails with EIO; every failure is logged on stderr. The key
"delay_ms" (a number, not a file) makes every read take that much longer, as
a slow or busy disk does: {"delay_ms": 50}. Reads
go through the kernel's page cache (no direct_io), in page-sized pieces or
more, so a failing byte fails its whole page, as a bad sector does. Times
are passed in nanoseconds and inode numbers as SOURCE has them, so files
look exactly as in SOURCE (fjord ties its index to the media's mtime).

Uses python3-fusepy (Debian names the module `fusepy`, PyPI `fuse`) and
libfuse2; the tests of crates/fjord/tests/it/disk_errors.rs run it.
"""

import errno
import json
import os
import sys
import threading
import time

try:
    from fusepy import FUSE, FuseOSError, Operations
except ImportError:
    from fuse import FUSE, FuseOSError, Operations


class FaultFS(Operations):
    use_ns = True

    def __init__(self, source, control):
        self.source = os.path.realpath(source)
        self.control = control
        self.mutex = threading.Lock()
        self.stamp = None
        self.ranges = {}
        self.delay = 0

    def _full(self, path):
        return os.path.join(self.source, path.lstrip("/"))

    def _bad(self, path):
        """The failing ranges of `path`, re-reading CONTROL when it changed."""
        try:
            st = os.stat(self.control)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            stamp = None
        with self.mutex:
            if stamp != self.stamp:
                self.stamp = stamp
                try:
                    with open(self.control) as f:
                        doc = json.load(f)
                    self.delay = float(doc.pop("delay_ms", 0)) / 1000
                    self.ranges = {
                        name: [(int(a), int(b)) for a, b in spans]
                        for name, spans in doc.items()
                    }
                except (OSError, ValueError, TypeError) as e:
                    print(f"faultfs: cannot read {self.control}: {e}", file=sys.stderr)
                    self.ranges = {}
                    self.delay = 0
            return self.ranges.get(path.lstrip("/"), [])

    def getattr(self, path, fh=None):
        try:
            st = os.lstat(self._full(path))
        except OSError as e:
            raise FuseOSError(e.errno)
        attrs = {
            key: getattr(st, key)
            for key in ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size")
        }
        attrs["st_atime"] = st.st_atime_ns
        attrs["st_mtime"] = st.st_mtime_ns
        attrs["st_ctime"] = st.st_ctime_ns
        return attrs

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._full(path))

    def access(self, path, amode):
        if amode & os.W_OK:
            raise FuseOSError(errno.EROFS)
        if not os.access(self._full(path), amode):
            raise FuseOSError(errno.EACCES)

    def open(self, path, flags):
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise FuseOSError(errno.EROFS)
        try:
            return os.open(self._full(path), os.O_RDONLY)
        except OSError as e:
            raise FuseOSError(e.errno)

    def read(self, path, size, offset, fh):
        end = offset + size
        bad = self._bad(path)
        if self.delay > 0:
            time.sleep(self.delay)
        for a, b in bad:
            if a < end and offset < b:
                print(
                    f"faultfs: EIO {path} bytes {offset}..{end} (failing {a}..{b})",
                    file=sys.stderr,
                    flush=True,
                )
                raise FuseOSError(errno.EIO)
        return os.pread(fh, size, offset)

    def release(self, path, fh):
        os.close(fh)
        return 0

    def statfs(self, path):
        sv = os.statvfs(self._full(path))
        return {
            key: getattr(sv, key)
            for key in (
                "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax",
            )
        }


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    source, mount, control = sys.argv[1:]
    FUSE(
        FaultFS(source, control),
        mount,
        foreground=True,
        ro=True,
        use_ino=True,
        fsname="faultfs",
    )


if __name__ == "__main__":
    main()
