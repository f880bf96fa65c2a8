#!/usr/bin/env python3
"""forge_checkpoint.py IN OUT FIELD=VALUE... (or IN --get FIELD to print one): a damaged checkpoint WITH A VALID CHECKSUM, for tests of
the loader's header validation. Sets header fields (step, batch, grad_accum,
total_steps, num_params, the model's V..F), then cuts or extends the params/m/v arrays to
num_params floats each (unless body=keep is given), sets the first float of the params, m or v array
(params0=, m0=, v0=: a float, e.g. nan or -1), and rewrites the XXH3-64 checksum (through Debian's libxxhash).
The layout mirrors src/train/checkpoint.cpp (format 03); the script refuses any other magic."""
import ctypes
import struct
import sys

MAGIC = b"XTCKPT03"
# (name, struct code) in file order after the u32 header length, as put_meta() writes them
FIELDS = [(n, "i") for n in ("V", "maxT", "C", "L", "NH", "KVH", "HS", "F",
                             "step", "batch", "grad_accum", "total_steps")] + \
         [(n, "f") for n in ("dropout", "lr", "min_lr_frac", "weight_decay", "grad_clip")] + [("warmup", "i")] + \
         [(n, "Q") for n in ("seed", "tokenizer_fingerprint", "data_hash", "num_params", "n_train")]


def main():
    if len(sys.argv) == 4 and sys.argv[2] == "--get":  # forge_checkpoint.py IN --get FIELD: print it
        src, dst, edits = sys.argv[1], None, []
    else:
        src, dst, *edits = sys.argv[1:]
    buf = open(src, "rb").read()
    assert buf[:8] == MAGIC, f"{src}: not a format-03 checkpoint"
    fmt = "<" + "".join(code for _, code in FIELDS)
    start = 12
    meta = dict(zip([n for n, _ in FIELDS], struct.unpack_from(fmt, buf, start)))
    if dst is None:
        print(meta[sys.argv[3]])
        return
    body = buf[start + struct.calcsize(fmt):-8]
    n_old = meta["num_params"]
    arrays = [body[k * 4 * n_old:(k + 1) * 4 * n_old] for k in range(3)]
    keep_body = "body=keep" in edits
    first = {}  # array index -> its new first float
    for e in edits:
        name, value = e.split("=")
        if name in ("params0", "m0", "v0"):
            first[("params0", "m0", "v0").index(name)] = float(value)
        elif name != "body":
            meta[name] = int(value)
    n = meta["num_params"]
    if not keep_body:
        arrays = [(a + b"\0" * 4 * n)[:4 * n] for a in arrays]
    for k, value in first.items():
        arrays[k] = struct.pack("<f", value) + arrays[k][4:]
    out = buf[:start] + struct.pack(fmt, *[meta[name] for name, _ in FIELDS]) + b"".join(arrays)
    xxh = ctypes.CDLL("libxxhash.so.0")
    xxh.XXH3_64bits.restype = ctypes.c_uint64
    xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    out += struct.pack("<Q", xxh.XXH3_64bits(out, len(out)))
    open(dst, "wb").write(out)


if __name__ == "__main__":
    main()
