"""Helpers shared by sdtk's Triton Python models (imported as `st`).

Part of the package toolkit.repo copies next to every sdtk `model.py` (as `sdtk_serving`). It
needs only numpy and triton_python_backend_utils: the engine repository's Python models run
inside NVIDIA's container, which need not have sdtk installed.
"""

from __future__ import annotations

import gc
import json
import os
import queue
import sys
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")
_PLACEHOLDER = "$" + "{"


# --------------------------------------------------------------------------- parameters


# The line each sdtk model instance writes to its stderr (the tritonserver log) when its
# initialize() has returned: toolkit/server/readiness.py reads it to tell a lost stub handshake
# (Triton 2.51 now and then never takes an initialized instance as loaded) from a slow load.
INITIALIZED = "sdtk-serving: initialized instance"


def announce_initialized(args: dict) -> None:
    """Say, in the server log, that this model instance finished initialize()."""
    print(f"{INITIALIZED} '{args.get('model_instance_name', '?')}'", file=sys.stderr, flush=True)


def model_config(args: dict) -> tuple[dict, dict[str, str]]:
    """The model config (JSON from Triton) and its `parameters` as key → string value."""
    config = json.loads(args["model_config"])
    params = {k: str(v.get("string_value", "")) for k, v in config.get("parameters", {}).items()}
    return config, params


def is_unset(value: str | None) -> bool:
    """Empty, or an unfilled upstream placeholder (dollar, brace, name, brace: what upstream's
    fill_template.py leaves behind). Spelled without the two characters together, because sdtk
    checks that no rendered file contains them."""
    if value is None:
        return True
    text = value.strip()
    return text == "" or (text.startswith(_PLACEHOLDER) and text.endswith("}"))


def param_str(params: dict[str, str], key: str, default: str | None = None) -> str | None:
    value = params.get(key)
    return default if value is None or is_unset(value) else value.strip()


def param_bool(params: dict[str, str], key: str, default: bool) -> bool:
    value = param_str(params, key)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(f"parameter {key}={value!r} is not a boolean (true/false)")


def param_int(params: dict[str, str], key: str, default: int | None) -> int | None:
    value = param_str(params, key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"parameter {key}={value!r} is not an integer") from None


# --------------------------------------------------------------------------- tensors


def inputs_of(request, names) -> dict[str, np.ndarray]:
    """The inputs among `names` that the request carries, as numpy arrays."""
    out = {}
    for name in names:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is not None:
            out[name] = tensor.as_numpy()
    return out


def row(array: np.ndarray, i: int) -> np.ndarray:
    """Batch row `i`, keeping the batch dimension."""
    return array[i : i + 1]


def scalar(inputs: dict[str, np.ndarray], name: str, default, i: int = 0):
    """Element `i` of a per-request scalar input ([B] after a reshape, or [B, 1]), else `default`."""
    array = inputs.get(name)
    if array is None or array.size == 0:
        return default
    flat = array.reshape(array.shape[0], -1) if array.ndim else array.reshape(1, 1)
    value = flat[min(i, flat.shape[0] - 1), 0]
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value.item() if hasattr(value, "item") else value


def as_text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def stack_rows(rows: list[np.ndarray], fill=0) -> np.ndarray:
    """Concatenate [1, ...] rows along the batch axis, padding ragged trailing dims with `fill`."""
    if len(rows) == 1:
        return rows[0]
    shape = [max(r.shape[d] for r in rows) for d in range(1, rows[0].ndim)]
    out = np.full([len(rows), *shape], fill, dtype=rows[0].dtype)
    for i, r in enumerate(rows):
        index = (i, *(slice(0, s) for s in r.shape[1:]))
        out[index] = r[0]
    return out


def word_lists(array: np.ndarray | None) -> list[list[int]]:
    """Decode one row of the [2, N] stop/bad-words format (ids, then end offsets padded with -1)."""
    if array is None or array.size == 0:
        return []
    a = np.asarray(array).reshape(2, -1)
    ids, offsets = a[0].tolist(), [int(o) for o in a[1].tolist() if o >= 0]
    out, start = [], 0
    for end in offsets:
        if end > start:
            out.append(ids[start:end])
        start = end
    return out


def stop_at(tokens: list[int], stops: list[list[int]], start: int = 0) -> int | None:
    """The length of `tokens` up to and including the first stop sequence ending at or after index
    `start`, or None. (TensorRT-LLM keeps the stop sequence in the output.)"""
    best = None
    for seq in stops:
        n = len(seq)
        if n == 0:
            continue
        for end in range(max(start + 1, n), len(tokens) + 1):
            if tokens[end - n : end] == seq:
                best = end if best is None else min(best, end)
                break
    return best


# A request parameter the BLS sets on the sub-requests of its draft-target loop, which send the
# whole sequence so far as input_ids: the reference model then bounds only prompt + output
# (max_seq_len), since the BLS has checked the client's prompt against max_input_len itself.
BLS_LOOP = "sdtk_bls_loop"


# A request parameter sdtk's BLS sets on its decoupled sub-requests of the reference model: a
# failure after the first response then comes back in-band, as a `fault_chunk`. Triton 2.51 loses
# an error response sent after a decoupled BLS sub-request's first response (with the FINAL flag
# the whole stream hangs; without it, the stream ends as if complete: measured with
# SDTK_FAULT_INJECT alloc faults, 5 of 5 errors lost through the BLS, 3 of 3 delivered to a
# direct generate_stream client), while data responses arrive.
BLS_STREAM = "sdtk_bls_stream"


def fault_chunk(message: str) -> dict[str, np.ndarray]:
    """A response that says the request failed: `sequence_length` -n (no real response has a
    negative length) and the message's n UTF-8 bytes as `output_ids`."""
    data = message.encode("utf-8")[:4096]
    return {
        "output_ids": np.frombuffer(data, dtype=np.uint8).astype(np.int32).reshape(1, 1, len(data)),
        "sequence_length": np.array([[-len(data)]], dtype=np.int32),
    }


def fault_of(outputs: dict[str, np.ndarray]) -> str | None:
    """The message of a `fault_chunk`, or None for any other response."""
    length = outputs.get("sequence_length")
    if length is None or length.size == 0 or int(length.reshape(-1)[0]) >= 0 or "output_ids" not in outputs:
        return None
    return outputs["output_ids"].reshape(-1).astype(np.uint8).tobytes().decode("utf-8", errors="replace")


def request_parameters(request) -> dict:
    """A request's parameters (JSON from Triton); {} when it has none."""
    text = request.parameters() if hasattr(request, "parameters") else ""
    return json.loads(text) if text else {}


# --------------------------------------------------------------------------- responses


CANCEL_CHECK_S = 0.02  # how often a running request asks whether its client has gone


def every(seconds: float, probe):
    """`probe` (is_cancelled(): an IPC round trip), asked at most once per `seconds`, the first
    time `seconds` after the request started: a request shorter than that (each sub-request of
    the BLS draft-target loop) never pays for the round trip, and a loop of short steps pays for
    one every `seconds`, not one per step."""
    last = [time.monotonic()]

    def check() -> bool:
        now = time.monotonic()
        if now - last[0] < seconds:
            return False
        last[0] = now
        return bool(probe())

    return check


class Cancelled(Exception):
    """The client cancelled the request (or went away): stop generating."""


class Unavailable(RuntimeError):
    """The server cannot serve the request now (a model it calls failed midway, its process
    ran out of memory or threads): sent as UNAVAILABLE, a fault of the server, to retry."""


class ModelDown(Unavailable):
    """A model this one calls has lost its Python backend stub (killed, crashed): Triton 2.51
    never answers the requests that stub held, and fails later ones with "Stub process ... is not
    healthy". Sent as UNAVAILABLE, which Triton's HTTP frontend answers with 503 (a server fault,
    not the client's). `model` is the dead model's name."""

    def __init__(self, model: str, message: str):
        self.model = model
        super().__init__(message)


class BadRequest(ValueError):
    """The client's request is refused; the message names the input. Sent as INVALID_ARG, which
    Triton's HTTP frontend answers with 400 (a plain TritonError is INTERNAL: HTTP 500)."""


def error_response(
    message: str, cancelled: bool = False, bad: bool = False, down: bool = False
) -> pb_utils.InferenceResponse:
    code = "CANCELLED" if cancelled else "INVALID_ARG" if bad else "UNAVAILABLE" if down else None
    if code is not None and hasattr(pb_utils.TritonError, code):
        error = pb_utils.TritonError(message, getattr(pb_utils.TritonError, code))
    else:
        error = pb_utils.TritonError(message)
    return pb_utils.InferenceResponse(output_tensors=[], error=error)


def is_exhausted(e: BaseException) -> bool:
    """Whether `e` says the process ran out of memory or threads (an address-space limit, the
    OOM edge): a fault of the server at that moment, not of the request."""
    return isinstance(e, MemoryError) or (
        isinstance(e, RuntimeError) and str(e).startswith("can't start new thread")
    )


def failure(what: str, e: BaseException) -> pb_utils.InferenceResponse:
    """The error response for exception `e` raised while serving `what`. A dead model or an
    exhausted process is UNAVAILABLE (retry later: HTTP 503 over KServe infer), a refusal
    INVALID_ARG (400), anything else INTERNAL."""
    if isinstance(e, Cancelled):
        return error_response(f"{what}: request cancelled", cancelled=True)
    if is_exhausted(e):
        return error_response(
            f"{what}: the model's process is out of memory or threads ({type(e).__name__}: {e}); "
            "this request failed, retry it",
            down=True,
        )
    return error_response(f"{what}: {e}", bad=isinstance(e, BadRequest), down=isinstance(e, Unavailable))


def last_word(sender, what: str, e: BaseException) -> bool:
    """End a request with an error response through its `sender`, as the FINAL response, after
    sending its answer failed with `e` (no memory for it, or the client has gone). Retried once
    after a garbage collection (an error response needs little memory); False when nothing could
    be sent."""
    final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    for attempt in range(2):
        try:
            sender.send(failure(what, e), flags=final)
            return True
        except Exception:  # noqa: BLE001 - the client may have gone: nothing else to tell it
            if attempt == 0:
                gc.collect()
    return False


def is_bad_request(error) -> bool:
    """Whether a (BLS) sub-request's TritonError is a refusal of the request (INVALID_ARG)."""
    code = getattr(pb_utils.TritonError, "INVALID_ARG", None)
    return code is not None and error.code() == code


def response(outputs: dict[str, np.ndarray]) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(k, v) for k, v in outputs.items()])


def output_dtype(config: dict, name: str):
    return pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(config, name)["data_type"])


def send_all(sender, outputs, what: str) -> None:
    """Send each output dict of the iterable `outputs` through a decoupled response sender as soon
    as it is made, then the FINAL flag. An error ends the stream with an error response naming
    `what`."""
    final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    try:
        for out in outputs:
            sender.send(response(out))
    except Exception as e:
        sender.send(failure(what, e), flags=final)
        return
    sender.send(flags=final)


# --------------------------------------------------------------------------- fault injection
#
# A test seam, off unless the variable is set in the server's environment (the stubs inherit it):
#   SDTK_FAULT_INJECT="thread_start:N,alloc:M"
# makes the N-th request thread a model starts fail as CPython's Thread.start() fails in an
# exhausted address space (RuntimeError: can't start new thread), and the M-th response a model
# allocates fail with MemoryError, each once (counted per model instance from its load; a site may
# be named several times). tests/stress/test_served_faults.py uses it to prove that such a
# request fails alone and the server serves on.

FAULT_ENV = "SDTK_FAULT_INJECT"
FAULT_SITES = {"thread_start": RuntimeError, "alloc": MemoryError}
FAULT_WORDS = {"thread_start": "can't start new thread", "alloc": "cannot allocate the response"}


class Faults:
    """The faults SDTK_FAULT_INJECT asks for; `check(site)` raises at the chosen calls."""

    def __init__(self, spec: str = ""):
        self._at: dict[str, set[int]] = {}
        self._count: dict[str, int] = {}
        self._lock = threading.Lock()
        for item in (s.strip() for s in spec.split(",")):
            if not item:
                continue
            site, _, n = item.partition(":")
            if site not in FAULT_SITES or not n.isdigit() or int(n) < 1:
                raise ValueError(
                    f"{FAULT_ENV}={spec!r}: {item!r} is not SITE:N with SITE one of "
                    f"{', '.join(FAULT_SITES)} and N >= 1"
                )
            self._at.setdefault(site, set()).add(int(n))

    @classmethod
    def from_env(cls) -> Faults:
        return cls(os.environ.get(FAULT_ENV, ""))

    def check(self, site: str) -> None:
        if site not in self._at:
            return
        with self._lock:
            n = self._count[site] = self._count.get(site, 0) + 1
        if n in self._at[site]:
            raise FAULT_SITES[site](f"{FAULT_WORDS[site]} (injected by {FAULT_ENV}: {site}:{n})")


# --------------------------------------------------------------------------- stub health
#
# A BLS request waits on its sub-requests with no timeout, and Triton 2.51 never answers the
# requests a dead stub held (server#8604: no restart, no error; its health endpoints stay 200).
# So the BLS reads each sub-request's responses through `StubWatch.wait`, which checks every
# WATCH_S that the called model's stubs still live. They are found as children of the server
# (this stub's parent) whose argv[1] is `<repository>/<model>/<version>/model.py`.

STUB_EXE = "triton_python_backend_stub"
WATCH_S = 0.2  # how often a waiting sub-request checks the called model's stubs
RESCAN_S = 5.0  # how often the stubs of a model seen without any are looked for again
NOT_HEALTHY = ("is not healthy", "has exited unexpectedly")  # the parent's words for a dead stub


def _proc_alive(pid: int) -> bool:
    """The process runs and is not a zombie (a killed stub stays one until Triton reaps it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def server_stubs(server_pid: int) -> dict[str, list[int]]:
    """The live Python backend stubs that are children of `server_pid`, by model name."""
    out: dict[str, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
            if int(fields[1]) != server_pid or fields[0] in (b"Z", b"X"):
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if len(argv) > 1 and os.path.basename(argv[0]).decode(errors="replace") == STUB_EXE:
            model = os.path.basename(os.path.dirname(os.path.dirname(argv[1].decode(errors="replace"))))
            out.setdefault(model, []).append(int(entry.name))
    return out


def is_model_down(error) -> bool:
    """Whether a sub-request's TritonError says the called model's stub is dead."""
    return any(words in error.message() for words in NOT_HEALTHY)


def _best_effort(interrupted) -> None:
    """Abort a sub-request nobody reads any more; a failed abort only costs its remaining work
    (the responses are read to the end either way)."""
    try:
        interrupted(force=True)
    except Exception as e:
        print(f"sdtk: could not stop a sub-request nobody reads: {e}", flush=True)


def _direct(produce, keep: list | None, interrupted):
    """StubWatch.wait for a model without stubs: `produce()` read here, to its end."""
    items = produce()
    done = False
    try:
        for item in items:
            yield item
            if interrupted():
                raise Cancelled()
        done = True
    finally:
        if not done:
            _best_effort(interrupted)
        for _ in items:
            pass
        if keep is not None:
            keep.append(items)


class StubWatch:
    """Waits for a sub-request of a model while watching that model's stubs.

    `wait(model, produce)` runs `produce()` (an iterable of responses: `request.exec` wrapped in
    a list, or a decoupled response iterator) on a worker thread and yields what it yields; when
    a stub of `model` that lived at the start dies first, it raises ModelDown within WATCH_S.
    The worker blocked on the dead model is abandoned (Triton never ends that wait). Each wait
    in progress has its own worker (idle ones are reused): a streamed sub-request's chunks are
    detokenized by further calls while it runs, which must not queue behind it. A model without
    stubs (e.g. TensorRT-LLM's C++ backend) is read directly."""

    def __init__(self, server_pid: int | None = None):
        self.server_pid = server_pid or os.getppid()
        self._stubs: dict[str, list[int]] = {}
        self._scanned = 0.0
        self._idle: list[queue.Queue] = []  # the job queues of idle workers
        self._lock = threading.Lock()
        self.abandoned: list = []  # what the abandoned workers hold: never freed off the GIL

    def stubs(self, model: str) -> list[int]:
        """`model`'s live stubs, from a cache that is refreshed when one of them is gone (or,
        for a model without any, every RESCAN_S: a reloaded model has new stubs)."""
        pids = self._stubs.get(model)
        stale = pids is None or not all(_proc_alive(p) for p in pids)
        if stale or (not pids and time.monotonic() - self._scanned > RESCAN_S):
            self._stubs, self._scanned = server_stubs(self.server_pid), time.monotonic()
            pids = self._stubs.setdefault(model, [])
        return pids or []

    @staticmethod
    def _work(jobs: queue.Queue) -> None:
        while True:
            produce, out = jobs.get()
            try:
                items = produce()
                for item in items:
                    out.put(("item", item))
                out.put(("end", items))  # the waiting thread keeps (and frees) it
            except BaseException as e:  # handed to the waiting thread
                out.put(("error", e))
            items = produce = out = None

    def wait(self, model: str, produce, keep: list | None = None, interrupt=None):
        """Yield what the iterable `produce()` yields; `produce` itself runs on the worker (a
        decoupled `exec` blocks until the model takes the request). When the consumer stops
        early (or fails on a response), the rest is still read to the end: an unfinished BLS
        iterator is never cleaned up. The iterable, read to its end, is appended to `keep`.

        `interrupt`: (cancelled, abort). `cancelled()` is asked after each item and every
        WATCH_S while waiting; once it says True, `abort()` (which makes the called model end
        the request) is called and Cancelled is raised; the rest is still read to the end. A
        consumer that stops early for any other reason (a send to its gone client failed) aborts
        too: nobody reads what the called model would still produce."""
        aborted = [False]

        def interrupted(force: bool = False) -> bool:
            if interrupt is None or aborted[0] or not (force or interrupt[0]()):
                return False
            aborted[0] = True
            interrupt[1]()
            return True

        pids = self.stubs(model)
        if not pids:
            yield from _direct(produce, keep, interrupted)
            return
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
        if jobs is None:
            jobs = queue.Queue()
            threading.Thread(target=self._work, args=(jobs,), name="sdtk-bls-wait", daemon=True).start()
        out: queue.Queue = queue.Queue()
        jobs.put((produce, out))
        down = False
        finished = False
        try:
            while not finished:
                kind, value = self._next(model, pids, produce, out, interrupted)
                finished = kind != "item"
                if kind == "item":
                    yield value
                    if interrupted():
                        raise Cancelled()
                    continue
                if kind == "error":
                    raise value
                if keep is not None:
                    keep.append(value)
                # Triton may end a dead stub's request with an empty final response: a stream
                # cut short, not a finished one.
                self._check(model, pids, produce, out)
        except ModelDown:
            finished = down = True
            raise
        finally:
            if not finished:
                _best_effort(interrupted)
            while not finished:
                try:
                    kind, value = self._next(model, pids, produce, out, interrupted)
                except ModelDown:
                    down = True
                    break
                except Cancelled:  # aborted: the called model ends the request soon
                    continue
                finished = kind != "item"
                if kind == "end" and keep is not None:
                    keep.append(value)
            if not down:  # the worker has finished this job: it may take the next
                with self._lock:
                    self._idle.append(jobs)

    def _next(self, model: str, pids: list[int], produce, out: queue.Queue, interrupted=None):
        while True:
            try:
                return out.get(timeout=WATCH_S)
            except queue.Empty:
                pass
            self._check(model, pids, produce, out)
            if interrupted is not None and interrupted():
                raise Cancelled()

    def _check(self, model: str, pids: list[int], produce, out: queue.Queue) -> None:
        dead = [p for p in pids if not _proc_alive(p)]
        if dead:
            self.abandoned.append((produce, out))  # its worker may wait forever: never reused
            raise ModelDown(
                model,
                f"model '{model}' is down: its Python backend stub (pid "
                f"{', '.join(map(str, dead))}) died during the request",
            )
