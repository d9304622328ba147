"""A fake speculative LLM for the bench tests: streams multi-token chunks on a known schedule.

Follows the ensemble's contract (text_input, max_tokens, stream, return_perf_metrics,
return_num_output_tokens, optional num_draft_tokens; text_output, per-response num_output_tokens,
acceptance outputs, server timestamps) and emulates the cost model the bench measures:

- one step takes step_ms · (1 + kappa · (active · (γ + 1) − 1)) + γ · draft_cost · step_ms,
  where `active` is the number of requests being served (a batch term), γ the draft length;
- a step commits 1 + (accepted drafts) tokens, each draft accepted with probability alpha
  until the first rejection (seeded per request, so runs are reproducible).

Requests run in their own threads (decoupled), so concurrency is real. Parameters come from
config.pbtxt: step_ms, draft_len (default γ when the request sends no num_draft_tokens),
alpha, kappa, draft_cost.
"""

import json
import random
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

WORDS = ["def", "return", "self", "value", "if", "else", "for", "in", "range", "None"]


def _scalar(request, name, default):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return default
    v = t.as_numpy().reshape(-1)[0]
    return v.decode() if isinstance(v, bytes) else v.item()


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        p = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.step = float(p.get("step_ms", "10")) / 1000.0
        self.draft_len = int(p.get("draft_len", "0"))
        self.alpha = float(p.get("alpha", "0.8"))
        self.kappa = float(p.get("kappa", "0.0"))
        self.draft_cost = float(p.get("draft_cost", "0.05"))
        self.outputs = {o["name"] for o in config["output"]}
        self.lock = threading.Lock()
        self.active = 0

    def _tensor(self, name, value, dtype):
        return pb_utils.Tensor(name, np.array([[value]], dtype=dtype))

    def _serve(self, request):
        sender = request.get_response_sender()
        arrival = time.time_ns()
        with self.lock:
            self.active += 1
        try:
            max_tokens = int(_scalar(request, "max_tokens", 16))
            gamma = int(_scalar(request, "num_draft_tokens", self.draft_len))
            perf = bool(_scalar(request, "return_perf_metrics", False))
            count = bool(_scalar(request, "return_num_output_tokens", False))
            prompt = str(_scalar(request, "text_input", ""))
            rng = random.Random(len(prompt) * 7919 + max_tokens)
            done, drafted, accepted, first = 0, 0, 0, 0
            while done < max_tokens:
                with self.lock:
                    active = self.active
                time.sleep(
                    self.step * (1 + self.kappa * (active * (gamma + 1) - 1))
                    + gamma * self.draft_cost * self.step
                )
                acc = 0
                while acc < gamma and rng.random() < self.alpha:
                    acc += 1
                k = min(1 + acc, max_tokens - done)
                drafted += gamma
                accepted += min(acc, k - 1)
                done += k
                now = time.time_ns()
                first = first or now
                outs = [
                    pb_utils.Tensor(
                        "text_output",
                        np.array(
                            [[" ".join(WORDS[(done + i) % 10] for i in range(k)).encode()]], dtype=np.object_
                        ),
                    )
                ]
                extra = {
                    "num_output_tokens": (k, np.int32, count),  # this response's tokens
                    "acceptance_rate": (accepted / drafted if drafted else 0.0, np.float32, perf),
                    "total_accepted_draft_tokens": (accepted, np.int32, perf),
                    "total_draft_tokens": (drafted, np.int32, perf),
                    "arrival_time_ns": (arrival, np.int64, perf),
                    "first_token_time_ns": (first, np.int64, perf),
                    "last_token_time_ns": (now, np.int64, perf),
                }
                for name, (value, dtype, want) in extra.items():
                    if want and name in self.outputs:
                        outs.append(self._tensor(name, value, dtype))
                final = done >= max_tokens
                sender.send(
                    pb_utils.InferenceResponse(output_tensors=outs),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0,
                )
        except Exception as e:  # noqa: BLE001 - report any failure to the client
            sender.send(
                pb_utils.InferenceResponse(error=pb_utils.TritonError(f"fake_spec: {e}")),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        finally:
            with self.lock:
                self.active -= 1

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._serve, args=(request,), daemon=True).start()
        return None
