"""read_safetensors against files written byte by byte from the format's description: every dtype
momoe writes (BF16 widened exactly to float32), a scalar, the metadata, and each malformed file
refused with a message that names the file and the problem."""

import json
import struct

import numpy as np
import pytest

from momoe_torch.safetensors_numpy import read_safetensors


def write(path, tensors, metadata=None, header_extra=None, truncate=0):
    """tensors: {name: (dtype name, shape, raw bytes)}; returns the path."""
    header, body = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    header.update(header_extra or {})
    text = json.dumps(header).encode("utf-8")
    data = struct.pack("<Q", len(text)) + text + body
    path.write_bytes(data[: len(data) - truncate])
    return str(path)


def test_every_dtype_and_the_metadata(tmp_path):
    f32 = np.array([[1.5, -2.0], [0.25, 3.0e-8]], dtype="<f4")
    i32 = np.array([7, -1, 2**31 - 1], dtype="<i4")
    f64 = np.array(np.pi, dtype="<f8")  # a scalar, shape []
    # bfloat16 bits of 1.0, -2.5 and 2^-132 (a subnormal, 2^17 x 2^-149): the top 16 bits of the
    # float32.
    bf16_bits = np.array([0x3F80, 0xC020, 0x0002], dtype="<u2")
    path = write(tmp_path / "t.safetensors", {
        "a": ("F32", f32.shape, f32.tobytes()),
        "b": ("I32", i32.shape, i32.tobytes()),
        "c": ("F64", (), f64.tobytes()),
        "d": ("BF16", (3,), bf16_bits.tobytes()),
    }, metadata={"format": "pt", "step": "30"})
    tensors, metadata = read_safetensors(path)
    assert metadata == {"format": "pt", "step": "30"}
    np.testing.assert_array_equal(tensors["a"], f32)
    np.testing.assert_array_equal(tensors["b"], i32)
    assert tensors["c"].shape == () and tensors["c"] == np.pi
    assert tensors["d"].dtype == np.float32
    np.testing.assert_array_equal(tensors["d"], np.array([1.0, -2.5, 2.0**-132], dtype=np.float32))


def test_no_metadata_reads_as_empty(tmp_path):
    path = write(tmp_path / "t.safetensors", {"x": ("U8", (2,), b"\x01\x02")})
    tensors, metadata = read_safetensors(path)
    assert metadata == {}
    assert tensors["x"].tolist() == [1, 2]


@pytest.mark.parametrize("case, message", [
    ("short", "shorter than the 8-byte header length"),
    ("header", "runs past the end of the file"),
    ("offsets", "outside the data section"),
    ("count", "elements for shape"),
    ("dtype", "is not supported"),
])
def test_malformed_files_are_refused_by_name(tmp_path, case, message):
    path = tmp_path / f"{case}.safetensors"
    ok = ("F32", (2,), np.zeros(2, dtype="<f4").tobytes())
    if case == "short":
        path.write_bytes(b"\x01\x00")
    elif case == "header":
        write(path, {"x": ok}, truncate=20)  # the JSON itself is cut
    elif case == "offsets":
        write(path, {"x": ok}, header_extra={"y": {"dtype": "F32", "shape": [2],
                                                    "data_offsets": [0, 64]}})
    elif case == "count":
        write(path, {"x": ("F32", (3,), np.zeros(2, dtype="<f4").tobytes())})
    else:
        write(path, {"x": ("C64", (1,), b"\x00" * 8)})
    with pytest.raises(ValueError) as error:
        read_safetensors(str(path))
    assert message in str(error.value)
    assert str(path) in str(error.value)
