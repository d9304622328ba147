"""The smallest BLS that reproduces the stub crash of Triton 2.51's Python backend, and its fix.

Each request makes N decoupled sub-requests to `echo`, reads each to its final response, and
churns Python objects in between (as a real BLS does). Parameter `variant`:

- `naive`: drop each finished response iterator at once. The stub's stub→parent thread then
  erases the iterator from its map without the GIL, freeing the responses' numpy arrays there
  while the interpreter runs: heap corruption, and within seconds the stub dies
  ("malloc(): unaligned fastbin chunk detected", segfaults in libpython/libc).
- `fixed`: what sdtk's tensorrt_llm_bls does: keep finished iterators referenced until an
  is_cancelled() round trip through that same FIFO thread proves their clean-up was handled.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

RETIRED = []


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.fixed = params["variant"]["string_value"] == "fixed"

    def call(self, x):
        req = pb_utils.InferenceRequest(
            model_name="echo", inputs=[pb_utils.Tensor("X", x)], requested_output_names=["Y"]
        )
        responses = req.exec(decoupled=True)
        out = []
        for resp in responses:
            if resp.has_error():
                raise RuntimeError(resp.error().message())
            out += [t.as_numpy().copy() for t in resp.output_tensors()]
        if self.fixed:
            RETIRED.append(responses)
        return out

    def execute(self, requests):
        for r in requests:
            n = int(pb_utils.get_input_tensor_by_name(r, "N").as_numpy()[0])
            sender = r.get_response_sender()
            acc = []
            for i in range(n):
                if self.fixed:
                    retired = RETIRED[:]
                    del RETIRED[: len(retired)]
                    sender.is_cancelled()  # the round trip; then `retired` is freed here
                    del retired
                ys = self.call(np.arange(64, dtype=np.int32) + i)
                junk = [{"k": list(range(20)), "s": str(j)} for j in range(50)]
                acc.append(int(ys[-1][0]) + len(junk))
            out = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array(acc, np.int32))])
            sender.send(out, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def finalize(self):
        del RETIRED[:]
