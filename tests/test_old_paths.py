"""The module paths of the old flat layout keep working for one release (docs/layout.md): ``import`` of an old
name gives the module at its new path itself (so patching either name patches both), with a
DeprecationWarning; old names that became packages forward their old attributes; ``python -m`` of an old name
runs the new module. Real imports, in this process and in fresh ones."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import warnings

import pytest

from mdmem.util.moved import OLD_PATHS
from tests.conftest import REPO


@pytest.mark.parametrize(("old", "new"), sorted(OLD_PATHS.items()))
def test_an_old_path_is_the_module_at_its_new_path(old: str, new: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert importlib.import_module(old) is importlib.import_module(new)


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=120)


def test_an_old_path_warns_and_names_the_new_one_but_the_old_console_script_does_not() -> None:
    warned = _python("-W", "error::DeprecationWarning", "-c", "import mdmem.cli_format")
    assert warned.returncode == 1 and "mdmem.cli_format is now mdmem.cli.formatting" in warned.stderr
    quiet = _python("-W", "error::DeprecationWarning", "-c", "from mdmem.entry import main; print(main)")
    assert quiet.returncode == 0 and "function main" in quiet.stdout


def test_old_modules_that_became_packages_forward_their_attributes() -> None:
    from mdmem import cli
    from mdmem.config import load_config
    from mdmem.config.load import load_config as moved

    assert load_config is moved and cli.main is importlib.import_module("mdmem.cli.commands").main


def test_python_dash_m_of_an_old_name_runs_the_new_module() -> None:
    ran = _python("-m", "mdmem.cli_format")  # a module without a __main__ block: runs, prints nothing
    assert ran.returncode == 0, ran.stderr
    helped = _python("-W", "ignore::DeprecationWarning", "-m", "mdmem.mcp_server", "--help")
    new = _python("-m", "mdmem.mcp.server", "--help")
    assert (helped.returncode, helped.stdout) == (new.returncode, new.stdout)
