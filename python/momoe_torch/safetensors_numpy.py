"""Reads a .safetensors file with numpy alone (no `safetensors` package; Debian does not ship it).

The format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N,
N bytes of UTF-8 JSON {"__metadata__": {...}, name: {"dtype", "shape", "data_offsets": [b, e]}},
then the tensor bytes, little-endian, offsets relative to the first byte after the header.
"""

import json
import struct

import numpy as np

_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


def read_safetensors(path):
    """Returns ({name: numpy array}, metadata dict). BF16 tensors come back as float32."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: {len(data)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} runs past the end of the file ({len(data)} bytes)")
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + n :]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        count = int(np.prod(shape)) if shape else 1
        if not 0 <= begin <= end <= len(body):
            raise ValueError(f"{path}: tensor {name}: bytes [{begin}, {end}) outside the data section")
        raw = body[begin:end]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        elif info["dtype"] in _DTYPES:
            array = np.frombuffer(raw, dtype=_DTYPES[info["dtype"]])
        else:
            raise ValueError(f"{path}: tensor {name}: dtype {info['dtype']} is not supported")
        if array.size != count:
            raise ValueError(
                f"{path}: tensor {name}: {array.size} elements for shape {list(shape)}"
            )
        tensors[name] = array.reshape(shape).copy()
    return tensors, metadata
