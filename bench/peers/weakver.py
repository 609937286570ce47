# Marks the GLIBC_2.38 version needs of ELF files weak (VER_FLG_WEAK), so an
# older glibc loads them; the symbols come from libisoc23.so (LD_PRELOAD).
import struct, sys
for path in sys.argv[1:]:
    b = bytearray(open(path, 'rb').read())
    shoff, = struct.unpack_from('<Q', b, 0x28)
    shentsize, shnum = struct.unpack_from('<HH', b, 0x3a)
    secs = [struct.unpack_from('<IIQQQQIIQQ', b, shoff + i * shentsize) for i in range(shnum)]
    n = 0
    for s in secs:
        if s[1] != 0x6ffffffe: continue
        strtab = secs[s[6]][4]
        off = s[4]
        while True:
            ver, cnt, file_, aux, nxt = struct.unpack_from('<HHIII', b, off)
            a = off + aux
            for _ in range(cnt):
                h, flags, other, name, anext = struct.unpack_from('<IHHII', b, a)
                nm = b[strtab + name: b.index(0, strtab + name)].decode()
                if nm == 'GLIBC_2.38':
                    struct.pack_into('<H', b, a + 4, flags | 2); n += 1
                a += anext
            if nxt == 0: break
            off += nxt
    open(path, 'wb').write(b)
    print(path, n)
