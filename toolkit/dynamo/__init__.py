"""NVIDIA Dynamo as a serving target: `sdtk deploy RECIPE --target dynamo`.

- `plan.py`: the deployment's processes (Dynamo's frontend, N workers) as argv + environment,
  for a launch and for `--dry-run`; the TensorRT-LLM workers' engine YAML.
- `supervisor.py`: the one process recorded in state.json; it starts the frontend and the workers
  in its own process group, restarts a worker that dies, and stops them all on SIGTERM.
- `worker.py`: sdtk's reference runtime served as a Dynamo worker (CPU), each response's final
  chunk carrying the request's acceptance (`engine_data`).
- `kvevents.py`: the worker's KV events for Dynamo's KV router (`router_mode: kv`).
- `status.py`: `sdtk status` and `sdtk stop` of a Dynamo deployment (each process named).
- `launch.py`: deploy's Dynamo branch: spawn the supervisor under the workdir lock, wait until
  the frontend lists the model and every worker served, check greedy correctness.

Dynamo itself (`ai-dynamo`) is an optional install (the `dynamo` extra, scripts/setup_env.sh);
everything that imports it does so lazily, inside the worker and supervisor processes.
"""
