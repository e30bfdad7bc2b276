"""The detect-secrets snapshot (mdmem/util/redaction/upstream.py) is the installed detect-secrets' plugins'
denylists, and every pattern in it has a decision in mdmem.util.redaction.rules.UPSTREAM: a rule, or why not."""

from __future__ import annotations

import importlib.metadata

from mdmem.util.redaction import rules, upstream
from mdmem.util.redaction.rules import UPSTREAM, Rule
from tests.redaction_upstream_sync import denylists


def test_the_snapshot_is_the_installed_detect_secrets() -> None:
    assert upstream.VERSION == importlib.metadata.version("detect-secrets"), (
        "detect-secrets changed. Fix: python -m tests.redaction_upstream_sync, then decide each new pattern in "
        "mdmem/util/redaction/rules.py (UPSTREAM)"
    )
    assert upstream.DENYLISTS == denylists()


def test_every_upstream_pattern_has_a_decision() -> None:
    patterns = {(plugin, i) for plugin, found in upstream.DENYLISTS.items() for i in range(len(found))}
    assert set(UPSTREAM) == patterns
    for key, decision in UPSTREAM.items():
        if isinstance(decision, Rule):
            source, flags = upstream.DENYLISTS[key[0]][key[1]]
            assert (decision.pattern.pattern, decision.pattern.flags) == (source, flags), key
        else:
            assert len(decision) > 20, f"{key}: say why it is not used"


def test_most_upstream_plugins_are_used() -> None:
    used = {plugin for (plugin, _), d in UPSTREAM.items() if isinstance(d, Rule)}
    assert len(used) >= 15, used
    assert {r.kind for r in rules.RULES} >= {"aws_access_key", "github_token", "gitlab_token", "stripe_key"}
