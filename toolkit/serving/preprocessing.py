"""The preprocessing model: text → token ids, the first step of the ensemble and of the BLS.

Serves the tensor contract of the official inflight_batcher_llm `preprocessing` model for text:
QUERY is tokenized with the Hugging Face tokenizer in `tokenizer_dir` (honouring
`add_special_tokens`); stop/bad words become the [2, N] ids+offsets format; END_ID/PAD_ID
default to the tokenizer's eos/pad ids (pad falls back to eos). Multimodal inputs are refused.

It needs numpy and transformers only.
"""

from __future__ import annotations

import numpy as np

from . import triton as st

INPUTS = (
    "QUERY",
    "DECODER_QUERY",
    "REQUEST_OUTPUT_LEN",
    "BAD_WORDS_DICT",
    "STOP_WORDS_DICT",
    "EMBEDDING_BIAS_WORDS",
    "EMBEDDING_BIAS_WEIGHTS",
    "END_ID",
    "PAD_ID",
    "PROMPT_TABLE_EXTRA_ID",
)
MULTIMODAL_INPUTS = ("IMAGE_BYTES", "IMAGE_URL", "IMAGES", "VIDEO_BYTES")


def load_tokenizer(tokenizer_dir: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class Preprocessor:
    """The model's logic, independent of Triton: numpy arrays in, numpy arrays out."""

    def __init__(self, tokenizer, *, add_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.add_special_tokens = add_special_tokens
        self.end_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else -1
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.end_id

    def encode(self, texts: np.ndarray, *, what: str) -> tuple[np.ndarray, np.ndarray]:
        """[B, 1] strings → ids [B, max_len] (right-padded with pad_id) and lengths [B, 1]."""
        rows = []
        for i, text in enumerate(texts.reshape(texts.shape[0], -1)[:, 0]):
            ids = self.tokenizer.encode(st.as_text(text), add_special_tokens=self.add_special_tokens)
            if not ids:
                raise st.BadRequest(f"{what} row {i} is empty after tokenization")
            rows.append(ids)
        width = max(len(r) for r in rows)
        ids = np.full((len(rows), width), self.pad_id, dtype=np.int32)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
        return ids, np.array([[len(r)] for r in rows], dtype=np.int32)

    def words(self, words: np.ndarray | None, batch: int) -> np.ndarray:
        """[B, W] strings → [B, 2, N]: concatenated ids, and each word's end offset (padded -1)."""
        if words is None:
            return np.empty((batch, 2, 0), dtype=np.int32)
        flat, ends = [], []
        for row_words in words.reshape(batch, -1):
            ids, offsets = [], []
            for word in row_words:
                tokens = self.tokenizer.encode(st.as_text(word), add_special_tokens=False)
                if tokens:
                    ids += tokens
                    offsets.append(len(ids))
            flat.append(ids)
            ends.append(offsets)
        width = max(1, *(len(x) for x in flat))
        out = np.zeros((batch, 2, width), dtype=np.int32)
        out[:, 1, :] = -1
        for i, (ids, offsets) in enumerate(zip(flat, ends, strict=True)):
            out[i, 0, : len(ids)] = ids
            out[i, 1, : len(offsets)] = offsets
        return out

    def embedding_bias(self, words: np.ndarray | None, weights: np.ndarray | None, batch: int) -> np.ndarray:
        """[B, vocab] additive logit bias from (word, weight) pairs; [B, 0] when none are given."""
        if words is None or weights is None:
            return np.empty((batch, 0), dtype=np.float32)
        bias = np.zeros((batch, len(self.tokenizer)), dtype=np.float32)
        words, weights = words.reshape(batch, -1), weights.reshape(batch, -1)
        if words.shape != weights.shape:
            raise st.BadRequest(
                f"EMBEDDING_BIAS_WORDS {words.shape} and EMBEDDING_BIAS_WEIGHTS {weights.shape} differ in shape"
            )
        for i in range(batch):
            for word, weight in zip(words[i], weights[i], strict=True):
                for token in self.tokenizer.encode(st.as_text(word), add_special_tokens=False):
                    bias[i, token] += float(weight)
        return bias

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        query = inputs["QUERY"]
        batch = query.shape[0]
        # The first model an ensemble request reaches: refuse max_tokens here with a 400 for every
        # backend (TensorRT-LLM's C++ backend would refuse it later as an internal error, a 500).
        lowest = int(inputs["REQUEST_OUTPUT_LEN"].min())
        if lowest < 1:
            raise st.BadRequest(
                f"max_tokens (REQUEST_OUTPUT_LEN) must be between 1 and {2**31 - 1}, got {lowest}"
                + (" (a value beyond int32 wraps around)" if lowest < 0 else "")
            )
        input_id, input_len = self.encode(query, what="QUERY")
        if "DECODER_QUERY" in inputs:
            decoder_id, decoder_len = self.encode(inputs["DECODER_QUERY"], what="DECODER_QUERY")
        else:
            decoder_id = np.full((batch, 1), self.pad_id, dtype=np.int32)
            decoder_len = np.ones((batch, 1), dtype=np.int32)
        end_id = inputs.get("END_ID", np.full((batch, 1), self.end_id))
        pad_id = inputs.get("PAD_ID", np.full((batch, 1), self.pad_id))
        out = {
            "INPUT_ID": input_id,
            "REQUEST_INPUT_LEN": input_len,
            "DECODER_INPUT_ID": decoder_id,
            "REQUEST_DECODER_INPUT_LEN": decoder_len,
            "REQUEST_OUTPUT_LEN": inputs["REQUEST_OUTPUT_LEN"].astype(np.int32).reshape(batch, -1),
            "BAD_WORDS_IDS": self.words(inputs.get("BAD_WORDS_DICT"), batch),
            "STOP_WORDS_IDS": self.words(inputs.get("STOP_WORDS_DICT"), batch),
            "EMBEDDING_BIAS": self.embedding_bias(
                inputs.get("EMBEDDING_BIAS_WORDS"), inputs.get("EMBEDDING_BIAS_WEIGHTS"), batch
            ),
            "OUT_END_ID": np.asarray(end_id, dtype=np.int32).reshape(batch, 1),
            "OUT_PAD_ID": np.asarray(pad_id, dtype=np.int32).reshape(batch, 1),
        }
        if "PROMPT_TABLE_EXTRA_ID" in inputs:
            # Text-only prompts hold no prompt-table (fake vocabulary) ids, so every id maps to 0.
            out["OUT_PROMPT_TABLE_EXTRA_IDS"] = np.zeros(input_id.shape, dtype=np.uint64)
        return out


class PreprocessingModel:
    """The preprocessing model's Triton side (its model.py's TritonPythonModel)."""

    def initialize(self, args):
        _, params = st.model_config(args)
        tokenizer_dir = st.param_str(params, "tokenizer_dir")
        if tokenizer_dir is None:
            raise ValueError("preprocessing: parameter tokenizer_dir is empty; re-render the repository")
        self.pre = Preprocessor(
            load_tokenizer(tokenizer_dir),
            add_special_tokens=st.param_bool(params, "add_special_tokens", True),
        )
        st.announce_initialized(args)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                if st.inputs_of(request, MULTIMODAL_INPUTS):
                    raise st.BadRequest("multimodal inputs (IMAGE_*, VIDEO_BYTES) are not supported")
                responses.append(st.response(self.pre(st.inputs_of(request, INPUTS))))
            except Exception as e:  # one bad request must not fail the batch
                responses.append(st.failure("preprocessing", e))
        return responses
