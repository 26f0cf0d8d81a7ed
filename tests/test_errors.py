"""Errors raised by remote envs keep their type on the learner, as with ``SyncVectorEnv``.

The units (``gym_remote.errors``) need no sockets; the rest raises in real client processes and
compares what the learner catches with what ``SyncVectorEnv`` raises for the same envs.
"""

from __future__ import annotations

import builtins
import functools
import logging
import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

from gym_remote import RemoteEnvError, RemoteVectorEnv
from gym_remote.errors import remote_env_error, remote_error_class
from tests.envs import RaisingEnv
from tests.helpers import ThreadClient

TYPED = [
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
    "AssertionError",
    "NotImplementedError",
    "RuntimeError",
    "AttributeError",
    "ZeroDivisionError",
    "gymnasium.error.ResetNeeded",
    "gymnasium.error.InvalidAction",
]


def _report(name: str) -> dict[str, str]:
    module, _, kind = name.rpartition(".")
    return {"type": kind, "module": module or "builtins", "traceback": "Traceback: ...", "message": "m"}


# -- units -------------------------------------------------------------------------------------------


BUILTIN_EXCEPTIONS = [
    name
    for name, kind in vars(builtins).items()
    if isinstance(kind, type) and issubclass(kind, Exception) and name != "ExceptionGroup"
]


@pytest.mark.parametrize("name", BUILTIN_EXCEPTIONS)
def test_every_builtin_exception_arrives_as_itself(name):
    kind = getattr(builtins, name)
    error = remote_env_error("the message 'quoted'", _report(name), slot=3)
    assert isinstance(error, kind) and isinstance(error, RemoteEnvError)
    assert error.slot == 3 and error.remote_type == name and error.remote_module == "builtins"
    assert str(error).startswith("the message 'quoted'")  # not KeyError's repr of its argument
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and again.slot == 3 and str(again) == str(error)


def test_gymnasium_errors_arrive_as_themselves():
    for name in dir(gym.error):
        kind = getattr(gym.error, name)
        if isinstance(kind, type) and issubclass(kind, Exception):
            error = remote_env_error("m", _report(f"gymnasium.error.{name}"))
            assert isinstance(error, kind), name


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("tests.envs", "CustomEnvError"),  # not looked up: nothing is imported for a peer
        ("builtins", "KeyboardInterrupt"),  # not an Exception
        ("builtins", "SystemExit"),
        ("builtins", "print"),  # not a class
        ("builtins", "no_such_name"),
        ("os", "error"),
        ("", "ValueError"),
        ("gym_remote.errors", "RemoteEnvError"),
    ],
)
def test_other_classes_arrive_as_plain_remote_env_errors(module, name):
    assert remote_error_class(module, name) is RemoteEnvError
    error = remote_env_error("m", {"type": name, "module": module})
    assert type(error) is RemoteEnvError and error.remote_type == name


def test_one_class_per_remote_class():
    assert remote_error_class("builtins", "ValueError") is remote_error_class("builtins", "ValueError")
    assert remote_error_class("builtins", "ValueError").__name__ == "RemoteValueError"


# -- against SyncVectorEnv ---------------------------------------------------------------------------


def _raising(error: str, count: int = 3) -> list:
    return [functools.partial(RaisingEnv, error) for _ in range(count)]


CALLS = {
    "step": lambda envs: envs.step(np.array([0, 1, 0])),
    "reset": lambda envs: envs.reset(seed=0, options={"fail": True}),
    "call": lambda envs: envs.call("fail"),
    "get_attr": lambda envs: envs.get_attr("broken"),
    "set_attr": lambda envs: envs.set_attr("fragile", 1),
}


@pytest.mark.parametrize("error", TYPED)
def test_env_errors_are_caught_as_with_sync_vector_env(error):
    sync = SyncVectorEnv(_raising(error))
    remote = RemoteVectorEnv(_raising(error), num_clients=2)
    try:
        for where, call in CALLS.items():
            for envs in (sync, remote):
                envs.reset(seed=0)
            with pytest.raises(Exception) as sync_caught:
                call(sync)
            with pytest.raises(type(sync_caught.value)) as remote_caught:
                call(remote)
            caught = remote_caught.value
            assert isinstance(caught, RemoteEnvError), (where, type(caught).__mro__)
            assert caught.remote_type == error.rsplit(".", 1)[-1]
            assert f"deliberate {error} in" in str(caught) and "Traceback" in caught.remote_traceback
            if where == "step":
                assert caught.slot == 1
        # the vector env is still usable
        remote.reset(seed=1)
        remote.step(np.zeros(3, dtype=np.int64))
    finally:
        remote.close()
        sync.close()


def test_an_exception_class_of_the_env_arrives_as_remote_env_error():
    envs = RemoteVectorEnv(_raising("custom"), num_clients=1)
    try:
        envs.reset(seed=0)
        with pytest.raises(RemoteEnvError) as caught:
            envs.step(np.array([0, 1, 0]))
        assert type(caught.value) is RemoteEnvError
        assert caught.value.remote_type == "CustomEnvError" and caught.value.remote_module == "tests.envs"
    finally:
        envs.close()


def test_get_attr_of_a_missing_attribute_raises_attribute_error_as_sync():
    sync = SyncVectorEnv(_raising("ValueError"))
    remote = RemoteVectorEnv(_raising("ValueError"), num_clients=2)
    try:
        with pytest.raises(AttributeError):
            sync.get_attr("no_such_attribute")
        with pytest.raises(AttributeError) as caught:
            remote.get_attr("no_such_attribute")
        assert "no_such_attribute" in str(caught.value)
        with pytest.raises(AttributeError):
            remote.call("no_such_method", 1, key=2)
        assert remote.get_attr("error") == ("ValueError",) * 3  # and it still answers
    finally:
        remote.close()
        sync.close()


def test_a_missing_attribute_is_no_error_in_the_client_log(caplog, thread_clients):
    envs = RemoteVectorEnv(num_envs=2, connect_timeout=30)
    try:
        thread_clients.append(ThreadClient(envs.address, _raising("ValueError", 2)))
        envs.reset(seed=0)
        with caplog.at_level(logging.DEBUG, logger="gym_remote"):
            with pytest.raises(AttributeError):
                envs.get_attr("no_such_attribute")
            assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
            assert any("no_such_attribute" in record.getMessage() for record in caplog.records)
            with pytest.raises(ValueError):  # an env that fails is still an error in its client's log
                envs.step(np.array([1, 0]))
            assert [record for record in caplog.records if record.levelno == logging.ERROR]
    finally:
        envs.close()


def test_of_several_envs_raising_the_lowest_slot_is_raised_as_sync():
    envs = RemoteVectorEnv(_raising("ValueError", 4), num_clients=4)
    try:
        for attempt in range(5):
            envs.reset(seed=attempt)
            with pytest.raises(ValueError) as caught:
                envs.step(np.array([0, 1, 0, 1]))
            assert caught.value.slot == 1, (attempt, str(caught.value))
    finally:
        envs.close()
