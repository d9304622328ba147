"""A crashed tritonserver's backtrace, resolved against the real 2.51 binary of the wheel.

The backtrace is the one CI printed on 2026-12-07 when the embedded server (nvidia-pytriton 0.7.0)
segfaulted under the stress traffic of tests/stress/test_served.py; `addr2line -f -C` on the
same binary put its frames in ModelStreamInferHandler::Process and InferHandler<...>::Start's
handler thread. The end-to-end case (a real crash, named by `sdtk status`) is
tests/stress/test_faults.py::test_status_reports_the_crash_of_a_large_form_encoded_request.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.triton_support import requires_tritonserver
from toolkit.server.crashsite import _short, crash_site
from toolkit.server.discover import pytriton_root

pytestmark = requires_tritonserver

CI_BACKTRACE = """W1207 06:47:32.392723 21223 pinned_memory_manager.cc:170] "failed to allocate pinned system memory"
Signal (11) received.
 0# 0x000055643A51A52D in {binary}
 1# 0x00007FB066C5A050 in /lib/x86_64-linux-gnu/libc.so.6
 2# 0x000055643A58997E in {binary}
 3# 0x000055643A57488B in {binary}
 4# 0x00007FB066AD44A3 in /lib/x86_64-linux-gnu/libstdc++.so.6
 5# 0x00007FB066CA71F5 in /lib/x86_64-linux-gnu/libc.so.6
 6# 0x00007FB066D278EC in /lib/x86_64-linux-gnu/libc.so.6
"""


@pytest.fixture
def binary() -> str:
    root = pytriton_root()
    assert root is not None
    path = root / "bin" / "tritonserver"
    assert path.is_file(), path
    return str(path)


def test_the_ci_crash_resolves_to_the_grpc_stream_handler(binary):
    site = crash_site(CI_BACKTRACE.format(binary=binary))
    assert site is not None
    assert site.function == "triton::server::grpc::ModelStreamInferHandler::Process()"
    assert "#7840" in site.known and "#8078" in site.known and "25.04" in site.known
    assert len(site.frames) == 2  # frames 2 and 3; the libc and libstdc++ ones are not the binary's
    assert site.describe().startswith(
        "in triton::server::grpc::ModelStreamInferHandler::Process(): the known race"
    )


def test_the_last_crash_of_a_log_counts(binary):
    earlier = CI_BACKTRACE.format(binary=binary).replace("0x000055643A58997E", "0x000055643A51A52D")
    log = earlier + "I1207 06:48:00 restarted\n" + CI_BACKTRACE.format(binary=binary)
    site = crash_site(log)
    assert site is not None and site.function.endswith("ModelStreamInferHandler::Process()")


def test_a_binary_path_with_spaces(binary, tmp_path):
    link = tmp_path / "dir with spaces" / "tritonserver"
    link.parent.mkdir()
    os.symlink(binary, link)
    site = crash_site(CI_BACKTRACE.format(binary=link))
    assert site is not None and "ModelStreamInferHandler::Process" in site.function


def test_nothing_is_assumed(binary, tmp_path):
    text = CI_BACKTRACE.format(binary=binary)
    assert crash_site("I1207 started\nI1207 serving\n") is None  # no crash
    assert crash_site(text.split(" 0#")[0]) is None  # a signal without a backtrace
    # A binary that cannot be read from here (a container's path, seen from the host).
    assert crash_site(CI_BACKTRACE.format(binary="/opt/tritonserver/bin/tritonserver")) is None
    # A file that is not ELF.
    fake = tmp_path / "tritonserver"
    fake.write_text("#!/bin/sh\n")
    assert crash_site(CI_BACKTRACE.format(binary=fake)) is None
    # Frame 0 outside the signal handler's bytes (0x470-0x645 of its page): no load base, no site.
    shifted = text.replace("0x000055643A51A52D", "0x000055643A51A800")
    assert crash_site(shifted) is None


def test_short_names():
    assert _short("A<B<C> >::f(int, std::vector<int>) const") == "A<>::f()"
    assert _short("evhtp_parse_query_wflags") == "evhtp_parse_query_wflags"
    assert _short("ns::X::{lambda()#1}::operator()() const") == "ns::X::{lambda()#1}::operator()()"
    assert _short("grpc_core::(anonymous namespace)::Lb::f(int)") == "grpc_core::{anonymous}::Lb::f()"


def test_the_binary_is_the_one_the_backtrace_came_from(binary):
    """The CI addresses above hold for this build only (nvidia-pytriton 0.7.0's tritonserver,
    GNU build id a916d4ee...); a new wheel needs a new backtrace."""
    data = Path(binary).read_bytes()
    assert bytes.fromhex("a916d4ee7823ea3c17b3789d705e3b4455dacfc5") in data
