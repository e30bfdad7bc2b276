"""The shared secret rules: names that carry credentials and strings that look like one."""

from __future__ import annotations

import pytest

from mdmem.util.redaction.credentials import is_secret_name, looks_secret, redact_value, scrub


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("Authorization", True),
        ("api-key", True),
        ("apiKey", True),
        ("x-goog-api-key", True),
        ("access_token", True),
        ("Cookie", True),
        ("password", True),
        ("X-Org", False),
        ("Content-Type", False),
        ("baseUrl", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("sk-abcdef123456", "[REDACTED:openai_key]"),
        ("key is sk-proj_AbC-123456 ok", "key is [REDACTED:openai_key] ok"),
        ("Bearer abc.def.ghi", "Bearer [REDACTED:bearer_token]"),
        ("https://me:hunter2@host/v1", "https://[REDACTED:url_password]@host/v1"),
        ("https://host/v1", None),
        ("sk-short", None),
        ("plain words", None),
    ],
)
def test_secret_looking_text_is_scrubbed(text: str, shown: str | None) -> None:
    assert looks_secret(text) is (shown is not None)
    assert scrub(text) == (text if shown is None else shown)


def test_redact_value_walks_objects_and_lists() -> None:
    value = {"tokens": 400, "token": "abc", "list": [{"Authorization": "x"}, "sk-abcdef123456", "ok"], "n": 1}
    assert redact_value(value, public={"tokens"}) == {
        "tokens": 400,
        "token": "[REDACTED]",
        "list": [{"Authorization": "[REDACTED]"}, "[REDACTED]", "ok"],
        "n": 1,
    }


def test_kinds_the_new_detector_knows_are_scrubbed_too() -> None:
    token = "gh" + "p_" + "aZ7" * 12  # assembled so no token-shaped literal sits in the repository
    assert looks_secret(f"push failed for {token}")
    assert scrub(f"push failed for {token}") == "push failed for [REDACTED:github_token]"
    assert redact_value({"note": f"use {token}"}) == {"note": "[REDACTED]"}


def test_one_marker_format_in_the_package() -> None:
    """No module outside mdmem.util.redaction writes a marker of its own (``***``, ``<redacted>``, a hand-made
    ``[REDACTED...]``): they all use that package's (docstrings aside)."""
    import ast
    from pathlib import Path

    import mdmem

    root = Path(mdmem.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if path.parent.name == "redaction":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                value = node.value
                if value == "***" or "<redacted>" in value.lower() or value.startswith("[REDACTED"):
                    found.append(f"{path.relative_to(root)}: {value!r}")
    assert found == [], found
