"""Read a Chrome trace that ``torch.profiler`` (Kineto) exported: ``.json`` or ``.json.gz``.

Plain JSON, read once as a stream, rather than Holistic Trace Analysis (HTA): HTA loads the
whole trace into pandas frames per rank, is not installed here and pulls in jupyterlab and
plotly, and the doctor needs only six event categories of Kineto's documented format
(``libkineto/src/output_json.cpp``). The reader decodes one event at a time from a 1 MiB
window (``json.JSONDecoder.raw_decode``), keeps the few fields it needs as tuples and drops
the rest, so a 500 MB trace is read once and never held as a list of dicts
(``benchmarks/bench_doctor.py`` times it: on 2026-12-03, on a shared 2-core VM, a synthetic
500 MB trace of 2.6 million events took 27 s of CPU, 83 s of wall time and 1.0 GiB at peak
to read and analyse, where ``json.load`` alone took 26 s of CPU and 2.3 GiB; host figures,
they move with the machine).

Kineto's events, as the doctor reads them (``ph: "X"``, ``ts``/``dur`` in µs):

- ``cpu_op`` / ``user_annotation`` / ``python_function``: host ranges on a ``pid``/``tid``;
  ``ProfilerStep#N`` is a ``user_annotation``.
- ``cuda_runtime`` / ``cuda_driver``: API calls (``cudaMemcpyAsync``,
  ``cudaStreamSynchronize``) with ``args.correlation``.
- ``gpu_memcpy``: ``Memcpy HtoD (Pageable -> Device)`` and the like, with ``args.bytes``,
  ``args.stream``, ``args.device`` and the launching call's ``args.correlation``
  (the ``ac2g`` flow events carry the same id; the reader uses the ``correlation`` arg).
- ``kernel`` / ``gpu_memset``: other GPU work, with ``args.stream``.
"""

from __future__ import annotations

import functools
import gc
import gzip
import io
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from h2dlab.errors import UsageError
from h2dlab.escape import json_text, terminal_text

__all__ = ["MAX_TRACE_BYTES", "Trace", "env_beside", "env_path", "max_trace_bytes", "read_trace"]

HOST_CATS = frozenset({"cpu_op", "user_annotation", "python_function"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver"})
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_CHUNK = 1 << 20
#: a decoding error this far before the end of the window is a syntax error, not a cut element
_SLACK = 1 << 20
_SKIP_WS = re.compile(r"[ \t\n\r]*")
#: The most text a trace may unpack to (``H2DLAB_MAX_TRACE_BYTES`` raises it): 16 times the
#: 500 MB trace the benchmark reads in 1 GiB; a small .json.gz can unpack to any size.
MAX_TRACE_BYTES = 8 * 2**30


def max_trace_bytes() -> int:
    """:data:`MAX_TRACE_BYTES`, or ``H2DLAB_MAX_TRACE_BYTES`` where that is a whole number."""
    text = os.environ.get("H2DLAB_MAX_TRACE_BYTES", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else MAX_TRACE_BYTES


@dataclass
class Trace:
    """The events of one trace the doctor reads (times in µs, the trace's own clock).

    ``host``: ``(pid, tid, ts, end, name, cat)``; ``runtime``: ``(pid, tid, ts, end, name,
    correlation)``; ``gpu``: ``(cat, ts, end, device, stream, correlation, name, bytes)``
    (``bytes`` is -1 where the event has none)."""

    path: str
    host: list[tuple] = field(default_factory=list)
    runtime: list[tuple] = field(default_factory=list)
    gpu: list[tuple] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    n_events: int = 0
    #: events of the kept categories left out: a time that is not a finite number, or a
    #: negative duration (a hand-edited or damaged trace; Kineto writes neither)
    n_bad_times: int = 0


class _Stream:
    """Decodes JSON values one at a time from a text stream through a sliding window."""

    def __init__(self, f: io.TextIOBase, name: str) -> None:
        self.f, self.name = f, name
        self.buf, self.pos, self.eof = "", 0, False
        self.dec = json.JSONDecoder()
        self.read_chars, self.limit = 0, max_trace_bytes()

    def fill(self) -> bool:
        chunk = self.f.read(_CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.read_chars += len(chunk)
        if self.read_chars > self.limit:
            raise UsageError(
                f"{self.name} unpacks to more than {self.limit / 2**30:.3g} GiB of text (a decompression "
                "bomb, or a trace too large for this machine): trace fewer steps, or raise H2DLAB_MAX_TRACE_BYTES"
            )
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0
        return True

    def peek(self) -> str:
        while True:
            n = len(self.buf)
            self.pos = _SKIP_WS.match(self.buf, self.pos).end()  # in C: a run of blanks is no loop here
            if self.pos < n or not self.fill():
                return self.buf[self.pos] if self.pos < len(self.buf) else ""

    def expect(self, chars: str) -> str:
        c = self.peek()
        if c == "":
            raise UsageError(f"{self.name} is truncated: it ends before its JSON does")
        if c not in chars:
            raise UsageError(
                f"{self.name} is not a Chrome trace: expected {chars[0]!r} in its JSON, found {c!r}"
            )
        self.pos += 1
        return c

    def value(self) -> Any:
        self.peek()
        while True:
            try:
                v, end = self.dec.raw_decode(self.buf, self.pos)
            except RecursionError:
                raise UsageError(
                    f"{self.name} is not a Chrome trace: its JSON is nested too deeply"
                ) from None
            except json.JSONDecodeError as e:
                # An element cut by the window fails near its end: read on. An error well
                # before the window's end is a real syntax error.
                if not self.eof and len(self.buf) - e.pos < _SLACK and self.fill():
                    continue
                if self.eof and (e.pos >= len(self.buf.rstrip()) or e.msg.startswith("Unterminated")):
                    raise UsageError(f"{self.name} is truncated: it ends inside a JSON value") from None
                raise UsageError(f"{self.name} is not valid JSON ({e.msg} at character {e.pos})") from None
            except ValueError:  # an integer of more digits than Python converts (4300)
                raise UsageError(
                    f"{self.name} is not a Chrome trace: it holds a number too long to read"
                ) from None
            if end >= len(self.buf) and not self.eof and self.fill():
                continue  # a number at the window's end may go on in the next chunk
            self.pos = end
            return v


def _open_text(path: Path) -> io.TextIOBase:
    with open(path, "rb") as raw:
        magic = raw.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", errors="replace")
    return open(path, encoding="utf-8-sig", errors="replace")


def _keep(ev: Any, t: Trace) -> None:
    if not isinstance(ev, dict) or ev.get("ph") != "X":
        return
    cat = ev.get("cat")
    if not isinstance(cat, str) or cat not in _KEPT:
        return
    try:
        ts = float(ev["ts"])
        dur = float(ev.get("dur", 0.0))
    except (KeyError, TypeError, ValueError):
        return
    if not (math.isfinite(ts) and math.isfinite(dur) and dur >= 0 and math.isfinite(ts + dur)):
        t.n_bad_times += 1  # NaN, infinite or negative: no time to add up
        return
    end = ts + dur
    name = _name(str(ev.get("name", "")))
    a = ev.get("args")
    if not isinstance(a, dict):
        a = {}
    if cat in GPU_CATS:
        t.gpu.append(
            (
                cat,
                ts,
                end,
                _int(a.get("device", ev.get("pid"))),
                _int(a.get("stream", ev.get("tid"))),
                _int(a.get("correlation")),
                name,
                _int(a.get("bytes")),
            )
        )
    elif cat in RUNTIME_CATS:
        t.runtime.append((_id(ev.get("pid")), _id(ev.get("tid")), ts, end, name, _int(a.get("correlation"))))
    else:
        t.host.append((_id(ev.get("pid")), _id(ev.get("tid")), ts, end, name, cat))


_KEPT = HOST_CATS | RUNTIME_CATS | GPU_CATS


@functools.lru_cache(maxsize=1 << 16)  # a few hundred names repeat millions of times
def _name(text: str) -> str:
    """An event's name as it may be printed: a control or format character (an escape
    sequence that would drive the terminal, a right-to-left override) becomes U+FFFD."""
    return sys.intern(terminal_text(text, replacement="\ufffd"))


_INT64 = 1 << 63


def _int(v: Any) -> int:
    """``v`` as an int64, or -1 where it is none (missing, text, NaN, infinite, out of range)."""
    try:
        i = int(v)
    except (TypeError, ValueError, OverflowError):
        return -1
    return i if -_INT64 <= i < _INT64 else -1


def _id(v: Any) -> Any:
    """A ``pid``/``tid`` as a key: numbers and text as they are, anything else (a list, an
    object) as its text, so that a damaged id groups apart instead of failing."""
    return v if v is None or isinstance(v, (int, str)) else str(v)


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Read ``path`` once, as a stream, keeping what the doctor needs.

    Raises
    ------
    UsageError
        The file is missing, not JSON, truncated, or JSON without ``traceEvents``.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise UsageError(
            f"no trace at {os.fspath(path)!r}: give the .json or .json.gz that torch.profiler wrote"
        )
    t = Trace(path=str(p))
    collecting = gc.isenabled()
    gc.disable()  # millions of small tuples, no cycles: the cyclic collector would rescan them over and over
    try:
        with _open_text(p) as f:
            s = _Stream(f, p.name)
            first = s.peek()
            if first == "[":  # the JSON Array Format of Chrome traces: events only
                s.pos += 1
                _events(s, t)
            elif first == "{":
                s.pos += 1
                _object(s, t)
            elif first == "":
                raise UsageError(f"{p.name} is empty: not a trace")
            else:
                raise UsageError(f"{p.name} is not a Chrome trace (it does not start with {{ or [)")
    except (EOFError, gzip.BadGzipFile, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise UsageError(f"{p.name} is truncated or not a gzip file ({e})") from None
    finally:
        if collecting:
            gc.enable()
    if "traceEvents" not in t.meta and first == "{":
        raise UsageError(f"{p.name} is JSON but not a Chrome trace: it has no traceEvents")
    return t


def _events(s: _Stream, t: Trace) -> None:
    if s.peek() == "]":
        s.pos += 1
        return
    while True:
        ev = s.value()
        t.n_events += 1
        _keep(ev, t)
        if s.expect(",]") == "]":
            return


def _object(s: _Stream, t: Trace) -> None:
    if s.peek() == "}":
        s.pos += 1
        return
    while True:
        key = s.value()
        s.expect(":")
        if key == "traceEvents" and s.peek() == "[":
            s.pos += 1
            _events(s, t)
            t.meta["traceEvents"] = t.n_events
        else:
            t.meta[str(key)] = s.value()
        if s.expect(",}") == "}":
            return


#: an env.json larger than this is not one the kit wrote: it is not read
_MAX_ENV_BYTES = 1 << 20


def env_path(trace: str | os.PathLike[str]) -> Path:
    """Where a trace's own env.json goes: ``t.json.gz`` -> ``t.env.json`` beside it."""
    p = Path(trace).expanduser()
    return p.with_name(p.name.removesuffix(".gz").removesuffix(".json") + ".env.json")


def env_beside(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The env.json that describes a trace: ``<name>.env.json`` beside it (what
    :func:`h2dlab.profile` writes), else ``env.json`` in its folder (``data/traces``'
    layout); ``{}`` where there is none or it is not a JSON object.

    Parameters
    ----------
    path
        The trace's file.

    Returns
    -------
    dict
        The env.json's object (``gpu_name``, ``date``, ...), or ``{}``.
    """
    p = Path(path).expanduser()
    for cand in (env_path(p), p.with_name("env.json")):
        try:
            if not cand.is_file() or cand.stat().st_size > _MAX_ENV_BYTES:
                continue
            got = json_text(json.loads(cand.read_text(encoding="utf-8")))  # a lone surrogate as text
        except (OSError, ValueError, RecursionError):  # RecursionError: nested past the parser's depth
            continue
        if isinstance(got, dict):
            return got
    return {}
