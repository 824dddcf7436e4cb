"""The torch side of tensor values: constructors (seeded) and .npy / .pt files.

Random constructors draw, in the order the variables first appear in the program,
from ONE torch.Generator seeded with `seed`: with seed 0, `x = randn(3)` equals
`torch.randn(3, generator=torch.Generator().manual_seed(0))` in the same dtype.
Files: numpy.load(allow_pickle=False); torch.load(weights_only=True) — never
arbitrary unpickling. Sizes are checked against the element limit (limits.py) first.
"""
from __future__ import annotations

import functools
import math
import stat
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gradflow.errors import EvalError, ValueInputError
from gradflow.limits import check_elements
from gradflow.values.coerce import check_value
from gradflow.values.specs import HINT, FileValue, TensorSpec

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}
# what torch raises for bad input besides RuntimeError (all become package errors)
TORCH_ERRORS = (RuntimeError, TypeError, ValueError, IndexError, ArithmeticError, MemoryError)


@functools.cache  # probing cuda/mps is slow: once per process (batch)
def resolve_device(device: str) -> torch.device:
    if device == "cpu":
        return _CPU  # always there (asked per evaluation: no other backend to ask about)
    available = {"cpu": True, "cuda": torch.cuda.is_available(),
                 "mps": getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()}
    if device not in available:
        raise EvalError("device", f"unknown device '{device}'", hint="use cpu, cuda or mps")
    if not available[device]:
        raise EvalError("device", f"device '{device}' is not available on this machine",
                        hint="use --device cpu (the default)")
    return torch.device(device)


_CPU = torch.device("cpu")


def resolve_dtype(dtype: str) -> torch.dtype:
    if dtype not in DTYPES:
        raise EvalError("dtype", f"unknown dtype '{dtype}'", hint="use float32 (default), float64, float16 or bfloat16")
    return DTYPES[dtype]


def scalar(value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A 0-d tensor of a Python number, as torch.tensor makes it (1e39 in float32 is inf); scalar_tensor is
    faster (once per number of every evaluation) but refuses values the dtype overflows."""
    try:
        return torch.scalar_tensor(value, dtype=dtype, device=device)
    except RuntimeError:
        return torch.tensor(value, dtype=dtype, device=device)


def to_tensor(name: str, value: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A fresh floating-point leaf from a number, nested list, numpy array or tensor."""
    if type(value) in (int, float):  # a Python number (most values) is never complex, never a sparse tensor
        return scalar(_as_float(value), dtype, device)  # an int through float64 first: torch refuses ints > 2**63
    check_value(name, value)
    if isinstance(value, list):
        value = _floats(value)
    if isinstance(value, torch.Tensor):
        _check_dense(name, "a tensor", value)
    try:
        t = torch.as_tensor(value, dtype=dtype, device=device)
    except TORCH_ERRORS as err:
        raise EvalError("bad_value", f"cannot make a tensor of the value of '{name}': {err}",
                        hint="give a number or a rectangular list of numbers") from None
    if isinstance(value, (int, float, list)):  # as_tensor already made new memory
        return t
    return t.detach().clone()


def _as_float(number: int | float) -> float:
    """An int beyond float64's range is ±inf, as `--x 1e400` is on the command line (the nan/inf warning says so)."""
    try:
        return float(number)
    except OverflowError:
        return math.inf if number > 0 else -math.inf


def _floats(value: list) -> list:
    """A nested list with every int beyond float64's range as ±inf (as_tensor refuses those ints)."""
    if all(type(v) is not int or -2**63 <= v < 2**63 for v in value):
        return [_floats(v) if isinstance(v, list) else v for v in value]
    return [_as_float(v) if type(v) is int else _floats(v) if isinstance(v, list) else v for v in value]


def materialize(values: dict[str, Any], dtype: str = "float32", seed: int = 0) -> dict[str, Any]:
    """Replace every TensorSpec / FileValue in `values` (in order) by a tensor of `dtype`."""
    if not any(isinstance(v, (TensorSpec, FileValue)) for v in values.values()):
        return values  # plain numbers and lists: nothing to build
    torch_dtype = resolve_dtype(dtype)
    gen = torch.Generator().manual_seed(int(seed))
    out = {}
    for name, v in values.items():
        if isinstance(v, TensorSpec):
            check_elements(v.numel, f"the value of '{name}', {v}, would have")  # before allocating
            try:
                v = build(v, torch_dtype, gen)
            except RuntimeError as err:  # e.g. more dimensions than torch allows
                raise ValueInputError("bad_value", f"cannot build the value of '{name}', {v}: "
                                      f"{str(err).splitlines()[0]}", hint=HINT) from None
        elif isinstance(v, FileValue):
            v = load(name, v.path)
        out[name] = v
    return out


def build(spec: TensorSpec, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    a, shape = spec.args, spec.shape
    if spec.ctor == "randn":
        return torch.randn(shape, generator=gen, dtype=dtype)
    if spec.ctor == "rand":
        return torch.rand(shape, generator=gen, dtype=dtype)
    if spec.ctor in ("zeros", "ones"):
        return (torch.zeros if spec.ctor == "zeros" else torch.ones)(shape, dtype=dtype)
    if spec.ctor == "full":
        return torch.full(shape, a[-1], dtype=dtype)
    if spec.ctor == "linspace":
        return torch.linspace(a[0], a[1], int(a[2]), dtype=dtype)
    return torch.arange(*a, dtype=dtype)


def load(name: str, path: str) -> torch.Tensor:
    p = Path(path).expanduser()
    if not p.is_file():
        what = _not_a_file(p)
        raise ValueInputError("bad_value", f"the value of '{name}': " + (f"'{path}' is {what}, not a regular file"
                              if what else f"no such file '{path}'"),
                              hint="save the value to a file (numpy.save or torch.save) and give its path after @, "
                              "relative to the current directory: --x @x.npy" if what else
                              "give the path after @, relative to the current directory: --x @x.npy")
    return _load_npy(name, p) if p.suffix.lower() == ".npy" else _load_pt(name, p)


def _not_a_file(p: Path) -> str | None:
    """What stands at p when it is there but is no regular file (values are read from files, twice for .npy)."""
    try:
        mode = p.stat().st_mode
    except OSError:
        return None
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")]
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def _check_size(name: str, path: Path, shape) -> None:
    check_elements(math.prod(shape), f"the value of '{name}', {path} (shape {tuple(shape)}), has")


def _load_npy(name: str, path: Path) -> torch.Tensor:
    try:
        with path.open("rb") as f:  # read the header first: refuse huge arrays before allocating
            version = np.lib.format.read_magic(f)
            header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = header(f)
        _check_numeric(name, path, dtype.kind, dtype.itemsize)
        _check_size(name, path, shape)
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise _unreadable(name, path, err) from None
    if not array.dtype.isnative:  # e.g. big-endian '>f8': torch takes native byte order only
        array = array.astype(array.dtype.newbyteorder("="))
    try:
        return torch.from_numpy(array if array.flags.c_contiguous else array.copy(order="C"))
    except TypeError as err:  # a numpy type torch has no counterpart for
        raise ValueInputError("bad_value", f"the value of '{name}', {path}, holds {array.dtype} numbers, which torch "
                              f"cannot hold ({str(err).splitlines()[0]})", hint=_NUMERIC_HINT) from None


_NUMERIC_HINT = "save a float64 array: numpy.save('x.npy', np.asarray(a, dtype=np.float64))"


_NOT_NUMBERS = {"O": "Python objects", "c": "complex numbers", "M": "dates and times (numpy datetime64)",
                "m": "time spans (numpy timedelta64)", "U": "text (numpy str_)", "S": "bytes (numpy bytes_)",
                "V": "structured records (numpy void)"}


def _check_numeric(name: str, path: Path, kind: str, itemsize: int = 8):
    if kind not in "biuf":
        raise ValueInputError("bad_value", f"the value of '{name}', {path}, holds "
                              f"{_NOT_NUMBERS.get(kind, 'values of numpy kind ' + repr(kind))}, not real numbers",
                              hint=_NUMERIC_HINT)
    if kind == "f" and itemsize > 8:  # numpy.longdouble: torch has no such type; refused, never silently rounded
        raise ValueInputError("bad_value", f"the value of '{name}', {path}, holds {8 * itemsize}-bit long double "
                              "numbers (numpy.longdouble), which torch cannot hold; gradflow does not round them "
                              "to float64 for you", hint=_NUMERIC_HINT)


def _load_pt(name: str, path: Path) -> torch.Tensor:
    if not _saved_by_torch(path):
        raise ValueInputError("bad_value", f"cannot read {path} (value of '{name}'): it is not a file torch.save "
                              "wrote (neither its zip format nor its older pickle format), nor a .npy file",
                              hint="write it with numpy.save (.npy) or torch.save(tensor) (.pt)")
    try:
        obj = _torch_load(path)
    except (RuntimeError, OSError, EOFError, ValueError) as err:
        raise _unreadable(name, path, err) from None
    except Exception as err:  # torch's weights_only refusal is a pickle.UnpicklingError
        if type(err).__name__ != "UnpicklingError":
            raise
        raise ValueInputError(
            "unsafe_file", f"refused to load {path} for '{name}': it holds Python objects other than "
            "tensors, and gradflow never unpickles arbitrary objects (torch.load weights_only=True said: "
            f"{_unpickle_reason(err)})", hint="save the tensor alone: torch.save(tensor, 'x.pt')") from None
    if not isinstance(obj, torch.Tensor):
        kind = f"a dict with keys {', '.join(map(str, list(obj)[:8]))}" if isinstance(obj, dict) else type(obj).__name__
        raise ValueInputError("bad_value", f"{path} holds {kind}, not one tensor (value of '{name}')",
                              hint="save the tensor alone: torch.save(tensor, 'x.pt')")
    if obj.is_complex():
        _check_numeric(name, path, "c")
    _check_dense(name, path, obj)
    _check_size(name, path, obj.shape)
    return obj


def _check_dense(name: str, where: Path | str, t: torch.Tensor) -> None:
    """An ordinary tensor of numbers: sparse, quantized or nested tensors have no plain values to start from."""
    kind = (f"a {str(t.layout).removeprefix('torch.')} tensor" if t.layout != torch.strided
            else "a quantized tensor" if t.is_quantized else "a nested tensor" if t.is_nested else None)
    if kind is not None:
        raise ValueInputError("bad_value", f"the value of '{name}' ({where}) is {kind}, not an ordinary (dense) tensor",
                              hint="make it dense first: t.to_dense() (t.dequantize() for a quantized one); "
                                   "for --x @x.pt, torch.save that")


def _unpickle_reason(err: Exception) -> str:
    """The line of torch's long refusal that names what was refused."""
    boiler = ("Weights only load failed", "Please file an issue", "Check the documentation")
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip() and not ln.strip().startswith(boiler)]
    return (lines or ["refused"])[0]


def _saved_by_torch(path: Path) -> bool:
    """torch.save writes a zip archive, or (before torch 1.6, `_use_new_zipfile_serialization=False`) a pickle,
    which starts with the protocol byte 0x80."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError:
        return True  # torch.load reports it
    return head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"


def _torch_load(path: Path):
    """Memory-map zip-format files (sizes are checked before the data is read); older files load whole."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. "Detected pickle protocol 4": the refusal below says enough
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as err:
            if "mmap" not in str(err):
                raise
        return torch.load(path, map_location="cpu", weights_only=True)


def _unreadable(name: str, path: Path, err: Exception) -> ValueInputError:
    why = str(err).splitlines()[0] if str(err) else type(err).__name__
    return ValueInputError("bad_value", f"cannot read {path} (value of '{name}'): {why}",
                           hint="write it with numpy.save (.npy) or torch.save(tensor) (.pt)")
