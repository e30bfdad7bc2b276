"""Provider fallback with real parts: the fake OpenAI server on 127.0.0.1 and a tiny real GGUF model.

Every Memory is opened from a config file with ``Memory.open``, as another process would, and the API key
is checked never to reach a status, a search response, a fallback reason or the index file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mdmem.engine.provider_choice import FALLBACK_RETRY_SECONDS
from mdmem.memory import Memory
from mdmem.search.hybrid import search as run_search
from mdmem.store import Store
from tests.conftest import write
from tests.fake_openai import FakeOpenAIServer, Fault

pytest.importorskip("llama_cpp")
pytest.importorskip("openai")

KEY = "sk-test-SECRET-fallback"
NOTES = {
    "MEMORY.md": "# Memory\n\n## Birds\nA grey heron fishes by the river every morning.\n",
    "memory/2026-04-01.md": "# 2026-04-01\n\nMet Alice about the vector index project.\n",
    "memory/2026-04-02.md": "# 2026-04-02\n\nThe backup job copied the photo archive to the NAS.\n",
}
OpenMemory = Callable[..., Memory]


@pytest.fixture
def notes(workspace: Path) -> Path:
    for rel, text in NOTES.items():
        write(workspace / rel, text)
    return workspace


@pytest.fixture
def open_memory(tmp_path: Path, notes: Path) -> Iterator[Callable[..., Memory]]:
    """``open_memory(memory_search)`` writes (or reuses) a config file and returns ``Memory.open`` of it.

    The same settings give the same file, so a second call stands for another process with that config.
    """
    opened: list[Memory] = []

    def factory(memory_search: dict[str, Any]) -> Memory:
        body = json.dumps({"agents": {"defaults": {"workspace": str(notes), "memorySearch": memory_search}}})
        path = tmp_path / f"config-{abs(hash(body))}.json5"
        path.write_text(body)
        mem = Memory.open(config_path=path)
        opened.append(mem)
        return mem

    yield factory
    for mem in opened:
        mem.close()


def remote(server: FakeOpenAIServer) -> dict[str, Any]:
    """remote settings for the fake server: the secret key, one retry (at most 0.5 s backoff), short timeout."""
    return {"baseUrl": server.url, "apiKey": KEY, "dimensions": 8, "maxRetries": 1, "timeoutSeconds": 5}


def settings(primary: str, fallback: str, server: FakeOpenAIServer, model_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "provider": primary,
        "fallback": fallback,
        "remote": remote(server),
        "local": {"modelPath": str(model_path), "threads": 1},
        "sync": {"watch": False},
        **extra,
    }


def failures(n: int) -> list[Fault]:
    return [Fault.server_error()] * n


def assert_no_secret(mem: Memory, *payloads: object) -> None:
    """The key is in none of ``payloads``, the status, the persisted fallback state or the index files."""
    for payload in (mem.status(), mem.store.get_meta("fallback"), *payloads):
        assert KEY not in json.dumps(payload) and "SECRET" not in json.dumps(payload)
    store = mem.store.path
    for path in store.parent.glob(f"{store.name}*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


# -- a. the primary cannot even start --------------------------------------------------------------------


def test_missing_local_model_falls_back_to_openai(open_memory: OpenMemory, fake_openai, tmp_path: Path) -> None:
    missing = tmp_path / "models" / "absent-model.gguf"
    config = settings("local", "openai", fake_openai, missing)
    mem = open_memory(config)

    report = mem.sync()

    assert report["indexed"] == len(NOTES) and not report["errors"]
    status = mem.status()
    fallback = status["fallback"]
    assert fallback == {"from": "local", "reason": fallback["reason"]}
    assert str(missing) in fallback["reason"] and "modelPath" in fallback["reason"]
    assert (status["provider"], status["requestedProvider"], status["indexProvider"]) == ("openai", "local", "openai")
    assert status["vectors"] == status["chunks"] > 0 and fake_openai.inputs()
    responses = [mem.search(q) for q in ("heron river", "Alice project", "nothing matches this")]
    for response in responses:
        assert response["fallback"] == fallback
        assert (response["provider"], response["mode"]) == ("openai", "hybrid")
    assert responses[0]["results"][0]["path"] == "MEMORY.md"
    other = open_memory(config)  # another process: the fallback is still reported
    assert other.status()["fallback"] == fallback and other.search("heron")["fallback"] == fallback
    assert_no_secret(mem, report, *responses)


# -- b. the primary fails while indexing -----------------------------------------------------------------


def test_failing_openai_hands_over_to_local_and_other_processes_keep_it(
    open_memory: OpenMemory, fake_openai, tiny_gguf: Path
) -> None:
    fake_openai.enqueue(*failures(20))
    config = settings("openai", "local", fake_openai, tiny_gguf)
    mem = open_memory(config)
    started = time.monotonic()

    report = mem.sync()

    assert time.monotonic() - started < 5
    # the text was indexed at once under the primary's identity; the fallback then rebuilt it beside
    assert report["indexed"] == len(NOTES) and report["rebuilt"] is True and not report["errors"]
    assert fake_openai.pending_faults == 18  # one attempt and one retry, then the hand-over
    status = mem.status()
    fallback = status["fallback"]
    assert fallback == {"from": "openai", "reason": fallback["reason"]}
    assert "HTTP 500" in fallback["reason"] and "127.0.0.1" in fallback["reason"]
    assert (status["provider"], status["indexProvider"], status["dims"]) == ("local", "local", 32)
    assert status["vectors"] == status["chunks"] > 0
    response = mem.search("heron river")
    assert response["fallback"] == fallback and (response["provider"], response["mode"]) == ("local", "hybrid")
    assert_no_secret(mem, report, response)
    mem.close()

    second = open_memory(config)  # a fresh process with the same config
    assert second.status()["fallback"] == fallback
    again = second.sync()
    assert again["rebuilt"] is False and again["indexed"] == 0 and again["unchanged"] == len(NOTES)
    later = second.search("heron river")
    assert later["fallback"] == fallback and later["provider"] == "local" and "warnings" not in later
    assert fake_openai.pending_faults == 18  # the primary was not tried again during the cool-down
    assert_no_secret(second, again, later)


def test_a_repeated_failure_after_the_cool_down_starts_a_new_one(
    open_memory: OpenMemory, fake_openai, tiny_gguf: Path
) -> None:
    fake_openai.enqueue(*failures(20))
    config = settings("openai", "local", fake_openai, tiny_gguf)
    first = open_memory(config)
    first.sync()
    state = first.store.get_meta("fallback")
    first.store.set_meta("fallback", {**state, "at": state["at"] - FALLBACK_RETRY_SECONDS - 1})  # an hour passes
    first.close()

    retry = open_memory(config)
    assert retry.status()["provider"] == "openai"  # the cool-down is over: the primary gets another chance
    assert retry.sync()["rebuilt"] is False  # it fails again, the fallback's index is still current
    assert fake_openai.pending_faults == 16 and retry.status()["fallback"]["from"] == "openai"
    retry.close()

    after = open_memory(config)
    after.sync()
    assert after.status()["provider"] == "local"
    assert fake_openai.pending_faults == 16  # a new cool-down: the primary is left alone


def test_a_process_on_the_fallback_follows_the_restored_primary(
    open_memory: OpenMemory, fake_openai, tiny_gguf: Path, workspace: Path
) -> None:
    fake_openai.enqueue(*failures(2))
    config = settings("openai", "local", fake_openai, tiny_gguf)
    long_lived = open_memory(config)  # an agent runtime, say, that stays up
    long_lived.sync()
    state = long_lived.store.get_meta("fallback")
    long_lived.store.set_meta("fallback", {**state, "at": state["at"] - FALLBACK_RETRY_SECONDS - 1})
    restorer = open_memory(config)  # after the cool-down, with the server healthy again
    assert restorer.sync()["rebuilt"] is True and restorer.status()["indexProvider"] == "openai"
    write(workspace / "memory" / "2026-04-03.md", "# 2026-04-03\n\nA second heron.\n")

    report = long_lived.sync()

    assert report["rebuilt"] is False  # no rebuild back to the fallback's vectors
    status = long_lived.status()
    assert (status["provider"], status["indexProvider"]) == ("openai", "openai") and "fallback" not in status


# -- c. an index built by the primary, then the primary fails -----------------------------------------


def test_fallback_takes_over_a_built_index_with_one_atomic_rebuild(
    open_memory: OpenMemory, fake_openai, tiny_gguf: Path, workspace: Path
) -> None:
    config = settings("openai", "local", fake_openai, tiny_gguf)
    mem = open_memory(config)
    assert mem.sync()["indexed"] == len(NOTES)
    before = mem.search("heron river")
    assert before["provider"] == "openai" and before["results"] and "fallback" not in before
    write(workspace / "memory" / "2026-04-03.md", "# 2026-04-03\n\nA second heron nested near the bank.\n")
    fake_openai.enqueue(*failures(2))
    live: list[tuple[str, int]] = []

    def progress(n: int, total: int, rel: str) -> None:
        if mem.choice.fallback:  # rebuilding with the fallback: the live index must still answer
            with Store(mem.store.path, readonly=True) as reader:
                hits = run_search(
                    reader, "heron", query_vector=None, max_results=5, min_score=0, hybrid=mem.settings.query.hybrid
                ).hits
                live.append((reader.get_meta("identity")["provider"], len(hits)))

    report = mem.sync(progress=progress)

    assert report["rebuilt"] is True and report["indexed"] == len(NOTES) + 1
    # the old index answers until the swap; the new note's text reached it before the embedding failed
    assert live and set(live) == {("openai", 2)}
    status = mem.status()
    assert (status["provider"], status["indexProvider"], status["fallback"]["from"]) == ("local", "local", "openai")
    assert mem.store.path.is_symlink()
    generations = [p for p in mem.store.path.parent.glob(f"{mem.store.path.name}.g*") if p.suffix[2:].isdigit()]
    assert generations == [mem.store.path.resolve()]  # the openai index is gone, no half-built one is left
    after = mem.search("heron")
    assert (after["provider"], after["mode"], after["fallback"]) == ("local", "hybrid", status["fallback"])
    assert {"MEMORY.md", "memory/2026-04-03.md"} <= {r["path"] for r in after["results"]}
    assert mem.sync()["rebuilt"] is False  # one rebuild, not one per sync
    assert_no_secret(mem, report, before, after)


# -- d. the query cannot be embedded ---------------------------------------------------------------------


@pytest.mark.parametrize("fallback", ["none", "local"])
def test_query_embedding_failure_answers_from_keywords(
    open_memory: OpenMemory, fake_openai, tiny_gguf: Path, fallback: str
) -> None:
    mem = open_memory(settings("openai", fallback, fake_openai, tiny_gguf))
    mem.sync()
    fake_openai.enqueue(*failures(2))

    response = mem.search("heron river")

    assert response["mode"] == "keyword" and response["provider"] == "openai" and "fallback" not in response
    assert [r["path"] for r in response["results"]] == ["MEMORY.md"]
    assert any("keywords" in w and "HTTP 500" in w for w in response["warnings"])
    assert fake_openai.pending_faults == 0
    assert mem.search("heron river")["mode"] == "hybrid"  # the server is fine again
    assert_no_secret(mem, response)


# -- e. the key in a server's error message ------------------------------------------------------------


def test_rejected_key_echoed_by_the_server_never_reaches_the_fallback_reason(
    open_memory: OpenMemory, tiny_gguf: Path
) -> None:
    with FakeOpenAIServer(api_key="sk-the-right-key") as server:  # a 401 whose message quotes our key
        mem = open_memory(settings("openai", "local", server, tiny_gguf))
        report = mem.sync()
        response = mem.search("heron")
        rejected = [r for r in server.requests if r.headers.get("authorization") == f"Bearer {KEY}"]
    assert len(rejected) == 1  # a 401 is not retried
    reason = mem.status()["fallback"]["reason"]
    assert "HTTP 401" in reason and "[REDACTED" in reason and "apiKey" in reason
    assert response["fallback"]["reason"] == reason
    assert_no_secret(mem, report, response)


# -- the fallback gets its own model ---------------------------------------------------------------------


def test_the_primary_model_name_is_not_given_to_the_fallback(
    open_memory: OpenMemory, fake_openai, tiny_gguf: Path
) -> None:
    fake_openai.enqueue(*failures(2))
    mem = open_memory(settings("openai", "local", fake_openai, tiny_gguf, model="text-embedding-3-small"))
    report = mem.sync()
    assert report["indexed"] == len(NOTES) and mem.status()["model"] == os.path.basename(tiny_gguf)
