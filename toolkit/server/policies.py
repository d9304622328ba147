"""What a deployment does when one of its Python backend stubs or its server dies: the
`--on-failure` policies, named once. Light on purpose (no imports): the CLI reads it for its
choices; the foreground server (toolkit.server.launch) and the watchdog of a detached deploy
(toolkit.server.watchdog) apply them."""

from __future__ import annotations

POLICY_TEXT = {
    "restart": "restart the server on the same ports",
    "restart-model": "reload the dead model",
    "stop": "stop the server",
    "none": "leave it (sdtk status reports it; sdtk restart MODEL reloads it)",
}
POLICIES = tuple(POLICY_TEXT)  # restart, restart-model, stop, none
WATCHDOG_POLICIES = tuple(p for p in POLICIES if p != "none")  # "none" starts no watchdog
