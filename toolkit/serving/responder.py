"""The reference tensorrt_llm model's responder: the one thread that makes every Triton call
after execute() has handed a request over (sending, is_cancelled(), custom metrics)."""

from __future__ import annotations

import queue
import sys
import threading
import time

import triton_python_backend_utils as pb_utils

from toolkit.ops.spec_metrics import Sink

from . import triton as st


class Responder(Sink):
    """The one thread that touches Triton objects after execute() has handed a request over:
    it sends what the generation threads produce, asks `is_cancelled()` for every request in
    flight at most once per CANCEL_CHECK_S, and makes every custom-metric call of the stub: the
    sdtk_spec_* observations and, every `batch_metrics.period` seconds, the batch gauges.

    Generation threads (one per request, batched by the runtime) only put numpy dicts on the
    outbox and read an Event, so Triton's objects are never used from two threads at once, and
    each request's objects are released on this thread. Custom-metric calls made from several
    threads at once crash tritonserver 2.51 (Signal 11 in libtriton_python; reproduced with four
    concurrent BLS instances calling a non-decoupled tensorrt_llm; tests/stress/test_served.py runs
    such traffic).

    Not decoupled (`single`), a request gets exactly one response, its last output with the
    final flag (the Python backend's default mode with a response sender, Triton ≥ 24.06)."""

    def __init__(self, name: str, metrics=None, batch_metrics=None, faults=None):
        self.name = name
        self.metrics = metrics
        self.batch_metrics = batch_metrics
        self.faults = faults if faults is not None else st.Faults()
        self._flushed = 0.0
        self.outbox: queue.Queue = queue.Queue()
        # key -> (sender, stop Event, cancel probe, request id, single response, in-band faults)
        self.flight: dict[int, tuple] = {}
        self.last: dict[int, dict] = {}  # a `single` request's latest output, sent with its end
        self.stopped: set[int] = set()  # keys a `stop` request cancelled
        self.failed: dict[int, BaseException] = {}  # keys stopped because a response failed
        self._next = 0
        self.thread = threading.Thread(target=self._loop, name="sdtk-reference-respond", daemon=True)
        self.thread.start()

    def start(self, sender, work, request_id: str = "", single: bool = False, inband: bool = False) -> None:
        """Run `work(cancelled)` (an iterable of output dicts) in its own thread; stream its
        outputs through `sender` (`single`: only the last, as the request's one response).
        `request_id`: what a `stop` request names to cancel it; `inband`: a failure is sent as
        a st.fault_chunk (sdtk's BLS asks for it: Triton 2.51 loses its errors, see `_fail`).

        The sender goes to the loop thread only once the request's thread runs: when the thread
        cannot start (RuntimeError "can't start new thread" in an exhausted address space) this
        raises and the loop never saw the sender, so the caller answers the request before
        execute() returns. (A loop holding the sender of a request whose execute() raised made
        tritonserver 2.51 segfault in TRITONBACKEND_ResponseFactoryIsCancelled: the Python
        backend closes the senders of a failed execute() and frees their response factories.)"""
        self._next += 1
        key, stop, go = self._next, threading.Event(), threading.Event()
        handed: list[bool] = []

        def run():
            go.wait()
            if not handed:  # start() failed after the thread started: the caller answers
                return
            try:
                for out in work(stop.is_set):
                    self.outbox.put(("out", key, out))
                self.outbox.put(("final", key, None))
            except Exception as e:  # sent as the request's error response
                self.outbox.put(("error", key, e))

        try:
            self.faults.check("thread_start")
            threading.Thread(target=run, name=f"sdtk-reference-request-{key}", daemon=True).start()
            # is_cancelled() at most every CANCEL_CHECK_S, never in a request's first CANCEL_CHECK_S.
            probe = st.every(st.CANCEL_CHECK_S, sender.is_cancelled)
            self.outbox.put(("open", key, (sender, stop, probe, request_id, single, inband)))
            handed.append(True)
        finally:
            go.set()

    def cancel(self, request_id: str) -> None:
        """Stop the requests in flight with this request id (TensorRT-LLM's `stop` input: how a
        BLS cancels its sub-request, which Triton 2.51 cannot cancel otherwise)."""
        self.outbox.put(("cancel", 0, request_id))

    def record(self, obs) -> None:  # Sink: the loop thread hands it to the Triton metrics
        self.outbox.put(("metrics", 0, obs))

    def _loop(self) -> None:
        while True:
            try:
                kind, key, value = self.outbox.get(timeout=st.CANCEL_CHECK_S)
            except queue.Empty:
                kind, key, value = None, 0, None
            if kind == "close":
                return
            try:
                self._step(kind, key, value)
            except Exception as e:  # noqa: BLE001 - the loop serves every later request: never lose it
                print(f"sdtk {self.name}: responder: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def _step(self, kind, key: int, value) -> None:
        if self.batch_metrics is not None and time.monotonic() - self._flushed >= self.batch_metrics.period:
            self._flushed = time.monotonic()
            self.batch_metrics.flush()
        if kind == "open":
            self.flight[key] = value
        elif kind == "metrics":
            if self.metrics is not None:
                self.metrics.record(value)
        elif kind == "cancel":
            for k, (_, stop, _, request_id, _, _) in self.flight.items():
                if request_id == value:
                    stop.set()
                    self.stopped.add(k)
        elif kind is not None and key in self.flight:
            self._deliver(kind, key, value)
        for k, (_, stop, probe, *_) in list(self.flight.items()):
            if stop.is_set():
                continue
            try:
                if probe():
                    stop.set()
            except Exception as e:  # noqa: BLE001 - the request ends with this error
                self.failed.setdefault(k, e)
                stop.set()

    def _response(self, outputs: dict):
        self.faults.check("alloc")
        return st.response(outputs)

    def _deliver(self, kind: str, key: int, value) -> None:
        """One output ("out"), or the end ("final", "error") of request `key`. A chunk that cannot
        be sent (no memory for it, or the client has gone) stops the generation, and the request
        then ends with that error: a stream cut short is never closed as if it were complete."""
        sender, stop, _, _, single, inband = self.flight[key]
        if kind == "out":
            if single:
                self.last[key] = value
                return
            if key in self.failed:  # a chunk was lost: nothing after it goes out
                return
            try:
                sender.send(self._response(value))
            except Exception as e:  # noqa: BLE001 - recorded; the request ends with it
                self.failed.setdefault(key, e)
                stop.set()
            return
        # The request ends here, whatever the sends below do.
        del self.flight[key]
        out = self.last.pop(key, None)
        failed = self.failed.pop(key, None)
        stopped = key in self.stopped
        self.stopped.discard(key)
        if failed is None and kind == "error" and not (stopped and isinstance(value, st.Cancelled)):
            failed = value
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        try:
            if failed is not None:
                self._fail(sender, failed, single, inband)
            elif kind == "final" and single:
                response = (
                    self._response(out)
                    if out is not None
                    else st.failure(self.name, RuntimeError("no output"))
                )
                sender.send(response, flags=final)
            else:
                # Complete, or ended by a `stop` request: a plain final response, as TensorRT-LLM's
                # backend ends a cancelled request (the caller, a BLS, reads to the end).
                sender.send(flags=final)
        except Exception as e:  # noqa: BLE001 - e.g. no memory for the response: end it with the error
            st.last_word(sender, self.name, e)

    def _fail(self, sender, e: BaseException, single: bool, inband: bool) -> None:
        """End a request with the error `e`. Not decoupled, one response carries the error and
        the FINAL flag. Decoupled, the error goes out as a response of its own, then an empty
        FINAL: Triton 2.51 loses an error response sent after the first response of a decoupled
        BLS sub-request, and with it the FINAL flag it carries (the BLS then waits for ever).
        For sdtk's BLS (`inband`) the error is a data response (st.fault_chunk), which arrives."""
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if single:
            sender.send(st.failure(self.name, e), flags=final)
            return
        if inband:
            message = st.failure(self.name, e).error().message()
            sender.send(st.response(st.fault_chunk(message)))
        else:
            sender.send(st.failure(self.name, e))
        sender.send(flags=final)

    def idle(self) -> bool:
        return not self.flight and self.outbox.empty()

    def close(self) -> None:
        self.outbox.put(("close", 0, None))
        self.thread.join(timeout=5)
