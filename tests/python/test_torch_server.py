"""The benchmark's torch server (bench/torch_server.py): how it times a baseline."""

import importlib.util
import pathlib
import time

SERVER = pathlib.Path(__file__).resolve().parents[2] / "bench" / "torch_server.py"


def load_server():
    spec = importlib.util.spec_from_file_location("torch_server", SERVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def state_with(server, impl):
    st = server.State()
    st.cases.append(server.Case("fake", [], [], {"eager": impl}))
    return st


def test_a_fast_call_is_warmed_up_twice_and_timed_at_least_three_times():
    server = load_server()
    calls = []
    st = state_with(server, lambda t, s: calls.append(1))
    r = server.time_impl(st, {"case": 0, "impl": "eager", "threads": 1, "min_seconds": 0})
    assert r["reps"] >= 3
    assert len(calls) == r["reps"] + 2


def test_a_call_of_over_a_second_is_timed_once_with_no_warm_up_after_its_first():
    server = load_server()
    server.SLOW_CALL_MS = 20.0  # the rule, at a scale a test can afford
    calls = []

    def slow(t, s):
        calls.append(1)
        time.sleep(0.03)

    st = state_with(server, slow)
    req = {"case": 0, "impl": "eager", "threads": 1, "min_seconds": 0.2}
    first = server.time_impl(st, req)
    assert first["reps"] == 1 and first["median_ms"] >= 30
    assert len(calls) == 1  # its first call is the time
    second = server.time_impl(st, req)
    assert second["reps"] == 1 and second["median_ms"] >= 30
    assert len(calls) == 2


def test_torch_compiles_first_call_is_not_a_time():
    server = load_server()
    server.SLOW_CALL_MS = 20.0
    calls = []

    def compiles_first(t, s):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.05)  # compilation

    st = server.State()
    st.cases.append(server.Case("fake", [], [], {"compile": compiles_first}))
    st.compiling.add((0, "compile"))
    r = server.time_impl(st, {"case": 0, "impl": "compile", "threads": 1, "min_seconds": 0})
    assert r["reps"] >= 3 and r["median_ms"] < 20  # not taken for a slow call
    assert len(calls) == r["reps"] + 3  # the compiling call, a first call, a warm-up
