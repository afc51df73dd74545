"""One error hierarchy: every exception class of the engine is a LightfootError, under its old bases too."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import lightfoot_pipeline
from lightfoot_pipeline import errors
from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.models.llm import HINTS, LLMError
from lightfoot_pipeline.settings import SettingsError
from lightfoot_pipeline.store.log import ConcurrentCommitError, StoreError, StoreUnavailable


def engine_exception_classes() -> dict[str, type]:
    """Every exception class defined in a module of lightfoot_pipeline, by name."""
    found = {}
    for module_info in pkgutil.walk_packages(lightfoot_pipeline.__path__, "lightfoot_pipeline."):
        if module_info.name.endswith("__main__"):
            continue  # running it is the command line
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__:
                found[name] = value
    return found


def test_every_exception_class_of_the_engine_is_a_lightfoot_error():
    classes = engine_exception_classes()
    assert len(classes) >= 19  # the families of errors.py's docstring, and LightfootError itself
    assert [name for name, cls in classes.items() if not issubclass(cls, LightfootError)] == []


def test_errors_docstring_names_every_family():
    documented = errors.__doc__
    missing = [name for name in engine_exception_classes() if name != "LightfootError" and name not in documented]
    assert missing == []


@pytest.mark.parametrize("name, builtin", [
    ("DatasetError", ValueError), ("PolicyError", ValueError), ("RunError", ValueError), ("SettingsError", ValueError),
    ("AuthConfigError", ValueError), ("BadRequest", ValueError), ("StoreError", RuntimeError),
    ("IndexConfigError", RuntimeError), ("SnapshotError", RuntimeError), ("RetrievalError", RuntimeError),
    ("LLMError", RuntimeError), ("EmbedderUnavailable", RuntimeError), ("RerankerUnavailable", RuntimeError),
    ("HarnessError", RuntimeError), ("NoSnapshotLoaded", RuntimeError), ("EmbedderRequired", RuntimeError),
    ("StoreUnavailable", OSError), ("BatchError", ValueError),
])
def test_each_family_keeps_the_builtin_base_it_is_caught_by(name, builtin):
    assert issubclass(engine_exception_classes()[name], builtin)


def test_a_store_out_of_reach_is_a_store_error_and_an_os_error():
    # Callers that retry on OSError (the query service's snapshot watcher) still do.
    assert issubclass(StoreUnavailable, StoreError) and issubclass(StoreUnavailable, OSError)
    err = StoreUnavailable("store s3://b/p: cannot read it")
    assert str(err) == "store s3://b/p: cannot read it" and err.errno is None


def test_line_is_one_line_with_what_to_do():
    err = LightfootError("cannot read x:\n  Kernel error\n    connection refused.", hint="check the URI")
    assert err.line() == "cannot read x: Kernel error connection refused; check the URI"
    assert LightfootError("no hint here.").line() == "no hint here."
    assert LightfootError().line() == "LightfootError"


def test_hints_come_from_the_class_or_the_raise():
    assert ConcurrentCommitError("another writer created entities first").line() == (
        f"another writer created entities first; {ConcurrentCommitError.hint}")
    assert SettingsError("x", hint="do y").hint == "do y"
    assert SettingsError("x").hint == "" and LightfootError.hint == ""


@pytest.mark.parametrize("kind", sorted(HINTS))
def test_a_failed_model_call_says_what_to_do_by_its_kind(kind):
    err = LLMError(kind, "what went wrong", attempts=2)
    assert str(err) == f"{kind}: what went wrong"  # the ledger and the ingest report keep the plain message
    assert err.line() == f"{kind}: what went wrong; {HINTS[kind]}"
    assert err.retries == 1


def test_every_kind_of_model_error_has_a_hint():
    documented = LLMError.__doc__.split("is one of", 1)[1]  # "``kind`` is one of ``timeout``, ..."
    kinds = set(documented.split("``")[1::2])
    assert kinds == set(HINTS)
