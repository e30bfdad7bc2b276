"""The pod rule (mdmem.service.pods ``decide``), pure and table-driven; the pod settings' errors; the claims
kept beside an agent's index (mdmem.service.podclaims), raced by several processes. The same through a
real service: tests/test_service_pods.py."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from mdmem.config.load import load_config
from mdmem.service.podclaims import claim, claim_file, read_claim
from mdmem.service.pods import Owner, PodRefused, decide, scoped_id, split_id
from mdmem.util.errors import ConfigError, StoreError

# -- the rule, pure ----------------------------------------------------------------------------------------

CLAIMED_A = Owner("pod-a", "first request", 1764000000.0)


def _never() -> Owner | None:
    raise AssertionError("the claim was looked up where the rule needs none")


@pytest.mark.parametrize(
    ("scope", "configured", "binding", "auto", "claim", "pod", "expected"),
    [
        # no pod, or pods off: the agent with the id, as before pods were looked at
        ("bind", True, "pod-a", False, None, None, "shared"),
        ("off", True, None, False, None, "pod-b", "shared"),
        ("off", False, None, True, None, "pod-b", "shared"),
        # bound in agents.list
        ("bind", True, "pod-a", False, None, "pod-a", "shared"),
        ("bind", True, "pod-a", False, None, "pod-b", PodRefused),
        ("bind", True, "pod-a", True, None, "pod-b", "shared@pod-b"),
        ("namespace", True, "pod-a", False, None, "pod-b", PodRefused),
        ("bind", True, "*", False, None, "pod-b", "shared"),
        ("namespace", True, "*", False, None, "pod-b", "shared"),
        # not bound: the first pod's under "bind"
        ("bind", True, None, False, None, "pod-a", "shared"),  # nobody's yet: claimed now
        ("bind", True, None, False, CLAIMED_A, "pod-a", "shared"),
        ("bind", True, None, False, CLAIMED_A, "pod-b", PodRefused),
        ("bind", True, None, True, CLAIMED_A, "pod-b", "shared@pod-b"),
        ("bind", False, None, True, CLAIMED_A, "pod-a", "shared"),  # an autoAgents agent made for pod-a
        ("bind", False, None, True, CLAIMED_A, "pod-b", "shared@pod-b"),
        # not bound under "namespace": no pod's but by binding
        ("namespace", True, None, False, None, "pod-a", PodRefused),
        ("namespace", True, None, True, None, "pod-a", "shared@pod-a"),
        ("namespace", False, None, True, None, "pod-a", "shared@pod-a"),
        # unknown without autoAgents: the caller refuses it (404), whatever the pod
        ("bind", False, None, False, None, "pod-a", "shared"),
    ],
)
def test_which_agent_answers(
    scope: str, configured: bool, binding: str | None, auto: bool, claim: Owner | None, pod: str | None, expected: Any
) -> None:
    looked = scope == "bind" and binding is None and pod is not None and (configured or auto)
    owner = (lambda: claim) if looked else _never
    kw = {"scope": scope, "configured": configured, "binding": binding, "auto": auto, "owner": owner}
    if expected is PodRefused:
        with pytest.raises(PodRefused) as err:
            decide("shared", pod, **kw)  # type: ignore[arg-type]
        assert f"'{pod}'" in str(err.value) and "Fix:" in str(err.value)
        if binding not in (None, "*") or claim is not None:
            assert "'pod-a'" in str(err.value)  # names both pods
    else:
        assert decide("shared", pod, **kw) == expected  # type: ignore[arg-type]


def test_scoped_ids_round_trip_and_meet_no_agent_id() -> None:
    assert split_id(scoped_id("a.b", "pod-1")) == ("a.b", "pod-1")
    assert split_id("a.b") == ("a.b", None)


@pytest.mark.parametrize(
    ("agent", "service", "problem"),
    [
        ({"id": "a", "pod": "../x"}, {}, "agents.list[0].pod"),
        ({"id": "a", "pod": "a/b"}, {}, "agents.list[0].pod"),
        ({"id": "a", "pod": 5}, {}, "agents.list[0].pod"),
        ({"id": "a", "pod": "pod-a"}, {"podScope": "off"}, 'podScope is "off"'),
        ({"id": "a"}, {"podScope": "pods"}, "service.podScope"),
    ],
)
def test_bad_pod_settings_name_the_key(
    tmp_path: Path, agent: dict[str, Any], service: dict[str, Any], problem: str
) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"agents": {"list": [agent]}, "service": service}))
    with pytest.raises(ConfigError) as err:
        load_config(cfg, env={"MDMEMORY_HOME": str(tmp_path / "home")})
    assert problem in str(err.value) and "Fix:" in str(err.value)


def test_claims_race_to_one_pod_and_a_damaged_claim_is_refused_not_replaced(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"agents": {"list": [{"id": "shared", "workspace": str(tmp_path / "ws")}]}}))
    agent = load_config(cfg, env={"MDMEMORY_HOME": str(tmp_path / "home")}).agent("shared")
    assert read_claim(agent) is None
    ctx = multiprocessing.get_context("spawn")  # fork in a process with threads can inherit a held lock
    with ctx.Pool(6) as pool:  # six processes claim at once, each for a pod of its own: one wins, all see it
        owners = pool.starmap(claim, [(agent, f"pod-{i}") for i in range(6)])
    assert len({o.pod for o in owners}) == 1 and read_claim(agent) == owners[0]
    assert not [p for p in claim_file(agent).parent.iterdir() if p.name.endswith(".tmp")]
    claim_file(agent).write_text('{"pod": "../etc"}')
    for call in (lambda: claim(agent, "pod-x"), lambda: read_claim(agent)):
        with pytest.raises(StoreError) as err:
            call()
        assert str(claim_file(agent)) in str(err.value) and "Fix:" in str(err.value)
    assert claim_file(agent).read_text() == '{"pod": "../etc"}'
