"""The rendered inflight_batcher_llm repository carries the official tensor contract.

The tables below are transcribed from NVIDIA/TensorRT-LLM
triton_backend/all_models/inflight_batcher_llm/*/config.pbtxt (tensorrt_llm 0c8de69,
preprocessing 08dc37e, postprocessing 89fd9b7, tensorrt_llm_bls 0193dbd, ensemble 2a9abd9) and
triton-inference-server/tensorrtllm_backend all_models/inflight_batcher_llm/ @c2e65b8, independently of the templates: every input's name,
data type, dims, optional flag, reshape and ragged batching; every output; the parameter keys;
the ensemble wiring. `${logits_datatype}` is TYPE_FP32; `${encoder_input_features_data_type}`
follows the engine dtype (float16 in these stand-in engines); `${prompt_embedding_table_data_type}`
is TYPE_FP16, the type of the ensemble/BLS input that feeds it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

# name type dims [opt] [reshape] [ragged]
TENSORRT_LLM_INPUTS = """
input_ids INT32 -1 opt ragged
encoder_input_features FP16 -1,-1 opt ragged
encoder_output_lengths INT32 1 opt reshape
input_lengths INT32 1 reshape
request_output_len INT32 1 reshape
num_return_sequences INT32 1 opt reshape
draft_input_ids INT32 -1 opt ragged
decoder_input_ids INT32 -1 opt ragged
decoder_input_lengths INT32 1 opt reshape
draft_logits FP32 -1,-1 opt ragged
draft_acceptance_threshold FP32 1 opt reshape
end_id INT32 1 opt reshape
pad_id INT32 1 opt reshape
stop_words_list INT32 2,-1 opt ragged
bad_words_list INT32 2,-1 opt ragged
embedding_bias FP32 -1 opt ragged
beam_width INT32 1 opt reshape
temperature FP32 1 opt reshape
runtime_top_k INT32 1 opt reshape
runtime_top_p FP32 1 opt reshape
runtime_top_p_min FP32 1 opt reshape
runtime_top_p_decay FP32 1 opt reshape
runtime_top_p_reset_ids INT32 1 opt reshape
len_penalty FP32 1 opt reshape
early_stopping BOOL 1 opt reshape
repetition_penalty FP32 1 opt reshape
min_tokens INT32 1 opt reshape
beam_search_diversity_rate FP32 1 opt reshape
presence_penalty FP32 1 opt reshape
frequency_penalty FP32 1 opt reshape
seed UINT64 1 opt reshape
return_log_probs BOOL 1 opt reshape
return_context_logits BOOL 1 opt reshape
return_generation_logits BOOL 1 opt reshape
return_perf_metrics BOOL 1 opt reshape
return_num_input_tokens BOOL 1 opt reshape
return_num_output_tokens BOOL 1 opt reshape
exclude_input_in_output BOOL 1 opt reshape
stop BOOL 1 opt reshape
streaming BOOL 1 opt reshape
prompt_embedding_table FP16 -1,-1 opt ragged
prompt_table_extra_ids UINT64 -1 opt ragged
prompt_vocab_size INT32 1 opt reshape
cross_attention_mask BOOL -1,-1 opt ragged
mrope_rotary_cos_sin FP32 -1 opt
mrope_position_deltas INT64 1 opt
lora_task_id UINT64 1 opt reshape
lora_weights FP16 -1,-1 opt ragged
lora_config INT32 -1,3 opt ragged
context_phase_params UINT8 -1 opt ragged
skip_cross_attn_blocks BOOL 1 opt ragged
retention_token_range_starts INT32 -1 opt ragged
retention_token_range_ends INT32 -1 opt ragged
retention_token_range_priorities INT32 -1 opt ragged
retention_token_range_durations_ms INT32 -1 opt ragged
retention_decode_priority INT32 1 opt ragged
retention_decode_duration_ms INT32 1 opt ragged
guided_decoding_guide_type STRING 1 opt ragged
guided_decoding_guide STRING 1 opt ragged
lookahead_window_size INT32 1 opt ragged
lookahead_ngram_size INT32 1 opt ragged
lookahead_verification_set_size INT32 1 opt ragged
"""
# name type dims
LLM_OUTPUTS_TAIL = """
cum_log_probs FP32 -1
output_log_probs FP32 -1,-1
context_logits FP32 -1,-1
generation_logits FP32 -1,-1,-1
batch_index INT32 1
sequence_index INT32 1
"""
COUNTERS = """
kv_cache_alloc_new_blocks INT32 1
kv_cache_reused_blocks INT32 1
kv_cache_alloc_total_blocks INT32 1
arrival_time_ns INT64 1
first_scheduled_time_ns INT64 1
first_token_time_ns INT64 1
last_token_time_ns INT64 1
acceptance_rate FP32 1
total_accepted_draft_tokens INT32 1
total_draft_tokens INT32 1
num_input_tokens INT32 1
num_output_tokens INT32 1
"""
TENSORRT_LLM_OUTPUTS = (
    "output_ids INT32 -1,-1\nsequence_length INT32 -1\n"
    + LLM_OUTPUTS_TAIL
    + "context_phase_params UINT8 -1\n"
    + COUNTERS
)
PREPROCESSING_INPUTS = """
QUERY STRING 1
DECODER_QUERY STRING 1 opt
IMAGE_BYTES UINT8 -1,-1,-1,-1 opt
IMAGE_URL STRING 1 opt
IMAGES STRING -1 opt
VIDEO_BYTES UINT8 -1,-1,-1,-1 opt
REQUEST_OUTPUT_LEN INT32 1
BAD_WORDS_DICT STRING -1 opt
STOP_WORDS_DICT STRING -1 opt
EMBEDDING_BIAS_WORDS STRING -1 opt
EMBEDDING_BIAS_WEIGHTS FP32 -1 opt
END_ID INT32 1 opt
PAD_ID INT32 1 opt
PROMPT_TABLE_EXTRA_ID UINT64 1 opt
"""
PREPROCESSING_OUTPUTS = """
INPUT_ID INT32 -1
REQUEST_INPUT_LEN INT32 1
DECODER_INPUT_ID INT32 -1
REQUEST_DECODER_INPUT_LEN INT32 1
BAD_WORDS_IDS INT32 2,-1
STOP_WORDS_IDS INT32 2,-1
EMBEDDING_BIAS FP32 -1
REQUEST_OUTPUT_LEN INT32 -1
OUT_END_ID INT32 1
OUT_PAD_ID INT32 1
OUT_PROMPT_TABLE_EXTRA_IDS UINT64 -1
PIXEL_VALUES FP16 -1,-1,-1,-1
ASPECT_RATIO_IDS INT64 -1
ASPECT_RATIO_MASK INT64 -1,-1
CROSS_ATTENTION_MASK INT64 -1,-1,-1
IMAGE_SIZES INT64 -1,2
IS_VIDEO_INPUT BOOL 1
ATTENTION_MASK INT64 -1
IMAGE_GRID_THW INT64 3
VISION_INPUT_ID INT32 -1
"""
POSTPROCESSING_INPUTS = "TOKENS_BATCH INT32 -1,-1\nSEQUENCE_LENGTH INT32 -1\n"
POSTPROCESSING_OUTPUTS = "OUTPUT STRING -1\n"
BLS_INPUTS = """
text_input STRING 1
decoder_text_input STRING 1 opt
image_input FP16 -1,3,-1,-1 opt
image_bytes_input UINT8 -1,-1,-1,-1 opt
image_url_input STRING 1 opt
video_bytes_input UINT8 -1,-1,-1,-1 opt
max_tokens INT32 1
bad_words STRING -1 opt
stop_words STRING -1 opt
exclude_input_in_output BOOL 1 opt
end_id INT32 1 opt
pad_id INT32 1 opt
top_k INT32 1 opt
top_p FP32 1 opt
temperature FP32 1 opt
length_penalty FP32 1 opt
repetition_penalty FP32 1 opt
min_tokens INT32 1 opt
presence_penalty FP32 1 opt
frequency_penalty FP32 1 opt
seed UINT64 1 opt
return_log_probs BOOL 1 opt reshape
return_context_logits BOOL 1 opt reshape
return_generation_logits BOOL 1 opt reshape
num_return_sequences INT32 1 opt reshape
beam_width INT32 1 opt
stream BOOL 1 opt
prompt_embedding_table FP16 -1,-1 opt
prompt_vocab_size INT32 1 opt
prompt_table_extra_id UINT64 1 opt
embedding_bias_words STRING -1 opt
embedding_bias_weights FP32 -1 opt
num_draft_tokens INT32 1 opt
use_draft_logits BOOL 1 opt reshape
lora_task_id UINT64 1 opt reshape
lora_weights FP16 -1,-1 opt ragged
lora_config INT32 -1,3 opt ragged
return_perf_metrics BOOL 1 opt reshape
return_num_input_tokens BOOL 1 opt reshape
return_num_output_tokens BOOL 1 opt reshape
guided_decoding_guide_type STRING 1 opt
guided_decoding_guide STRING 1 opt
"""
TEXT_OUTPUTS = "text_output STRING -1\n" + LLM_OUTPUTS_TAIL + COUNTERS
ENSEMBLE_INPUTS = """
text_input STRING 1
decoder_text_input STRING 1 opt
max_tokens INT32 1
num_return_sequences INT32 1 opt
bad_words STRING -1 opt
stop_words STRING -1 opt
exclude_input_in_output BOOL 1 opt
end_id INT32 1 opt
pad_id INT32 1 opt
top_k INT32 1 opt
top_p FP32 1 opt
temperature FP32 1 opt
length_penalty FP32 1 opt
repetition_penalty FP32 1 opt
min_tokens INT32 1 opt
presence_penalty FP32 1 opt
frequency_penalty FP32 1 opt
seed UINT64 1 opt
return_log_probs BOOL 1 opt
return_context_logits BOOL 1 opt
return_generation_logits BOOL 1 opt
return_perf_metrics BOOL 1 opt
return_num_input_tokens BOOL 1 opt
return_num_output_tokens BOOL 1 opt
beam_width INT32 1 opt
stream BOOL 1 opt
prompt_embedding_table FP16 -1,-1 opt
prompt_table_extra_id UINT64 1 opt
prompt_vocab_size INT32 1 opt
embedding_bias_words STRING -1 opt
embedding_bias_weights FP32 -1 opt
lora_task_id UINT64 1 opt
lora_weights FP16 -1,-1 opt ragged
lora_config INT32 -1,3 opt ragged
guided_decoding_guide_type STRING 1 opt ragged
guided_decoding_guide STRING 1 opt ragged
"""
TENSORRT_LLM_PARAMETERS = {
    "max_beam_width", "FORCE_CPU_ONLY_INPUT_TENSORS", "gpt_model_type", "gpt_model_path", "encoder_model_path",
    "max_tokens_in_paged_kv_cache", "max_attention_window_size", "sink_token_length", "batch_scheduler_policy",
    "kv_cache_free_gpu_mem_fraction", "cross_kv_cache_fraction", "kv_cache_host_memory_bytes",
    "kv_cache_onboard_blocks", "enable_trt_overlap", "exclude_input_in_output", "cancellation_check_period_ms",
    "stats_check_period_ms", "iter_stats_max_iterations", "request_stats_max_iterations", "enable_kv_cache_reuse",
    "normalize_log_probs", "enable_chunked_context", "gpu_device_ids", "participant_ids", "num_nodes",
    "lora_cache_optimal_adapter_size", "lora_cache_max_adapter_size", "lora_cache_gpu_memory_fraction",
    "lora_cache_host_memory_bytes", "lora_prefetch_dir", "decoding_mode", "executor_worker_path",
    "lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size", "medusa_choices",
    "eagle_choices", "gpu_weights_percent", "enable_context_fmha_fp32_acc", "multi_block_mode", "cuda_graph_mode",
    "cuda_graph_cache_size", "speculative_decoding_fast_logits", "tokenizer_dir", "guided_decoding_backend",
    "xgrammar_tokenizer_info_path",
}  # fmt: skip
PARAMETERS = {
    "tensorrt_llm": TENSORRT_LLM_PARAMETERS,
    "tensorrt_llm_draft": TENSORRT_LLM_PARAMETERS,
    "preprocessing": {"tokenizer_dir", "add_special_tokens", "multimodal_model_path", "gpt_model_path",
                      "max_num_images", "hf_model_path"},
    "postprocessing": {"tokenizer_dir", "skip_special_tokens"},
    # upstream's four, plus sdtk's five documented extensions
    "tensorrt_llm_bls": {"accumulate_tokens", "tensorrt_llm_model_name", "tensorrt_llm_draft_model_name",
                         "multimodal_encoders_name", "default_num_draft_tokens", "default_use_draft_logits",
                         "exclude_input_in_output", "max_input_len", "max_seq_len"},
    "ensemble": set(),
}  # fmt: skip
CONTRACT = {
    "tensorrt_llm": (TENSORRT_LLM_INPUTS, TENSORRT_LLM_OUTPUTS),
    "tensorrt_llm_draft": (TENSORRT_LLM_INPUTS, TENSORRT_LLM_OUTPUTS),
    "preprocessing": (PREPROCESSING_INPUTS, PREPROCESSING_OUTPUTS),
    "postprocessing": (POSTPROCESSING_INPUTS, POSTPROCESSING_OUTPUTS),
    "tensorrt_llm_bls": (BLS_INPUTS, TEXT_OUTPUTS),
    "ensemble": (ENSEMBLE_INPUTS, TEXT_OUTPUTS),
}
# Ensemble steps: model → (input_map, output_map), model tensor → ensemble tensor.
WIRING = {
    "preprocessing": (
        "QUERY=text_input DECODER_QUERY=decoder_text_input REQUEST_OUTPUT_LEN=max_tokens BAD_WORDS_DICT=bad_words "
        "STOP_WORDS_DICT=stop_words EMBEDDING_BIAS_WORDS=embedding_bias_words "
        "EMBEDDING_BIAS_WEIGHTS=embedding_bias_weights END_ID=end_id PAD_ID=pad_id "
        "PROMPT_TABLE_EXTRA_ID=prompt_table_extra_id",
        "REQUEST_INPUT_LEN=_REQUEST_INPUT_LEN INPUT_ID=_INPUT_ID REQUEST_DECODER_INPUT_LEN=_REQUEST_DECODER_INPUT_LEN "
        "DECODER_INPUT_ID=_DECODER_INPUT_ID REQUEST_OUTPUT_LEN=_REQUEST_OUTPUT_LEN STOP_WORDS_IDS=_STOP_WORDS_IDS "
        "BAD_WORDS_IDS=_BAD_WORDS_IDS EMBEDDING_BIAS=_EMBEDDING_BIAS OUT_END_ID=_PREPROCESSOR_END_ID "
        "OUT_PAD_ID=_PREPROCESSOR_PAD_ID OUT_PROMPT_TABLE_EXTRA_IDS=_OUT_PROMPT_TABLE_EXTRA_IDS",
    ),
    "tensorrt_llm": (
        "input_ids=_INPUT_ID decoder_input_ids=_DECODER_INPUT_ID input_lengths=_REQUEST_INPUT_LEN "
        "decoder_input_lengths=_REQUEST_DECODER_INPUT_LEN exclude_input_in_output=exclude_input_in_output "
        "request_output_len=_REQUEST_OUTPUT_LEN end_id=_PREPROCESSOR_END_ID pad_id=_PREPROCESSOR_PAD_ID "
        "embedding_bias=_EMBEDDING_BIAS runtime_top_k=top_k runtime_top_p=top_p temperature=temperature "
        "len_penalty=length_penalty repetition_penalty=repetition_penalty min_tokens=min_tokens "
        "presence_penalty=presence_penalty frequency_penalty=frequency_penalty seed=seed "
        "return_log_probs=return_log_probs return_context_logits=return_context_logits "
        "return_generation_logits=return_generation_logits return_perf_metrics=return_perf_metrics "
        "return_num_input_tokens=return_num_input_tokens return_num_output_tokens=return_num_output_tokens "
        "num_return_sequences=num_return_sequences beam_width=beam_width streaming=stream "
        "prompt_embedding_table=prompt_embedding_table prompt_vocab_size=prompt_vocab_size "
        "stop_words_list=_STOP_WORDS_IDS bad_words_list=_BAD_WORDS_IDS prompt_table_extra_ids=_OUT_PROMPT_TABLE_EXTRA_IDS "
        "lora_task_id=lora_task_id lora_weights=lora_weights lora_config=lora_config "
        "guided_decoding_guide_type=guided_decoding_guide_type guided_decoding_guide=guided_decoding_guide",
        "output_ids=_TOKENS_BATCH sequence_length=_SEQUENCE_LENGTH cum_log_probs=cum_log_probs "
        "output_log_probs=output_log_probs context_logits=context_logits generation_logits=generation_logits "
        "batch_index=batch_index sequence_index=sequence_index kv_cache_alloc_new_blocks=kv_cache_alloc_new_blocks "
        "kv_cache_reused_blocks=kv_cache_reused_blocks kv_cache_alloc_total_blocks=kv_cache_alloc_total_blocks "
        "arrival_time_ns=arrival_time_ns first_scheduled_time_ns=first_scheduled_time_ns "
        "first_token_time_ns=first_token_time_ns last_token_time_ns=last_token_time_ns acceptance_rate=acceptance_rate "
        "total_accepted_draft_tokens=total_accepted_draft_tokens total_draft_tokens=total_draft_tokens "
        "num_input_tokens=num_input_tokens num_output_tokens=num_output_tokens",
    ),
    "postprocessing": ("TOKENS_BATCH=_TOKENS_BATCH SEQUENCE_LENGTH=_SEQUENCE_LENGTH", "OUTPUT=text_output"),
}


def table(text: str) -> dict[str, tuple]:
    out = {}
    for line in text.split("\n"):
        if not line.strip():
            continue
        name, dtype, dims, *flags = line.split()
        dims_t = tuple(int(d) for d in dims.split(","))
        out[name] = (f"TYPE_{dtype}", dims_t, "opt" in flags, "reshape" in flags, "ragged" in flags)
    return out


def rendered(cfg: model_config_pb2.ModelConfig) -> tuple[dict[str, tuple], dict[str, tuple]]:
    dt = model_config_pb2.DataType.Name
    inputs = {
        i.name: (dt(i.data_type), tuple(i.dims), i.optional, i.HasField("reshape") and list(i.reshape.shape) == [],
                 i.allow_ragged_batch)
        for i in cfg.input
    }  # fmt: skip
    outputs = {o.name: (dt(o.data_type), tuple(o.dims), False, False, False) for o in cfg.output}
    return inputs, outputs


@pytest.fixture(scope="module", params=["engine", "reference"])
def repository(request, tmp_path_factory):
    from toolkit.repo import render_repository

    from .conftest import engines_for, make_recipe

    root = tmp_path_factory.mktemp(request.param)
    recipe = make_recipe(request.param, "draft_target", serving={"decoupled": False})
    engines = engines_for(root, recipe, request.param)
    # CONTRACT is the newest template (0c8de69): render the engine for an undeclared version.
    # Per-version contracts are checked in tests/contracts/.
    for path in engines.values():
        cfg = json.loads((Path(path) / "config.json").read_text())
        cfg.pop("version", None)
        (Path(path) / "config.json").write_text(json.dumps(cfg))
    result = render_repository(
        recipe,
        engines,
        root / "repo",
        backend=request.param,
        tokenizer_dir="/tok",
    )
    cfgs = {}
    for name in result.models:
        cfg = model_config_pb2.ModelConfig()
        text_format.Parse((result.path / name / "config.pbtxt").read_text(), cfg)
        cfgs[name] = cfg
    return cfgs


@pytest.mark.parametrize("model", list(CONTRACT))
def test_tensor_contract(repository, model):
    inputs, outputs = rendered(repository[model])
    want_in, want_out = (table(t) for t in CONTRACT[model])
    assert list(inputs) == list(want_in), "input names and order"
    for name, spec in want_in.items():
        assert inputs[name] == spec, f"{model} input {name}"
    assert list(outputs) == list(want_out), "output names and order"
    for name, spec in want_out.items():
        assert outputs[name] == spec, f"{model} output {name}"


@pytest.mark.parametrize("model", list(PARAMETERS))
def test_parameter_keys(repository, model):
    assert set(repository[model].parameters) == PARAMETERS[model]


def test_model_kinds(repository):
    assert repository["ensemble"].platform == "ensemble"
    for name in ("preprocessing", "postprocessing", "tensorrt_llm_bls"):
        assert repository[name].backend == "python"
    assert repository["tensorrt_llm"].backend in ("tensorrtllm", "python")
    for name in ("preprocessing", "tensorrt_llm", "tensorrt_llm_draft"):
        assert repository[name].HasField("dynamic_batching")
    assert not repository["ensemble"].HasField("model_transaction_policy")


def test_ensemble_wiring(repository):
    steps = repository["ensemble"].ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["preprocessing", "tensorrt_llm", "postprocessing"]
    for step in steps:
        ins, outs = WIRING[step.model_name]
        assert dict(step.input_map) == dict(x.split("=") for x in ins.split())
        assert dict(step.output_map) == dict(x.split("=") for x in outs.split())
        assert step.model_version == -1


def test_ensemble_steps_match_the_models_they_call(repository):
    """Triton requires an ensemble tensor's type to match every model input or output it maps to."""
    ens_in, ens_out = rendered(repository["ensemble"])
    for step in repository["ensemble"].ensemble_scheduling.step:
        model_in, model_out = rendered(repository[step.model_name])
        for model_name, tensor in step.input_map.items():
            if tensor in ens_in:
                assert model_in[model_name][0] == ens_in[tensor][0], (step.model_name, model_name)
        for model_name, tensor in step.output_map.items():
            if tensor in ens_out:
                assert model_out[model_name][0] == ens_out[tensor][0], (step.model_name, model_name)
