"""The command line's manners: a mistyped word gets the closest known ones, a usage error points to the
command's own help, `flush check` has a default window and says so, `model pull` says why it failed or that
the model is there already, and text `status` shows every field `--json` has.

Every case runs the real command: ``python -m mdmem`` in a subprocess (tests.fault_helpers.cli) or
``mdmem.cli.main`` with the output captured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mdmem.cli import main
from mdmem.cli.formatting import STATUS_LABELS
from mdmem.cli.suggest import did_you_mean, unrecognized
from tests.conftest import MINILM, REPO, write
from tests.fault_helpers import cli, cli_json, write_config


@pytest.fixture
def config(tmp_path: Path, workspace: Path) -> Path:
    write(workspace / "MEMORY.md", "# Memory\n\n## Infra\n\n- Backups run nightly at 02:30 with restic.\n")
    return write_config(tmp_path / "cfg.json5", workspace, tmp_path / "state" / "main.sqlite")


# -- suggestions and help pointers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "suggested", "help_of"),
    [
        (["serach", "backups"], "'search'", "mdmem"),
        (["stauts"], "'status'", "mdmem"),
        (["model", "pul"], "'pull'", "mdmem model"),
        (["flush", "chek", "s1"], "'check'", "mdmem flush"),
        (["store", "migrat"], "'migrate'", "mdmem store"),
        (["search", "backups", "--max-reslts", "3"], "'--max-results'", "mdmem search"),
        (["pack", "backups", "--traec"], "'--trace'", "mdmem pack"),
        (["mcp", "--kind", "grop"], "'group'", "mdmem mcp"),
        (["tools", "--format", "antropic"], "'anthropic'", "mdmem tools"),
        (["--jsn", "status"], "'--json'", "mdmem"),
        (["search"], None, "mdmem search"),  # a missing argument: no guess, the command's help
        (["search", "a", "b"], None, "mdmem search"),  # a stray argument
        (["flush", "check", "s1"], None, "mdmem flush check"),  # --tokens is required
        (["xyzzy"], None, "mdmem"),  # nothing close: no guess
    ],
)
def test_usage_errors_name_the_closest_word_and_the_commands_help(
    config: Path, argv: list[str], suggested: str | None, help_of: str
) -> None:
    done = cli(config, *argv)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and done.stdout == ""
    assert last.startswith("mdmem: error: ") and last.endswith(f"(see `{help_of} --help`)"), last
    if suggested is None:
        assert "did you mean" not in last
    else:
        assert f"did you mean {suggested}" in last
    assert done.stderr.startswith(f"usage: {help_of} ")  # the usage printed is the command's own


def test_a_hidden_option_is_never_suggested(config: Path) -> None:
    done = cli(config, "index", "--workr")  # index --worker is the detached worker's, not in --help
    assert done.returncode == 2 and "unrecognized arguments: --workr" in done.stderr
    assert "--worker" not in done.stderr


@pytest.mark.parametrize(
    ("extras", "message"),
    [
        (["--max-reslts", "3"], "unrecognized arguments: --max-reslts 3 (did you mean '--max-results'?)"),
        (
            ["--forse", "--prun"],
            "unrecognized arguments: --forse --prun (did you mean '--force' for --forse; '--prune' for --prun?)",
        ),
        (["--zzz", "x"], "unrecognized arguments: --zzz x"),
        (["stray"], "unrecognized arguments: stray"),
        (["--forse=1"], "unrecognized arguments: --forse=1 (did you mean '--force'?)"),
    ],
)
def test_unrecognized_messages(extras: list[str], message: str) -> None:
    assert unrecognized(extras, ["--force", "--prune", "--max-results", "-h", "--help"]) == message
    assert did_you_mean("serach", ["index", "search", "status"]) == " (did you mean 'search'?)"
    assert did_you_mean("xyzzy", ["index", "search", "status"]) == ""


def test_the_installed_command_suggests_too(tmp_path: Path) -> None:
    """The ``mdmem`` console script next to this Python (the entry point a user types)."""
    script = Path(sys.executable).with_name("mdmem")
    if not script.is_file():
        pytest.skip("no mdmem script next to this Python")
    env = {**os.environ, "PYTHONPATH": str(REPO), "MDMEMORY_DAEMON": "off"}
    done = subprocess.run([str(script), "indx"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and "did you mean 'index'?" in done.stderr and "(see `mdmem --help`)" in done.stderr


# -- flush check: a default context window, named -----------------------------------------------------------


def test_flush_check_has_a_default_window_and_names_its_source(config: Path) -> None:
    code, default = cli_json(config, "flush", "check", "s1", "--tokens", "1000")
    assert code == 0 and (default["contextWindow"], default["contextWindowSource"]) == (200_000, "default")
    assert default["threshold"] == 200_000 - 20_000 - 4_000 and default["due"] is False
    code, given = cli_json(config, "flush", "check", "s1", "--tokens", "90000", "--context-window", "100000")
    assert code == 0 and (given["contextWindow"], given["contextWindowSource"]) == (100_000, "--context-window")
    assert given["threshold"] == 76_000 and given["due"] is True
    text = cli(config, "flush", "check", "s1", "--tokens", "1000").stdout
    assert "context window 200000 tokens (the default" in text and "--context-window N" in text
    text = cli(config, "flush", "check", "s1", "--tokens", "1000", "--context-window", "100000").stdout
    assert "context window 100000 tokens (--context-window)" in text


# -- model pull: the cause, or the model is there already ------------------------------------------------------


def test_model_pull_of_a_configured_local_gguf_that_exists_says_it_is_there(
    tmp_path: Path, workspace: Path, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path / "cfg.json5", workspace, tmp_path / "s.sqlite", provider="local", local={"modelPath": str(tiny_gguf)}
    )
    assert main(["model", "pull", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"{tiny_gguf}: the model is already there" in out and "nothing to download" in out
    assert main(["model", "pull", "--config", str(config), "--json"]) == 0
    assert '"alreadyPresent": true' in capsys.readouterr().out
    not_a_model = write(tmp_path / "notes.gguf", "not a model")
    assert main(["model", "pull", str(not_a_model), "--config", str(config)]) == 1
    assert "is not a GGUF model file" in capsys.readouterr().err


def test_model_pull_without_huggingface_hub_says_so_and_how_to_install_it(config: Path) -> None:
    """A Python where huggingface_hub cannot be imported (a None entry in sys.modules makes the import fail)."""
    code = (
        "import sys; sys.modules['huggingface_hub'] = None\n"
        "from mdmem.cli import main\n"
        f"sys.exit(main(['model', 'pull', 'hf:owner/repo/model.gguf', '--config', {str(config)!r}]))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "huggingface_hub, which is not installed here" in done.stderr and "pip install" in done.stderr
    assert "ProviderError" not in done.stderr


def test_a_failed_download_says_what_failed(config: Path) -> None:
    pytest.importorskip("huggingface_hub")
    done = cli(config, "model", "pull", "hf:owner/repo/model.gguf")  # HF_HUB_OFFLINE=1 (conftest): it fails
    assert done.returncode == 1
    cause = done.stderr.split("(the download failed: ", 1)[1].split(")", 1)[0]
    name, _, said = cause.partition(": ")
    assert name.isidentifier() and name != "ProviderError" and said.strip(), done.stderr


# -- status: text shows every field JSON has --------------------------------------------------------------


def assert_text_shows_every_field(config: Path) -> str:
    code, status = cli_json(config, "status")
    text = cli(config, "status").stdout
    assert code == 0
    for key in status:
        label = STATUS_LABELS.get(key, key)
        assert any(line.startswith(label) for line in text.splitlines()), (key, label, text)
    assert "None" not in text and "null" not in text, text
    return text


def test_text_status_shows_every_json_field_before_and_after_the_first_index(config: Path) -> None:
    before = assert_text_shows_every_field(config)
    assert "last sync   never" in before and "index       not built yet" in before
    assert "provider    hash (feature-hash-v1, 384 dims) · keyword search · requested hash" in before
    assert cli(config, "index").returncode == 0
    after = assert_text_shows_every_field(config)
    assert "index       built by hash (feature-hash-v1)" in after and "pending     none" in after
    assert "store       " in after and "(sqlite)" in after and "enabled     yes" in after


def test_text_status_of_a_local_model_before_the_first_index_has_no_none_dims(tmp_path: Path, workspace: Path) -> None:
    if not MINILM.is_file():
        pytest.skip(f"{MINILM} is not present")
    write(workspace / "MEMORY.md", "# Memory\n\n- The NAS is called vault.\n")
    config = write_config(
        tmp_path / "cfg.json5", workspace, tmp_path / "s.sqlite", provider="local", local={"modelPath": str(MINILM)}
    )
    text = assert_text_shows_every_field(config)
    assert "all-MiniLM-L6-v2-Q8_0.gguf, dimensions known after the first index" in text
    assert cli(config, "index").returncode == 0
    assert "all-MiniLM-L6-v2-Q8_0.gguf, 384 dims) · hybrid search" in assert_text_shows_every_field(config)
