"""The logic of sdtk's Triton Python models; each `model_repo_templates/**/model.py` is a thin
adapter (its `TritonPythonModel` subclasses a class here).

toolkit.repo copies this package next to every sdtk `model.py` it renders, as the package
`sdtk_serving` (the model's version directory is on the Python backend's sys.path), and the
adapters import it under that name: a rendered repository carries the code it runs, whichever
sdtk (if any) the Python that runs Triton has installed.

- `triton`: parameters, tensors, responses, errors, fault injection and stub health, shared by
  every model.
- `text`: the preprocessing (text → ids) and postprocessing (ids → text) models.
- `preprocessing`, `postprocessing`: text → token ids → text, with a Hugging Face tokenizer.
- `bls`: the tensorrt_llm_bls model (preprocessing → LLM → postprocessing, the draft-target loop).
- `reference`: the reference backend's tensorrt_llm model (its parameters, requests and
  in-flight batching), with `generator` (a request's generation) and `responder` (the one thread
  that makes the Triton calls after execute()).
- `llmapi`: the reference stand-in for TensorRT-LLM's LLM-API model (the llmapi layout).

`triton`, `preprocessing`, `postprocessing` and `bls` import only the standard library, numpy,
transformers, `triton_python_backend_utils` and each other (relatively): the engine repository's
Python models run inside NVIDIA's container, which need not have sdtk installed. The reference
models' modules (`reference`, `generator`, `responder`, `llmapi`) run where sdtk is installed
and import the rest of the package (toolkit.reference, toolkit.modes, toolkit.ops).
"""
