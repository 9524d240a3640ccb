"""core/lazy.py: a module named at a module's top is imported on first use, and behaves as
the module itself from then on."""

from __future__ import annotations

import subprocess
import sys

import pytest

from copilot_cli.core import lazy


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_a_deferred_module_is_imported_at_its_first_attribute_and_not_before():
    code = (
        "import sys\n"
        "from copilot_cli.core import lazy\n"
        "colorsys = lazy.module('colorsys')\n"
        "print('colorsys' in sys.modules)\n"
        "print(colorsys.rgb_to_hsv(1.0, 0.0, 0.0))\n"
        "real = sys.modules['colorsys']\n"
        "print('colorsys' in sys.modules, colorsys.rgb_to_hsv is real.rgb_to_hsv)\n"
    )
    assert _run(code).splitlines() == ["False", "(0.0, 1.0, 1.0)", "True True"]


def test_introspection_does_not_import_it():
    code = (
        "import copy, sys\n"
        "from copilot_cli.core import lazy\n"
        "wave = lazy.module('wave')\n"
        "print(hasattr(wave, '__wrapped__'), repr(wave), 'wave' in sys.modules)\n"
    )
    assert _run(code) == "False <deferred module 'wave'> False"


def test_a_write_through_it_reaches_the_module_itself():
    import colorsys

    deferred = lazy._Deferred("colorsys")  # as a module declared before colorsys loaded
    kept = colorsys.ONE_THIRD
    try:
        deferred.ONE_THIRD = 0.5
        assert colorsys.ONE_THIRD == 0.5
        assert deferred.ONE_THIRD == 0.5
    finally:
        deferred.ONE_THIRD = kept
    assert kept == colorsys.ONE_THIRD


def test_a_module_already_imported_is_returned_itself():
    import json

    assert lazy.module("json") is json


def test_a_package_that_is_not_installed_fails_at_first_use_not_at_the_declaration():
    missing = lazy.module("copilot_opt_no_such_package")
    with pytest.raises(ModuleNotFoundError, match="copilot_opt_no_such_package"):
        _ = missing.anything


def test_a_change_to_the_module_itself_is_seen_through_it(monkeypatch):
    """Reads are not kept: a test's monkeypatch of the module (after the code has read the
    name once) is what the code reads next."""
    import colorsys

    deferred = lazy._Deferred("colorsys")
    assert deferred.rgb_to_hsv is colorsys.rgb_to_hsv
    monkeypatch.setattr(colorsys, "rgb_to_hsv", len)
    assert deferred.rgb_to_hsv is len
