"""Where a crashed `tritonserver` died: its own backtrace, resolved against its binary's symbols.

When Triton catches a fatal signal it prints `Signal (11) received.` and raw frame addresses:

     0# 0x000055643A51A52D in /path/to/tritonserver
     2# 0x000055643A58997E in /path/to/tritonserver

The binary is position-independent, so the addresses carry its load base. Frame 0 is always
inside Triton's own `ErrorSignalHandler`, whose address the binary's symbol table gives: their
difference, rounded down to a page, is the base. The other frames in the binary then resolve to
the functions that hold them (`.symtab`, else `.dynsym`), demangled with the C++ runtime's own
`__cxa_demangle`.

Known sites name the upstream bug that crashes there (`KNOWN`). Nothing is assumed: a log with
no backtrace, a binary that cannot be read (a container's, seen from the host), a binary without
symbols, or a frame 0 outside the handler all give no site.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import functools
import re
import struct
from dataclasses import dataclass
from pathlib import Path

_FRAME = re.compile(r"^\s*(\d+)# 0x([0-9A-Fa-f]+) in (.+?)\s*$")
SIGNAL = re.compile(r"Signal \((\d+)\) received")  # Triton's line before its backtrace
HANDLER = "ErrorSignalHandler"  # triton::server::(anonymous namespace)::ErrorSignalHandler(int)
_PAGE = 0x1000
_FUNC = 2  # STT_FUNC

# (substring of the demangled function, what is known to crash there). Checked in order.
KNOWN: tuple[tuple[str, str], ...] = (
    (
        "grpc::ModelStreamInferHandler::",
        "the known race in Triton's gRPC stream handler between a client's cancellation and "
        "a stream's completion (server PRs #7840, #8078, fixed in Triton 25.01 and 25.04; "
        "docs/runbooks/troubleshooting.md)",
    ),
    (
        "grpc::ModelInferHandler::",
        "the known race in Triton's gRPC handler between a client's cancellation and a "
        "request's completion (server PRs #7840, #8078, fixed in Triton 25.01 and 25.04; "
        "docs/runbooks/troubleshooting.md)",
    ),
    (
        "evhtp_parse_query",
        "Triton's HTTP front end parsing a large form-encoded body as a query (server#5840, "
        "libevhtp#118); send JSON with `Content-Type: application/json`",
    ),
)


@dataclass(frozen=True)
class CrashSite:
    function: str  # the innermost frame in the binary past the signal handler, demangled and shortened
    known: str  # what is known to crash there ("" if nothing)
    frames: tuple[str, ...]  # every resolved frame in the binary, innermost first

    def describe(self) -> str:
        return f"in {self.function}" + (f": {self.known}" if self.known else "")


def crash_site(log_text: str) -> CrashSite | None:
    """The site of the last crash in a Triton log, or None (see the module docstring)."""
    starts = [m.start() for m in SIGNAL.finditer(log_text)]
    if not starts:
        return None
    frames: list[tuple[int, int, str]] = []
    for line in log_text[starts[-1] :].splitlines()[1:]:
        m = _FRAME.match(line)
        if m is None:
            if frames:
                break  # the backtrace has ended
            continue
        frames.append((int(m.group(1)), int(m.group(2), 16), m.group(3)))
    if not frames or frames[0][0] != 0:
        return None
    binary = frames[0][2]
    symbols = _symbols(binary)
    if not symbols:
        return None
    handler = next((s for s in symbols if HANDLER in s[2] and not s[2].endswith(".cold")), None)
    if handler is None:
        return None
    base = (frames[0][1] - handler[0]) & ~(_PAGE - 1)
    if _lookup(symbols, frames[0][1] - base) is not handler:
        return None  # frame 0 is not in the handler: the base cannot be trusted
    names = []
    for _, addr, path in frames[1:]:
        if path != binary:
            continue
        sym = _lookup(symbols, addr - base)
        if sym is not None:
            names.append(_short(_demangle(sym[2])))
    if not names:
        return None
    known = next((why for name in names for key, why in KNOWN if key in name), "")
    return CrashSite(names[0], known, tuple(names))


def _lookup(symbols: list[tuple[int, int, str]], offset: int) -> tuple[int, int, str] | None:
    """The function symbol whose [value, value + size) holds `offset`."""
    i = bisect.bisect_right(symbols, (offset, float("inf"), "")) - 1
    if i < 0:
        return None
    value, size, _ = symbols[i]
    return symbols[i] if value <= offset < value + max(size, 1) else None


@functools.lru_cache(maxsize=4)
def _symbols(path: str) -> list[tuple[int, int, str]]:
    """Sorted (value, size, mangled name) of the ELF64 little-endian binary's function symbols;
    [] when it cannot be read or has none."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return []
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    for wanted in (2, 11):  # SHT_SYMTAB, then SHT_DYNSYM
        for sh in sections:
            if sh[1] != wanted:
                continue
            strtab = sections[sh[6]]
            str_off = strtab[4]
            out = []
            for name, info, _, _, value, size in struct.iter_unpack("<IBBHQQ", data[sh[4] : sh[4] + sh[5]]):
                if info & 0xF != _FUNC or value == 0:
                    continue
                end = data.index(b"\0", str_off + name)
                out.append((value, size, data[str_off + name : end].decode(errors="replace")))
            if out:
                return sorted(out)
    return []


@functools.cache
def _cxa_demangle():
    path = ctypes.util.find_library("stdc++") or "libstdc++.so.6"
    try:
        lib = ctypes.CDLL(path)
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
    except OSError:
        return None
    fn = lib.__cxa_demangle
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    libc.free.argtypes = [ctypes.c_void_p]
    return fn, libc.free


def _demangle(name: str) -> str:
    """The C++ name of a mangled symbol; the symbol itself where it is not C++ or cannot be
    demangled."""
    base = name.split(".", 1)[0] if name.startswith("_Z") else name  # "foo.cold" clones
    funcs = _cxa_demangle()
    if not base.startswith("_Z") or funcs is None:
        return _mangled(name)
    fn, free = funcs
    status = ctypes.c_int(1)
    ptr = fn(base.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not ptr:
        return _mangled(name)
    try:
        return ctypes.string_at(ptr).decode(errors="replace")
    finally:
        free(ptr)


def _mangled(name: str, keep: int = 60) -> str:
    return name if len(name) <= keep else name[:keep] + "..."


def _short(name: str) -> str:
    """`name` without template arguments and parameter lists ("A<B<C>>::f(int) const" →
    "A<>::f()"), so a frame fits one line."""
    out, depth = [], 0
    for ch in name.replace("(anonymous namespace)", "{anonymous}"):
        if ch in "<(":
            if depth == 0:
                out.append(ch)
            depth += 1
        elif ch in ">)":
            depth -= 1
            if depth == 0:
                out.append(ch)
        elif depth == 0:
            out.append(ch)
    return "".join(out).replace(" const", "").strip()
