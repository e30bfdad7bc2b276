"""End to end with the real MiniLM model: config file -> Memory.open -> sync -> paraphrase search.

Each paraphrase shares no content word with the note it must find, so only the vectors can rank that note
first; keyword search alone is checked to miss it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from mdmem.index.chunker import chunk_markdown
from mdmem.index.indexer import embedding_input
from mdmem.memory import Memory
from mdmem.search.hybrid import search as run_search
from mdmem.search.query import STOP_WORDS
from mdmem.store import ChunkRow
from mdmem.util.tokens import estimate_tokens
from tests.conftest import MINILM, write

pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.skipif(not MINILM.is_file(), reason=f"{MINILM} is not present")

CHUNK_TOKENS = 64  # small enough that each note below is its own chunk
MODEL_LIMIT = 512

FILES = {
    "MEMORY.md": """# Long-term memory

## People
Dana is my partner. Our anniversary is 12 September and she prefers tulips over roses.

## Preferences
Coffee order: oat flat white, no sugar. I dislike cilantro and very spicy curries.

## Home network
The router admin page is at 192.168.1.1; the guest wifi password rotates every month.
""",
    "memory/2024-03-01.md": """# 2024-03-01

## Miso
Miso, the tabby cat, now takes thyroid pills twice daily hidden in wet food. Vet appointment for a blood
test on 14 March at 9:30.

## Dentist
Dentist cleaning booked for 20 March at 8:00; ask about the cracked molar on the left side.
""",
    "memory/2024-03-02.md": """# 2024-03-02

## Lisbon trip
Booked TAP flights to Lisbon for 3-10 June, aisle seats and one checked bag. Hotel is in Alfama near the
castle, already paid in full.

## Berlin conference
Train to Berlin for PyCon DE on 22 April; Deutsche Bahn tickets are in the email, staying with Jonas.
""",
    "memory/2024-03-03.md": """# 2024-03-03

## Backups
restic runs nightly at 02:00 from the NAS to Backblaze B2; retention keeps 7 daily and 4 weekly
snapshots. The restore drill passed.

## Laptop
The laptop SSD is almost full: moved old photos to the external USB drive and emptied the trash.
""",
    "memory/2024-03-04.md": """# 2024-03-04

## Sourdough
Sourdough starter fed at 8am with rye flour; the loaf proofed overnight in the fridge and baked at 250C
in the Dutch oven.

## Deploy freeze
Production deploy freeze starts Friday for the quarter-end close; only hotfixes approved by Priya ship.

## Release checksums
- 3f9a2c7be41d08e5a6b1c9d2f0e4a7b3c6d8e1f2a4b5c7d9e0f1a2b3c4d5e6f7 mdmemory-0.4.0.tar.gz
- a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9 mdmemory-0.4.0-py3-none-any.whl
- 0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e mdmemory-0.3.9.tar.gz
- 9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d mdmemory-0.3.9-py3-none-any.whl
""",
    "memory/2024-03-05.md": """# 2024-03-05

## Running
Ran 10 km along the river in 52 minutes; the left knee felt fine. Half marathon training plan starts Monday.

## Taxes
The tax return is due 30 April; the accountant still needs the mortgage interest statement.

## Car
Winter tyres come off at the garage on 2 April; the brake pads are at about 30 percent.
""",
}


@dataclass(frozen=True)
class Case:
    query: str
    path: str
    line: str  # a line of the target note


CASES = [
    Case(
        "When does my kitty need her medication, and when is the animal clinic checkup?",
        "memory/2024-03-01.md",
        "Miso, the tabby cat, now takes thyroid pills",
    ),
    Case(
        "Which airline am I using for the Portugal holiday, and where will I sleep?",
        "memory/2024-03-02.md",
        "Booked TAP flights to Lisbon",
    ),
    Case(
        "How is my data archived to cloud storage each evening?",
        "memory/2024-03-03.md",
        "restic runs nightly",
    ),
]


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def content_words(text: str) -> set[str]:
    return words(text) - STOP_WORDS


def shared_words(query: str, target: str) -> set[str]:
    """Content words of ``query`` equal to, or a prefix of / prefixed by (4+ letters), a word of ``target``."""
    ours, theirs = content_words(query), words(target)

    def related(q: str, t: str) -> bool:
        return q == t or (min(len(q), len(t)) >= 4 and (q.startswith(t) or t.startswith(q)))

    return {q for q in ours for t in theirs if related(q, t)}


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    """One synced Memory over the workspace above, opened from a real config file (the model loads once)."""
    root = tmp_path_factory.mktemp("integration")
    for rel, text in FILES.items():
        write(root / "ws" / rel, text)
    config = {
        "agents": {
            "defaults": {
                "workspace": str(root / "ws"),
                "memorySearch": {
                    "provider": "local",
                    "local": {"modelPath": str(MINILM), "threads": 2, "modelCacheDir": str(root / "models")},
                    "store": {"path": str(root / "index.sqlite")},
                    "chunking": {"tokens": CHUNK_TOKENS, "overlap": 0},
                    # a vector-only hit scores vectorWeight (0.7) x cosine, and MiniLM gives these paraphrases
                    # cosines of 0.45-0.55: the default minScore (0.35) would hide some of them
                    "query": {"minScore": 0.2},
                    "sync": {"watch": False},
                },
            }
        }
    }
    config_path = root / "config.json5"
    config_path.write_text(json.dumps(config))
    with pytest.MonkeyPatch.context() as mp:  # module scope: the autouse isolation is not active yet
        mp.setenv("MDMEMORY_HOME", str(root / "home"))
        for var in ("MDMEMORY_CONFIG", "MDMEMORY_WORKSPACE", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
            mp.delenv(var, raising=False)
        mem = Memory.open(config_path=config_path)
        report = mem.sync()
    assert report["files"] == len(FILES) and not report["errors"]
    yield mem
    mem.close()


def target_chunk(mem: Memory, case: Case) -> ChunkRow:
    found = [c for c in mem.store.chunks_of(case.path) if case.line in c.text]
    assert len(found) == 1, f"{case.line!r} should be in exactly one chunk"
    return found[0]


def test_index_is_built_by_the_local_model(memory: Memory) -> None:
    status = memory.status()
    assert (status["provider"], status["indexProvider"], status["dims"]) == ("local", "local", 384)
    assert status["files"] == len(FILES) and status["vectors"] >= status["chunks"] >= 15
    assert status["staleFiles"] == [] and "fallback" not in status


@pytest.mark.parametrize("case", CASES, ids=["pets", "travel", "backups"])
def test_paraphrase_finds_the_note_first(memory: Memory, case: Case) -> None:
    chunk = target_chunk(memory, case)
    assert shared_words(case.query, embedding_input(chunk)) == set()
    keyword_only = run_search(
        memory.store, case.query, query_vector=None, max_results=10, min_score=0, hybrid=memory.settings.query.hybrid
    )
    assert (chunk.path, chunk.start_line) not in {(h.chunk.path, h.chunk.start_line) for h in keyword_only.hits}

    response = memory.search(case.query)

    assert (response["provider"], response["mode"]) == ("local", "hybrid")
    assert "warnings" not in response and "fallback" not in response
    first = response["results"][0]
    assert (first["path"], first["startLine"], first["endLine"]) == (chunk.path, chunk.start_line, chunk.end_line)


def test_chunks_fit_the_model_by_its_own_tokenizer(memory: Memory) -> None:
    provider = memory.choice.provider
    assert provider is not None and provider.max_input_tokens == MODEL_LIMIT
    chunks = [c for path in memory.store.files() for c in memory.store.chunks_of(path)]
    for c in chunks:
        assert provider.count_tokens(embedding_input(c)) <= MODEL_LIMIT
        assert provider.count_tokens(c.text) <= CHUNK_TOKENS, c.text
    # the character estimate undercounts hex checksums; chunking by it would overflow the budget
    text = FILES["memory/2024-03-04.md"]
    estimated = chunk_markdown(text, "x.md", tokens=CHUNK_TOKENS, overlap=0, count_tokens=estimate_tokens)
    assert max(provider.count_tokens(c.text) for c in estimated) > CHUNK_TOKENS
