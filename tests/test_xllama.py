"""The local provider on xllamacpp (prebuilt llama.cpp wheels) against llama-cpp-python, with the real MiniLM.

Both bindings load the same GGUF file: vectors must agree to cosine 0.999, token counts exactly (the chunker
and truncation count with them), long texts are cut at the model's context. A missing llama-cpp-python is
made real by an import blocker on ``sys.meta_path`` in a child process (``find_spec`` and ``import`` both
fail there, as on a machine without the package), never by a mock of what the factory decides.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdmem.providers import probe
from mdmem.util.errors import ProviderError
from tests.conftest import MINILM, REPO, write

# Found, never imported here: a test process that maps both bindings' libraries is the clash the provider
# refuses (other test modules import llama-cpp-python).
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("xllamacpp") is None, reason="xllamacpp is not installed"),
    pytest.mark.skipif(not MINILM.is_file(), reason=f"{MINILM} is not present"),
]
NO_LLAMA_CPP = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="no llama-cpp-python")

TEXTS = {
    "english": [
        "Dana asked us to move the backups to the new NAS before Friday.",
        "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    ],
    "cjk": [
        "今天我们讨论了数据库迁移的计划，决定下周五之前把备份移到新的NAS上。",
        "明日は京都へ行きます。新幹線の切符はもう買いました。",
        "우리는 다음 주에 회의를 열어서 분기 계획을 검토할 것입니다.",
    ],
    "code": [
        "def embed_batch(self, texts):\n    return np.stack([self._embed(t) for t in texts])\n",
        "SELECT chunk_id FROM vec_chunks WHERE embedding MATCH :q AND k = :k;",
    ],
    "emoji": ["🎉🔥 party time 👍🏽", "👨‍👩‍👧‍👦 family trip to the beach 🏖️ was great!!! 😂"],
    "special": ["[CLS] [SEP] [MASK] <s> </s> typed in a note", "naïve café, Привет"],
    "edge": ["", " ", "\u200b", "a"],
    "long": [
        " ".join(f"the meeting on day {i} moved the backups to the NAS" for i in range(120)),
        "记忆系统需要在本地保存笔记并建立索引，以便快速检索。" * 40,
    ],
}
ALL = [t for texts in TEXTS.values() for t in texts]


# Each binding runs in a child process of its own: both export llama.cpp's symbols, so they never share a
# process (the provider refuses it; test_one_binding_per_process), and the test process may have loaded
# llama-cpp-python already (other test modules import it).
CHILD = """
import json, os, sys, threading, time
BLOCKED = set(filter(None, sys.argv[1].split(",")))
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, Blocker())
from pathlib import Path
from mdmem.util.errors import ProviderError
from mdmem.providers.local import LocalEmbeddingProvider
MODEL, ARGS = sys.argv[2], json.loads(sys.argv[3])
def provider(binding, threads=1):
    return LocalEmbeddingProvider(MODEL, Path(MODEL).parent, threads=threads, binding=binding)
def done(**facts):
    print(json.dumps(facts))
"""

MEASURE = """
p = provider(ARGS["binding"])
texts, lines, long = ARGS["texts"], ARGS["lines"], ARGS["long"]
vectors = p.embed_documents(texts)
cuts = [p.truncate(t) for t in long]
ids = [list(p._llm.tokenize(t.encode("utf-8"), add_bos=True, special=False)) for t in texts]
batch_ids = p._llm.token_lists(texts) if p.binding == "xllamacpp" else ids
done(ids=ids, batch_ids=batch_ids,
    binding=p.binding, backend=p.cpu_backend, key=p.provider_key, vectors=vectors.tolist(),
    counts=[p.count_tokens(t) for t in texts], batch=p.count_tokens_batch(lines), cuts=cuts,
    cut_counts=[p.count_tokens(c) for c in cuts], over=[p.count_tokens(t[: len(c) + 1]) for t, c in zip(long, cuts)],
    whole_vs_cut=float(p.embed_documents([long[0]])[0] @ p.embed_documents([cuts[0]])[0]),
    query=p.embed_query("when do the backups run").tolist(),
)
p.close()
"""


def child(blocked: str, body: str, args: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``body`` after ``CHILD`` in a fresh interpreter that cannot import ``blocked``; its last JSON line."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD + body, blocked, str(MINILM), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


LINES = [line for t in ALL for line in t.split("\n")] + [f"line {i} of a fresh note" for i in range(700)]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed: nothing to compare with")
    env = {"MDMEMORY_PROBE_CACHE": str(tmp_path_factory.mktemp("probe"))}
    args = {"texts": ALL, "lines": LINES, "long": TEXTS["long"]}
    return {
        binding: child(blocked, MEASURE, {**args, "binding": binding}, env)
        for binding, blocked in (("llama-cpp-python", "xllamacpp"), ("xllamacpp", "llama_cpp"))
    }


def test_vectors_match_llama_cpp_python_on_varied_text(measured: dict[str, dict[str, Any]]) -> None:
    ref, cand = measured["llama-cpp-python"], measured["xllamacpp"]
    assert cand["backend"] == "xllamacpp" and ref["backend"] != "xllamacpp"
    a, b = np.asarray(ref["vectors"]), np.asarray(cand["vectors"])
    assert a.shape == b.shape == (len(ALL), 384)
    cosines = (a * b).sum(axis=1)
    worst = {
        cat: min(float(c) for c, t in zip(cosines, ALL, strict=True) if t in texts) for cat, texts in TEXTS.items()
    }
    assert min(worst.values()) >= 0.999, worst
    assert float(np.asarray(ref["query"]) @ np.asarray(cand["query"])) >= 0.999


def test_token_counts_are_identical_one_by_one_and_in_a_batch(measured: dict[str, dict[str, Any]]) -> None:
    ref, cand = measured["llama-cpp-python"], measured["xllamacpp"]
    assert cand["counts"] == ref["counts"]
    assert cand["ids"] == ref["ids"] and cand["batch_ids"] == ref["ids"]  # as embedded: one request for many
    assert cand["batch"] == ref["batch"] and len(cand["batch"]) == len(LINES)  # more than one request's worth
    assert cand["counts"][ALL.index("")] == 2  # [CLS] [SEP]: the special tokens are counted


def test_truncation_cuts_at_the_context_as_llama_cpp_python_does(measured: dict[str, dict[str, Any]]) -> None:
    ref, cand = measured["llama-cpp-python"], measured["xllamacpp"]
    assert cand["cuts"] == ref["cuts"]
    assert all(n <= 512 for n in cand["cut_counts"]) and all(n > 512 for n in cand["over"])
    # an over-long input goes through embed_documents too, cut first (never to the server whole)
    assert cand["whole_vs_cut"] > 0.99999


def test_the_same_model_keeps_its_index_identity_on_either_binding(measured: dict[str, dict[str, Any]]) -> None:
    """Vectors within cosine 0.9997 are the same vectors for ranking: switching binding re-embeds nothing."""
    assert measured["llama-cpp-python"]["key"] == measured["xllamacpp"]["key"]


SHUTDOWN = """
p = provider("xllamacpp")
before = len(os.listdir("/proc/self/task"))
p.load()
model = p._llm
folder = Path(model._folder)
def socket_inodes():
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out
mine = socket_inodes()
tcp = [line.split() for name in ("/proc/net/tcp", "/proc/net/tcp6") for line in open(name).read().splitlines()[1:]]
unix = [line.split() for line in open("/proc/net/unix").read().splitlines()[1:]]
listening = dict(tcp=[t[1] for t in tcp if t[9] in mine], unix=[u[-1] for u in unix if u[6] in mine and len(u) > 7])
started = dict(mode=oct(folder.stat().st_mode & 0o777), files=sorted(x.name for x in folder.iterdir()),
               threads=len(os.listdir("/proc/self/task")) - before)
p.embed_documents(["hello"])
p.close()
p.close()
for _ in range(50):  # the server's threads end on their own once it is destroyed
    if len(os.listdir("/proc/self/task")) - before <= 1:
        break
    time.sleep(0.1)
try:
    model.token_counts(["a fresh text, never counted"])
    closed = "no error"
except ProviderError as exc:
    closed = str(exc)
done(started=started, listening=listening, socket=str(folder / "server.sock"),
     gone=not folder.exists(), left=len(os.listdir("/proc/self/task")) - before, closed=closed,
     python_threads=[t.name for t in threading.enumerate() if t is not threading.main_thread()])
"""


def test_the_server_goes_with_close_and_its_socket_folder_too() -> None:
    facts = child("llama_cpp", SHUTDOWN, {})
    assert facts["started"] == {"mode": "0o700", "files": ["server.sock"], "threads": facts["started"]["threads"]}
    assert facts["started"]["threads"] > 2  # the server's HTTP and compute threads
    assert facts["listening"] == {"tcp": [], "unix": [facts["socket"]]}  # never a TCP port
    assert facts["gone"] and facts["left"] <= 1  # one idle worker of a thread pool may stay
    assert facts["python_threads"] == [] and "closed" in facts["closed"]


def test_a_process_that_never_closes_leaves_no_socket_folder() -> None:
    body = "p = provider('xllamacpp'); p.embed_documents(['hello']); done(folder=p._llm._folder)\n"
    folder = Path(child("llama_cpp", body, {})["folder"])
    assert folder.name.startswith("mdmemory-xllama-") and not folder.exists()


THREADS = """
p = provider("xllamacpp", threads=2)
before = p.embed_documents(ARGS["texts"])
p.limit_threads(1)
after = p.embed_documents(ARGS["texts"])
done(threads=[p.threads, p._llm.threads], diff=float(abs(before - after).max()), n=p.count_tokens("after a restart"))
p.close()
"""


def test_fewer_threads_restart_the_server_and_keep_the_vectors() -> None:
    facts = child("llama_cpp", THREADS, {"texts": TEXTS["english"]})
    assert facts["threads"] == [1, 1] and facts["diff"] < 1e-3 and facts["n"] == 5  # [CLS] after a restart [SEP]


CONCURRENT = """
p = provider("xllamacpp")
lines = [f"note {i}: the quick brown fox {i * 7}" for i in range(300)]
alone = [p.count_tokens(t) for t in lines[:20]]
counts = []
worker = threading.Thread(target=lambda: counts.append(p.count_tokens_batch(lines)))
worker.start()
p.embed_documents(ARGS["texts"] * 8)
worker.join(60)
done(counts=counts, alone=alone)
p.close()
"""


def test_counting_on_another_thread_while_embedding_agrees() -> None:
    facts = child("llama_cpp", CONCURRENT, {"texts": TEXTS["english"]})
    assert len(facts["counts"]) == 1 and facts["counts"][0][:20] == facts["alone"]
    assert len(facts["counts"][0]) == 300


MIXED = """
first = provider(ARGS["first"]); first.embed_documents(["hello"])
try:
    provider(ARGS["second"]).load()
    outcome = "loaded"
except ProviderError as exc:
    outcome = str(exc)
done(outcome=outcome)
"""


@pytest.mark.parametrize("first,second", [("llama-cpp-python", "xllamacpp"), ("xllamacpp", "llama-cpp-python")])
@NO_LLAMA_CPP
def test_one_binding_per_process(first: str, second: str) -> None:
    outcome = child("", MIXED, {"first": first, "second": second})["outcome"]
    assert f"cannot use {second}" in outcome and f"loaded {first} already" in outcome and "Fix:" in outcome


def test_a_sigill_in_the_xllamacpp_probe_names_the_signal_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MDMEMORY_PROBE_CACHE", str(tmp_path / "probe"))
    script = tmp_path / "ill.py"
    script.write_text(
        "import json, os, signal\nprint(json.dumps({'variant': 'xllamacpp'}), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGILL)\n"
    )
    stand_in = tmp_path / "python"
    stand_in.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    stand_in.chmod(0o755)
    with pytest.raises(ProviderError) as caught:
        probe.ensure_runs_xllamacpp(MINILM, 512, 1, python=str(stand_in))
    message = str(caught.value)
    assert "SIGILL" in message and MINILM.name in message and "Fix:" in message and "llama-cpp-python" in message
    with pytest.raises(ProviderError, match="SIGILL"):  # cached: the crash is not run again
        probe.ensure_runs_xllamacpp(MINILM, 512, 1, python=str(tmp_path / "missing"))


def test_the_real_xllamacpp_probe_runs_and_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MDMEMORY_PROBE_CACHE", str(tmp_path / "probe"))
    probe.ensure_runs_xllamacpp(MINILM, 512, 1)
    assert len(list(probe.cache_dir().glob("*.json"))) == 1
    probe.ensure_runs_xllamacpp(MINILM, 512, 1, python=str(tmp_path / "missing"))  # cached: no child


# -- without llama-cpp-python: a child process with an import blocker --------------------------------------
BLOCKER = """
import sys
BLOCKED = set(sys.argv[1].split(","))
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, Blocker())
from mdmem.cli.entry import main
code = main(sys.argv[2:])
print(f"MODULES llama_cpp={'llama_cpp' in sys.modules} xllamacpp={'xllamacpp' in sys.modules}", file=sys.stderr)
sys.exit(code)
"""


def cli(blocked: str, *argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, blocked, *argv], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.fixture
def minilm_config(tmp_path: Path, workspace: Path) -> dict[str, str]:
    write(workspace / "MEMORY.md", "# Memory\n\n## Backups\nThe NAS copies every folder to the cloud at 2am.\n")
    write(workspace / "memory" / "2026-11-20.md", "# 2026-11-20\n\nMiso the cat takes thyroid pills daily.\n")
    config = tmp_path / "config.json5"
    local = {"modelPath": str(MINILM), "threads": 1}
    config.write_text(
        json.dumps(
            {
                "agents": {
                    "defaults": {"workspace": str(workspace), "memorySearch": {"provider": "local", "local": local}}
                }
            }
        )
    )
    return {**os.environ, "MDMEMORY_CONFIG": str(config), "MDMEMORY_DAEMON": "off", "PYTHONPATH": str(REPO)}


@pytest.mark.parametrize("provider", ["local", "auto"])  # auto: the model is on disk and a binding installed
def test_without_llama_cpp_python_the_cli_indexes_and_searches_with_xllamacpp(
    minilm_config: dict[str, str], provider: str
) -> None:
    config = Path(minilm_config["MDMEMORY_CONFIG"])
    config.write_text(config.read_text().replace('"provider": "local"', f'"provider": "{provider}"'))
    index = cli("llama_cpp", "index", "--json", env=minilm_config)
    assert index.returncode == 0, index.stderr
    report = json.loads(index.stdout)
    assert report["indexed"] == 2 and report["embedded"] >= 2 and not report.get("error")
    assert "MODULES llama_cpp=False xllamacpp=True" in index.stderr
    found = cli("llama_cpp", "search", "--json", "what does my pet take for its illness", env=minilm_config)
    assert found.returncode == 0, found.stderr
    result = json.loads(found.stdout)
    assert result["mode"] == "hybrid" and result["provider"] == "local"
    assert result["results"][0]["path"] == "memory/2026-11-20.md"  # a paraphrase: no word in common
    assert "MODULES llama_cpp=False xllamacpp=True" in found.stderr


def test_without_any_binding_index_keeps_keywords_fresh_warns_and_exits_0(minilm_config: dict[str, str]) -> None:
    index = cli("llama_cpp,xllamacpp", "index", env=minilm_config)
    assert index.returncode == 0, index.stderr
    assert "2 indexed" in index.stdout and "0 embedded" in index.stdout
    warning = index.stdout + index.stderr
    assert "neither xllamacpp nor llama-cpp-python is installed" in warning
    assert "Fix: install the local extra: pip install 'mdmem[local]'" in warning
    found = cli("llama_cpp,xllamacpp", "search", "--json", "thyroid pills", env=minilm_config)
    assert found.returncode == 0, found.stderr
    result = json.loads(found.stdout)
    assert result["mode"] == "keyword" and result["results"][0]["path"] == "memory/2026-11-20.md"
    assert "neither xllamacpp nor llama-cpp-python" in json.dumps(result)
    text = cli("llama_cpp,xllamacpp", "search", "thyroid pills", env=minilm_config)
    assert text.returncode == 0 and "keyword" in text.stdout and "pip install 'mdmem[local]'" in text.stdout


def test_a_missing_model_file_still_degrades_the_same_way(minilm_config: dict[str, str], tmp_path: Path) -> None:
    config = Path(minilm_config["MDMEMORY_CONFIG"])
    config.write_text(config.read_text().replace(str(MINILM), str(tmp_path / "gone.gguf")))
    index = cli("llama_cpp", "index", env=minilm_config)
    assert index.returncode == 0 and "gone.gguf does not exist" in index.stdout + index.stderr


HOSTILE = """
import numpy as np
p = provider("xllamacpp")
texts = {
    "50k words": " ".join(["memory", "search", "agent", "notes"] * 12_500),
    "long CJK": "東京都の会議で記憶を検索する。" * 4_000,
    "one huge word": "x" * 200_000,
    "whitespace": " \\n\\t  \\n",
    "empty": "",
    "lone surrogate": "before \\ud800 after \\udfff",
    "NUL": "a\\x00b\\x00\\x00c",
    "special tokens as text": "[CLS] [SEP] [PAD] [MASK] </s> <s>" * 200,
}
vectors = p.embed_documents(list(texts.values()))
done(norms=np.linalg.norm(vectors, axis=1).tolist(), finite=bool(np.isfinite(vectors).all()),
     cut=[p.count_tokens(p.truncate(t)) for t in texts.values()])
p.close()
"""


def test_hostile_inputs_embed_without_abort() -> None:
    """What would abort llama.cpp (too many tokens for the context) or break the tokenizer's JSON (lone
    surrogates, NUL) is cut or cleaned first: every input gets a finite unit vector, the process lives."""
    facts = child("llama_cpp", HOSTILE, {})
    assert facts["finite"] and all(abs(n - 1) < 1e-5 for n in facts["norms"]) and len(facts["norms"]) == 8
    assert all(n <= 512 for n in facts["cut"])
