"""layoutc's checkpoint reader serves each tensor's regions read with `os.preadv` from the
file (layoutc/tools/checkpoints/reader.py `MappedSlice`; no memory map, so a truncated file
is a short read, never SIGBUS: issue 40). The oracle is safetensors' own reader: every
tensor and every region read equals `safe_open`'s `get_tensor` byte for byte, shape and
dtype name equal `get_slice`'s, a tensor at an offset that is not a multiple of its element
size reads right, and a file truncated after it was opened, or while a slice is read, is
LR115, never a read past the end."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from safetensors import safe_open  # noqa: E402

from layoutc.tools.checkpoints.formats import FormatError  # noqa: E402
from layoutc.tools.checkpoints.reader import Checkpoint, MappedSlice  # noqa: E402


def _tensors() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    f32 = torch.randn(5, 7, generator=gen)
    return {
        "a.f32": f32,
        "a.bf16": torch.randn(3, 9, generator=gen).to(torch.bfloat16),
        "a.f16": torch.randn(4, 6, generator=gen).to(torch.float16),
        "a.i32": torch.randint(-2**31, 2**31 - 1, (11, 3), generator=gen, dtype=torch.int32),
        "a.i64": torch.randint(-2**40, 2**40, (2, 5), generator=gen, dtype=torch.int64),
        "a.u8": torch.randint(0, 256, (7, 5), generator=gen, dtype=torch.uint8),
        "a.e4m3": (f32 * 3).to(torch.float8_e4m3fn),
        "a.e8m0": torch.randint(0, 255, (6, 4), generator=gen, dtype=torch.uint8).view(torch.float8_e8m0fnu),
        "a.bool": torch.rand(3, 3, generator=gen) > 0.5,
        "a.scalar": torch.tensor(2.5),
        "a.empty": torch.zeros(0, 4),
        "a.3d": torch.randn(2, 3, 4, generator=gen),
    }


def _folder(tmp_path: Path, tensors: dict[str, torch.Tensor]) -> Path:
    safetensors_torch.save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moe"}), encoding="utf-8")
    return tmp_path


def _bytes(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def test_views_equal_safetensors_reads(tmp_path: Path) -> None:
    folder = _folder(tmp_path, _tensors())
    with Checkpoint(str(folder)) as ckpt, safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
            got, want = ckpt.slice(name), f.get_slice(name)
            assert isinstance(got, MappedSlice), name
            assert got.get_shape() == list(want.get_shape()) and got.get_dtype() == want.get_dtype(), name
            full = got[...]
            ref = f.get_tensor(name)
            assert full.dtype == ref.dtype and full.shape == ref.shape, name
            assert _bytes(full) == _bytes(ref), name
            if ref.dim() >= 2 and ref.shape[0] > 1 and ref.shape[-1] > 1:  # a strided region
                region = (slice(1, None), slice(1, ref.shape[-1] - 1))
                assert _bytes(got[region]) == _bytes(want[region]), name


def test_a_read_is_the_files_bytes_in_its_own_buffer(tmp_path: Path) -> None:
    """Indexing reads the file's own bytes at the header's offset into a buffer of its own:
    two reads share no memory (writing to one changes neither the other nor the file)."""
    folder = _folder(tmp_path, {"w": torch.arange(64, dtype=torch.int32).reshape(8, 8)})
    raw = (folder / "model.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    with Checkpoint(str(folder)) as ckpt:
        sl = ckpt.slice("w")
        a, b = sl[2:4, 1:5], sl[2:4, 1:5]
        a.fill_(-1)
        assert b.tolist() == [[17, 18, 19, 20], [25, 26, 27, 28]]
        assert _bytes(sl[...]) == raw[8 + length: 8 + length + 256]
    assert (folder / "model.safetensors").read_bytes() == raw


@pytest.mark.parametrize("index", [(slice(1, 7), slice(2, 5)), (3,), (slice(None, None, 2), 1), (..., slice(1, 2)),
                                   (slice(0, 8), slice(0, 1))])
def test_reads_in_slabs_equal_one_read(tmp_path: Path, index: tuple[object, ...],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A region whose span is much wider than its elements is read in slabs along its first
    axis (reader.SPAN_BYTES, SPAN_FACTOR): the same values as safetensors' own read."""
    import layoutc.tools.checkpoints.reader as reader

    folder = _folder(tmp_path, {"w": torch.randn(8, 12, generator=torch.Generator().manual_seed(1))})
    with Checkpoint(str(folder)) as ckpt, safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        want = f.get_slice("w")[index]
        one = ckpt.slice("w")[index]
        monkeypatch.setattr(reader, "SPAN_BYTES", 0)
        monkeypatch.setattr(reader, "SPAN_FACTOR", 0)
        slabs = ckpt.slice("w")[index]
    assert _bytes(one) == _bytes(want) and _bytes(slabs) == _bytes(want)
    assert one.shape == want.shape == slabs.shape


def test_a_file_truncated_while_a_slice_is_read_is_lr115(tmp_path: Path) -> None:
    """The slice was taken (the size check passed), then the file shrank: the read is short,
    LR115 naming the tensor (a memory map would raise SIGBUS here)."""
    folder = _folder(tmp_path, {"a": torch.ones(64, 64), "b": torch.ones(64, 64)})
    path = folder / "model.safetensors"
    with Checkpoint(str(folder)) as ckpt:
        sl = ckpt.slice("b")
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size - 4096)
        with pytest.raises(FormatError) as err:
            sl[32:64]
        assert err.value.code == "LR115" and "'b'" in str(err.value) and "while it was read" in str(err.value)
        with pytest.raises(FormatError) as err:
            ckpt.tensor("b")
        assert err.value.code == "LR115"


def test_a_slice_read_after_close_is_refused(tmp_path: Path) -> None:
    """close() closes the descriptors; a slice kept past it must not read whatever file now has
    that descriptor number."""
    folder = _folder(tmp_path, {"w": torch.arange(16.0).reshape(4, 4)})
    with Checkpoint(str(folder)) as ckpt:
        sl = ckpt.slice("w")
    with open(folder / "config.json", "rb"), pytest.raises(ValueError, match="closed"):
        sl[0:2]


def test_an_index_other_than_ints_and_slices_is_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"w": torch.arange(16.0).reshape(4, 4)})
    with Checkpoint(str(folder)) as ckpt, pytest.raises(TypeError):
        ckpt.slice("w")[torch.tensor([0, 2])]


def _handwritten(tmp_path: Path) -> Path:
    """A valid safetensors file whose I32 tensor starts at data offset 3 (not a multiple of 4):
    save_file never writes one, the format allows it."""
    u8 = bytes(range(3))
    i32 = struct.pack("<4i", 1, -2, 3, -4)
    header = {"u": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},
              "i": {"dtype": "I32", "shape": [2, 2], "data_offsets": [3, 19]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + u8 + i32)
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    return tmp_path


def test_an_unaligned_tensor_reads_right(tmp_path: Path) -> None:
    """An I32 tensor at data offset 3: read into an aligned buffer of its own (no fallback)."""
    folder = _handwritten(tmp_path)
    with Checkpoint(str(folder)) as ckpt:
        assert isinstance(ckpt.slice("u"), MappedSlice)
        sl = ckpt.slice("i")
        assert sl[:].tolist() == [[1, -2], [3, -4]]
        assert sl[1:, 1:].tolist() == [[-4]]


def test_a_file_truncated_after_opening_is_lr115(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"a": torch.ones(64, 64), "b": torch.ones(64, 64)})
    path = folder / "model.safetensors"
    with Checkpoint(str(folder)) as ckpt:
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.truncate(size - 4096)
        with pytest.raises(FormatError) as err:
            for name in ("a", "b"):
                ckpt.slice(name)
        assert err.value.code == "LR115" and "truncated" in str(err.value)


def test_views_survive_closing_the_checkpoint(tmp_path: Path) -> None:
    """A read taken before close() stays readable (it is the read's own buffer)."""
    folder = _folder(tmp_path, {"w": torch.arange(16.0).reshape(4, 4)})
    with Checkpoint(str(folder)) as ckpt:
        view = ckpt.slice("w")[1:3]
    assert view.tolist() == [[4.0, 5.0, 6.0, 7.0], [8.0, 9.0, 10.0, 11.0]]


def _raw_file(tmp_path: Path, header: dict[str, object], data: bytes) -> Path:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + data)
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    return tmp_path


_F32 = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)


@pytest.mark.parametrize("header", [
    {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},  # two names on the same bytes
     "b": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
    {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},  # overlapping by one element
     "b": {"dtype": "F32", "shape": [3], "data_offsets": [4, 16]}},
    {"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}},  # a gap before the first tensor
    {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},  # bytes after the last tensor
], ids=["same_bytes", "overlap", "gap", "trailing"])
def test_a_header_safetensors_refuses_is_lr115(tmp_path: Path, header: dict[str, object]) -> None:
    """Views are served at the header's offsets without safetensors' own header checks, so the
    reader must refuse what safetensors refuses (the oracle) instead of serving aliased bytes."""
    folder = _raw_file(tmp_path, header, _F32)
    with pytest.raises(Exception, match=r"invalid offset|not fully covered"):
        safe_open(str(folder / "model.safetensors"), framework="pt")
    with pytest.raises(FormatError) as err:
        Checkpoint(str(folder))
    assert err.value.code == "LR115" and "corrupt safetensors header" in str(err.value)


def test_zero_size_tensors_and_a_tensor_ending_at_eof_are_read(tmp_path: Path) -> None:
    """Zero-size tensors share an offset with their neighbours and the last tensor ends at the
    last byte of the file: valid for safetensors, and read identically."""
    header = {"z0": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]},
              "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "z1": {"dtype": "BF16", "shape": [2, 0], "data_offsets": [16, 16]}}
    folder = _raw_file(tmp_path, header, _F32)
    with Checkpoint(str(folder)) as ckpt, safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        for name in header:
            got, ref = ckpt.slice(name)[...], f.get_tensor(name)
            assert got.shape == ref.shape and got.dtype == ref.dtype and torch.equal(got, ref), name


def test_a_file_truncated_after_it_was_mapped_is_lr115(tmp_path: Path) -> None:
    """The file is mapped by the first slice; truncated afterwards, the next slice past the new end
    is LR115 (checked against the file's size now, not the map's), never a view whose first read
    faults (SIGBUS). Nothing past the end is read here."""
    folder = _folder(tmp_path, {"a": torch.ones(64, 64), "b": torch.ones(64, 64)})
    path = folder / "model.safetensors"
    with Checkpoint(str(folder)) as ckpt:
        assert isinstance(ckpt.slice("a"), MappedSlice)  # maps the file
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size - 4096)
        with pytest.raises(FormatError) as err:
            ckpt.slice("b")
        assert err.value.code == "LR115" and "truncated" in str(err.value)


@pytest.mark.parametrize("shape", [[0, 2**40, 2**40], [2**62, 0], [0, 2**63], [0, 2**64 - 1], [2**31, 2**31, 0]])
def test_a_zero_size_tensor_with_huge_dims_is_served_as_safetensors_does(tmp_path: Path, shape: list[int]) -> None:
    """A zero-size tensor may name any dims (no bytes): the reader serves it with safetensors'
    shape (a view where torch can size it, safetensors' slice where a dim passes int64), never
    a raw TypeError from an int64 stride overflow."""
    folder = _raw_file(tmp_path, {"a": {"dtype": "BF16", "shape": shape, "data_offsets": [0, 0]}}, b"")
    with Checkpoint(str(folder)) as ckpt, safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        sl = ckpt.slice("a")
        assert sl.get_shape() == list(f.get_slice("a").get_shape()) == shape
        assert isinstance(sl, MappedSlice) == all(n < 2**63 for n in shape)
        if isinstance(sl, MappedSlice):
            assert sl[...].numel() == 0 and list(sl[...].shape) == shape
