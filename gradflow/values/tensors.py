"""The torch side of tensor values: constructors (seeded) and .npy / .pt files.

Random constructors draw, in the order the variables first appear in the program,
from ONE torch.Generator seeded with `seed`: with seed 0, `x = randn(3)` equals
`torch.randn(3, generator=torch.Generator().manual_seed(0))` in the same dtype.
Files: numpy.load(allow_pickle=False); torch.load(weights_only=True) — never
arbitrary unpickling. Sizes are checked against the element limit (limits.py) first.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gradflow.engine.evaluate import resolve_dtype
from gradflow.errors import ValueInputError
from gradflow.limits import check_elements
from gradflow.values.specs import HINT, FileValue, TensorSpec


def materialize(values: dict[str, Any], dtype: str = "float32", seed: int = 0) -> dict[str, Any]:
    """Replace every TensorSpec / FileValue in `values` (in order) by a tensor of `dtype`."""
    if not any(isinstance(v, (TensorSpec, FileValue)) for v in values.values()):
        return values  # plain numbers and lists: nothing to build
    dtype = resolve_dtype(dtype)
    gen = torch.Generator().manual_seed(int(seed))
    out = {}
    for name, v in values.items():
        if isinstance(v, TensorSpec):
            check_elements(v.numel, f"the value of '{name}', {v}, would have")  # before allocating
            try:
                v = build(v, dtype, gen)
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
        raise ValueInputError("bad_value", f"the value of '{name}': no such file '{path}'",
                              hint="give the path after @, relative to the current directory: --x @x.npy")
    return _load_npy(name, p) if p.suffix.lower() == ".npy" else _load_pt(name, p)


def _check_size(name: str, path: Path, shape) -> None:
    check_elements(math.prod(shape), f"the value of '{name}', {path} (shape {tuple(shape)}), has")


def _load_npy(name: str, path: Path) -> torch.Tensor:
    try:
        with path.open("rb") as f:  # read the header first: refuse huge arrays before allocating
            version = np.lib.format.read_magic(f)
            header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = header(f)
        _check_numeric(name, path, dtype.kind)
        _check_size(name, path, shape)
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise _unreadable(name, path, err) from None
    if not array.dtype.isnative:  # e.g. big-endian '>f8': torch takes native byte order only
        array = array.astype(array.dtype.newbyteorder("="))
    return torch.from_numpy(array if array.flags.c_contiguous else array.copy(order="C"))


def _check_numeric(name: str, path: Path, kind: str):
    if kind not in "biuf":
        raise ValueInputError("bad_value", f"the value of '{name}', {path}, holds "
                              f"{'Python objects' if kind == 'O' else 'non-real numbers'}, not real numbers",
                              hint="save a numeric array: numpy.save('x.npy', np.asarray(a, dtype=float))")


def _load_pt(name: str, path: Path) -> torch.Tensor:
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
    _check_size(name, path, obj.shape)
    return obj


def _unpickle_reason(err: Exception) -> str:
    """The line of torch's long refusal that names what was refused."""
    boiler = ("Weights only load failed", "Please file an issue", "Check the documentation")
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip() and not ln.strip().startswith(boiler)]
    return (lines or ["refused"])[0]


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
