"""A stand-in for the TRT-LLM ensemble: echoes words of the prompt back as "generated" tokens.

Follows the ensemble's input/output contract (text_input, max_tokens, stream, ...; text_output
plus the speculative-decoding acceptance outputs and timestamps). Behaviour is set by
config parameters:

  token_delay_ms   sleep per generated word (lets tests kill the server mid-stream)
  fail_initialize  "1": raise in initialize (a model that fails to load)
  lose_handshake   "1": write sdtk's "initialized" line, then never return from initialize (as a
                   stub whose handshake Triton 2.51 lost: the server waits for it forever)

Runs inside tritonserver's Python backend stub, which provides triton_python_backend_utils.
"""

import json
import sys
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request, name, default):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return default
    v = t.as_numpy().reshape(-1)[0]
    return v.decode() if isinstance(v, bytes) else v.item()


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in self.config.get("parameters", {}).items()}
        if params.get("fail_initialize") == "1":
            raise pb_utils.TritonModelException("fake_llm: engine file not found: /nonexistent/rank0.engine")
        if params.get("lose_handshake") == "1":
            print(
                f"sdtk-serving: initialized instance '{args['model_instance_name']}'",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(3600)
        self.delay = float(params.get("token_delay_ms", "0")) / 1000.0
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(self.config)
        self.batched = self.config.get("max_batch_size", 0) > 0
        self.output_names = {o["name"] for o in self.config["output"]}

    def _tensor(self, name, value, dtype):
        arr = np.array([value], dtype=dtype)
        if self.batched:
            arr = arr.reshape(1, -1)
        return pb_utils.Tensor(name, arr)

    def _response(self, text, stats, n_out, arrival, first):
        outs = [self._tensor("text_output", text.encode(), np.object_)]
        now = time.time_ns()
        extra = {
            "acceptance_rate": (stats[0] / stats[1] if stats[1] else 0.0, np.float32),
            "total_accepted_draft_tokens": (stats[0], np.int32),
            "total_draft_tokens": (stats[1], np.int32),
            "num_output_tokens": (n_out, np.int32),
            "arrival_time_ns": (arrival, np.int64),
            "first_token_time_ns": (first or now, np.int64),
            "last_token_time_ns": (now, np.int64),
        }
        for name, (value, dtype) in extra.items():
            if name in self.output_names:
                outs.append(self._tensor(name, value, dtype))
        return pb_utils.InferenceResponse(output_tensors=outs)

    def _generate(self, request):
        """Yield (delta_text, words_so_far) for each "token"; also returns the acceptance stats."""
        prompt = str(_scalar(request, "text_input", ""))
        max_tokens = int(_scalar(request, "max_tokens", 16))
        words = prompt.split() or ["<empty>"]
        exclude = bool(_scalar(request, "exclude_input_in_output", True))
        draft = int(_scalar(request, "num_draft_tokens", 4))
        out = [words[i % len(words)] for i in range(max_tokens)]
        prefix = "" if exclude else prompt
        # Pretend 3 of every 4 draft tokens are accepted.
        stats = (3 * len(out) // 4, len(out)) if draft else (0, 0)
        return prefix, out, stats

    def execute(self, requests):
        if not self.decoupled:
            responses = []
            for request in requests:
                arrival = time.time_ns()
                prefix, out, stats = self._generate(request)
                text = prefix + "".join(" " + w for w in out)
                responses.append(self._response(text, stats, len(out), arrival, None))
            return responses
        for request in requests:
            sender = request.get_response_sender()
            arrival = time.time_ns()
            try:
                prefix, out, stats = self._generate(request)
                stream = bool(_scalar(request, "stream", False))
                if not stream:
                    time.sleep(self.delay * len(out))
                    text = prefix + "".join(" " + w for w in out)
                    sender.send(
                        self._response(text, stats, len(out), arrival, None),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                    )
                    continue
                first = None
                for i, w in enumerate(out):
                    time.sleep(self.delay)
                    first = first or time.time_ns()
                    delta = (prefix if i == 0 else "") + " " + w
                    last = i == len(out) - 1
                    part = (3 * (i + 1) // 4, i + 1) if stats[1] else (0, 0)
                    sender.send(
                        # num_output_tokens is per response (docs/contracts.md): one word each.
                        self._response(delta, part, 1, arrival, first),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0,
                    )
                if not out:
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            except Exception as e:  # noqa: BLE001 - report any failure to the client
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(f"fake_llm: {e}")),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
        return None
