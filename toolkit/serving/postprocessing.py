"""The postprocessing model: token ids → text, the last step of the ensemble and of the BLS.

Serves the tensor contract of the official inflight_batcher_llm `postprocessing` model:
TOKENS_BATCH [B, beams, L] and SEQUENCE_LENGTH [B, beams] in, OUTPUT [B * beams] (UTF-8) out: one
flat entry per beam, rows first, as upstream's `np.array(req_outputs)` (tensorrtllm_backend v0.19.0
all_models/inflight_batcher_llm/postprocessing/1/model.py), so that a single-beam request's
`text_output` is [1] and upstream's clients' `output[0].decode()` reads it. Each beam is decoded up
to its sequence length, honouring `skip_special_tokens`.

It needs numpy and transformers only.
"""

from __future__ import annotations

import numpy as np

from . import triton as st


def load_tokenizer(tokenizer_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


class Postprocessor:
    """The model's logic, independent of Triton."""

    def __init__(self, tokenizer, *, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens

    def __call__(self, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        if tokens.ndim == 2:  # a client that sent [B, L]: one beam
            tokens = tokens[:, None, :]
        batch, beams = tokens.shape[:2]
        lengths = np.asarray(lengths).reshape(batch, -1)
        out = np.empty((batch * beams,), dtype=np.object_)
        for b in range(batch):
            for k in range(beams):
                n = int(lengths[b, min(k, lengths.shape[1] - 1)])
                text = self.tokenizer.decode(
                    tokens[b, k, :n].tolist(), skip_special_tokens=self.skip_special_tokens
                )
                out[b * beams + k] = text.encode("utf-8")
        return out


class PostprocessingModel:
    """The postprocessing model's Triton side (its model.py's TritonPythonModel)."""

    def initialize(self, args):
        _, params = st.model_config(args)
        tokenizer_dir = st.param_str(params, "tokenizer_dir")
        if tokenizer_dir is None:
            raise ValueError("postprocessing: parameter tokenizer_dir is empty; re-render the repository")
        self.post = Postprocessor(
            load_tokenizer(tokenizer_dir),
            skip_special_tokens=st.param_bool(params, "skip_special_tokens", True),
        )
        st.announce_initialized(args)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                inputs = st.inputs_of(request, ("TOKENS_BATCH", "SEQUENCE_LENGTH"))
                text = self.post(inputs["TOKENS_BATCH"], inputs["SEQUENCE_LENGTH"])
                responses.append(st.response({"OUTPUT": text}))
            except Exception as e:
                responses.append(st.error_response(f"postprocessing: {e}"))
        return responses
