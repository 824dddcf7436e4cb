"""Value texts that stand for tensors or sweeps, parsed without eval (torch-free).

    randn(3,4)  rand(2)  zeros(2,3)  ones(5)  full(2,3, 0.5)  arange(0, 1, 0.25)  linspace(-1, 1, 5)
    @weights.npy  @weights.pt          (a file holding one tensor)
    -2:2:41                            (START:STOP:COUNT, a sweep; `eval` and `gradflow.sweep` only)

The tensors themselves are built by `tensors.py` (the torch side).
"""
from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass

from gradflow.errors import LimitError, ValueInputError
from gradflow.limits import MAX_SWEEP_POINTS

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_CALL = r"\s*([A-Za-z_]\w*)\s*\(\s*(.*?)\s*\)\s*"  # patterns: re caches them compiled
_ARGS = rf"{_NUM}(?:\s*,\s*{_NUM})*"
_SWEEP = rf"\s*({_NUM})\s*:\s*({_NUM})\s*:\s*(\d+)\s*"
SHAPED = ("randn", "rand", "zeros", "ones")
CONSTRUCTORS = (*SHAPED, "full", "arange", "linspace")
HINT = ("constructors: randn(3,4) rand(3) zeros(2,2) ones(4) full(2,3, 0.5) arange(0, 1, 0.25) "
        "linspace(-1, 1, 5); files: @x.npy @x.pt")


@dataclass(frozen=True)
class TensorSpec:
    """A tensor constructor call: `randn(3,4)` -> TensorSpec('randn', (3.0, 4.0))."""

    ctor: str
    args: tuple[float, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        if self.ctor in SHAPED:
            return tuple(int(a) for a in self.args)
        if self.ctor == "full":
            return tuple(int(a) for a in self.args[:-1])
        if self.ctor == "linspace":
            return (int(self.args[2]),)
        start, stop, step = _arange_args(self.args)
        return (max(0, math.ceil((stop - start) / step)),)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __str__(self) -> str:
        return f"{self.ctor}({', '.join(f'{a:g}' for a in self.args)})"


@dataclass(frozen=True)
class FileValue:
    """`@path.npy` / `@path.pt`: a tensor read from a file when evaluating."""

    path: str


@dataclass(frozen=True)
class SweepRange:
    """START:STOP:COUNT -> COUNT evenly spaced points from START to STOP (both included)."""

    start: float
    stop: float
    count: int

    def points(self) -> list[float]:
        if self.count == 1:
            return [self.start]
        step = (self.stop - self.start) / (self.count - 1)
        return [self.start + i * step for i in range(self.count - 1)] + [self.stop]


def parse_sweep(name: str, text: str) -> SweepRange | None:
    """'-2:2:41' -> SweepRange(-2, 2, 41); any other text -> None."""
    m = re.fullmatch(_SWEEP, text)
    if not m:
        return None
    start, stop, count = float(m[1]), float(m[2]), int(m[3])
    if not (math.isfinite(start) and math.isfinite(stop)) or count < 1:
        raise ValueInputError("bad_value", f"--{name} {text}: a sweep needs finite START, STOP and COUNT >= 1",
                              hint="--x -2:2:41 (41 points from -2 to 2)")
    if count > MAX_SWEEP_POINTS:
        raise LimitError("too_large", f"--{name} {text} asks for {count:,} points; the limit is "
                         f"{MAX_SWEEP_POINTS:,} (gradflow.limits.MAX_SWEEP_POINTS)", hint="use fewer points")
    return SweepRange(start, stop, count)


LARGEST = {"float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}  # finite maxima (torch.finfo)


def check_range(name: str, rng: SweepRange, dtype: str) -> None:
    """Every point of the sweep is a finite number of `dtype`: a START or STOP beyond the dtype's largest number,
    or a step that overflows (-1.7e308:1.7e308:3), would silently give inf and nan points."""
    largest = LARGEST.get(dtype)
    if largest is None:  # an unknown dtype: the evaluation says so
        return
    text = f"--{name} {rng.start:g}:{rng.stop:g}:{rng.count}"
    for what, v in (("START", rng.start), ("STOP", rng.stop)):
        if abs(v) > largest:
            hint = "use --dtype float64, or a smaller range" if dtype == "float32" else "sweep a smaller range"
            raise ValueInputError("bad_value", f"{text}: {what} {v:g} is too large for {dtype} (its largest number "
                                  f"is about {largest:.2g}), so the sweep's points would be inf", hint=hint)
    if rng.count > 1 and not math.isfinite((rng.stop - rng.start) / (rng.count - 1)):
        raise ValueInputError("bad_value", f"{text}: the distance from START to STOP is too large for a number "
                              f"(it passes {largest:.2g}), so the sweep's points would be inf and nan",
                              hint="sweep a smaller range, e.g. from 0 to STOP")


def parse_special(name: str, text: str):
    """A constructor, file or sweep text -> its object; None when the text is none of these."""
    text = text.strip()
    if text.startswith("@"):
        return _file(name, text[1:].strip())
    if re.fullmatch(_SWEEP, text):
        raise ValueInputError("bad_value", f"the value of '{name}' ({text}) is a sweep START:STOP:COUNT, "
                              "which only `gradflow eval` and gradflow.sweep() accept",
                              hint="give one number here, or sweep with gradflow eval ... --x -2:2:41")
    m = re.fullmatch(_CALL, text)
    return None if m is None else _spec(name, text, m[1], m[2])


def _file(name: str, path: str) -> FileValue:
    if not path.lower().endswith((".npy", ".pt", ".pth")):
        raise ValueInputError("bad_value", f"cannot read the value of '{name}' from '{path}': "
                              "only .npy and .pt files are supported",
                              hint="numpy.save('x.npy', array) or torch.save(tensor, 'x.pt'), then --x @x.npy")
    return FileValue(path)


def _spec(name: str, text: str, ctor: str, inner: str) -> TensorSpec:
    if ctor not in CONSTRUCTORS:
        near = difflib.get_close_matches(ctor, CONSTRUCTORS, n=1)
        raise ValueInputError("bad_value", f"'{ctor}' in the value of '{name}' ({text}) is not a tensor "
                              "constructor" + (f"; did you mean '{near[0]}'?" if near else ""), hint=HINT)
    if inner and not re.fullmatch(_ARGS, inner):
        raise _bad(name, text, "the arguments must be plain numbers separated by commas")
    spec = TensorSpec(ctor, tuple(float(a) for a in inner.split(",")) if inner else ())
    _check_args(name, text, spec)
    return spec


def _check_args(name: str, text: str, spec: TensorSpec):
    a = spec.args
    if any(not math.isfinite(v) for v in a):
        raise _bad(name, text, "every argument must be finite")
    wanted = {"full": (1, None), "arange": (1, 3), "linspace": (3, 3)}.get(spec.ctor, (0, None))
    if len(a) < wanted[0] or (wanted[1] is not None and len(a) > wanted[1]):
        raise _bad(name, text, f"{spec.ctor}() takes {_usage(spec.ctor)}")
    sizes = a if spec.ctor in SHAPED else a[:-1] if spec.ctor == "full" else a[2:] if spec.ctor == "linspace" else ()
    if any(v < 0 or v != int(v) for v in sizes):
        raise _bad(name, text, "sizes must be whole numbers >= 0")
    if spec.ctor == "arange" and _arange_args(a)[2] == 0:
        raise _bad(name, text, "arange() needs a non-zero step")


def _usage(ctor: str) -> str:
    return {"full": "sizes then a fill value: full(2,3, 0.5)", "arange": "(stop), (start, stop) or "
            "(start, stop, step)", "linspace": "(start, stop, steps)"}.get(ctor, "sizes: randn(3,4)")


def _arange_args(a: tuple[float, ...]) -> tuple[float, float, float]:
    return (0.0, a[0], 1.0) if len(a) == 1 else (a[0], a[1], a[2] if len(a) == 3 else 1.0)


def _bad(name: str, text: str, why: str) -> ValueInputError:
    return ValueInputError("bad_value", f"cannot read the value of '{name}': {text!r}: {why}", hint=HINT)
