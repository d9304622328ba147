"""Launching and supervising tritonserver.

- `TritonServer` (launch.py): one server handle; start / wait_ready / health / logs / stop,
  foreground `serve_forever`, detached `start(detach=True)`.
- `server_status`, `read_logs`, `follow_logs`, `stop_server` (state.py): `sdtk status | logs |
  stop` against `<workdir>/state.json`.
- `LaunchPlan`, `plan_launch`, `LaunchSite` (plan.py): a launch's facts and its one argv builder.
- `find_tritonserver_candidates`, `choose_tritonserver` (discover.py).

Submodules are imported lazily by their users; importing this package is cheap.
"""
