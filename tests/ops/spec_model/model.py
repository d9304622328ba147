"""A stand-in for a speculative-decoding LLM in Triton's Python backend, for tests/ops.

Echoes prompt words as "tokens". Each step proposes DRAFT_LEN draft tokens and accepts
ACCEPTED of them, so a request of n tokens takes ceil(n / (ACCEPTED + 1)) steps. With
return_perf_metrics it returns acceptance_rate / total_accepted_draft_tokens / total_draft_tokens
like the TensorRT-LLM backend, and it always records them through sdtk's
TritonSpecMetrics (Triton's custom-metrics API), as the reference backend does.
"""

import json
import math

import numpy as np
import triton_python_backend_utils as pb_utils

from toolkit.ops.spec_metrics import TritonSpecMetrics

DRAFT_LEN = 4  # default; config parameter "draft_len" overrides it ("0" = a baseline model)
ACCEPTED = 2


def _scalar(request, name, default):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return default
    v = t.as_numpy().reshape(-1)[0]
    return v.decode() if isinstance(v, bytes) else v.item()


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        self.metrics = TritonSpecMetrics(pb_utils, model=args["model_name"])
        params = {k: v["string_value"] for k, v in self.config.get("parameters", {}).items()}
        self.draft_len = int(params.get("draft_len", DRAFT_LEN))

    def execute(self, requests):
        responses = []
        for request in requests:
            words = str(_scalar(request, "text_input", "")).split() or ["<empty>"]
            n = max(1, int(_scalar(request, "max_tokens", 16)))
            if self.draft_len:
                steps = math.ceil(n / (ACCEPTED + 1))
                accepted, drafted = n - steps, self.draft_len * steps
            else:
                steps, accepted, drafted = n, 0, 0
            self.metrics.observe(accepted=accepted, drafted=drafted, output_tokens=n, steps=steps)
            text = " ".join(words[i % len(words)] for i in range(n))
            outs = [
                pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
                pb_utils.Tensor("num_output_tokens", np.array([n], dtype=np.int32)),
            ]
            if bool(_scalar(request, "return_perf_metrics", False)):
                outs += [
                    pb_utils.Tensor(
                        "acceptance_rate", np.array([accepted / max(drafted, 1)], dtype=np.float32)
                    ),
                    pb_utils.Tensor("total_accepted_draft_tokens", np.array([accepted], dtype=np.int32)),
                    pb_utils.Tensor("total_draft_tokens", np.array([drafted], dtype=np.int32)),
                ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outs))
        return responses
