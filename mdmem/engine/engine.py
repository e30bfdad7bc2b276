"""One agent's memory at work: the engine ``Memory`` (mdmem.memory) is the facade of.

It is composed of its parts, each owning its state: the provider choice (``providers``:
mdmem.engine.provider_choice), the index and its syncs (``keeper``: mdmem.engine.keeper), the catch-up
before a search and the background work it leaves (``catchup``: mdmem.engine.catchup). The operations
(search, pack, get, status, sync) run over them; nothing here reaches into a part's private state.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mdmem.config.load import AgentConfig, Config
from mdmem.engine.catchup import CatchUp
from mdmem.engine.keeper import IndexKeeper
from mdmem.engine.provider_choice import ProviderChoiceKeeper
from mdmem.engine.searching import search_outcome
from mdmem.engine.usage import UsageTracker
from mdmem.files.archive import ARCHIVE_PREFIX
from mdmem.files.memory_get import get_file
from mdmem.files.transcripts import transcripts_folder
from mdmem.files.workspace import Workspace
from mdmem.providers import deadline
from mdmem.search.arguments import check_neighbors, check_search_arguments
from mdmem.search.results import citations_on, search_response
from mdmem.util.errors import EmbeddingsPending

# Imported where they are used, so that a command pays only for what it runs (``mdmem get`` opens no
# index): mdmem.index.indexer, mdmem.engine.packing, mdmem.engine.status, mdmem.pack.
if TYPE_CHECKING:
    import numpy as np

    from mdmem.index.indexer import Progress
    from mdmem.search.hybrid import SearchOutcome


def _hidden(include_archive: bool) -> tuple[str, ...]:
    """The paths a search leaves out: the archive, unless asked for."""
    return () if include_archive else (ARCHIVE_PREFIX,)


class Engine:
    """One agent's workspace, index and embedding provider (all opened lazily), and what runs on them."""

    def __init__(
        self,
        agent: AgentConfig,
        config: Config | None = None,
        *,
        choice: Any = None,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.agent = agent
        self.clock = clock  # the time uses are stamped with and the lifecycle counts from (Memory's ``clock``)
        self.config = config
        self.settings = agent.memory_search
        self.env = os.environ if env is None else env
        self.workspace = Workspace(
            agent.workspace,
            self.settings.extra_paths,
            sessions="sessions" in self.settings.sources,
            transcripts=transcripts_folder(self.settings.sessions.transcripts_dir, agent.id),
        )
        self.providers = ProviderChoiceKeeper(agent, self.env, lambda: self.keeper.store, choice)
        self.keeper = IndexKeeper(agent, self.workspace, self.providers)
        self.catchup = CatchUp(self.keeper, config, self.env, self.sibling)
        spool = agent.store_path.with_name(agent.store_path.name + ".uses")  # see mdmem.engine.usage
        self.usage = UsageTracker(lambda: self.keeper.store, self.settings.usage, spool, clock)

    def sibling(self, should_stop: Callable[[], bool] | None = None) -> Engine:
        """A second engine on this agent: its own connection to the index, this engine's provider."""
        other = Engine(self.agent, self.config, choice=self.providers.choice, env=self.env, clock=self.clock)
        other.keeper.should_stop = should_stop
        return other

    def close(self, *, provider: bool = True) -> None:
        """Stop the background work, close the index; the provider too unless another engine shares it."""
        self.catchup.stop()
        if self.settings.enabled:
            self.usage.close(index_open=self.keeper.opened is not None)
        self.keeper.release_store()
        self.providers.close(provider)

    def disabled_reason(self) -> str:
        return (
            f"memory search is disabled for agent {self.agent.id!r} (memorySearch.enabled is false): "
            "set it to true to index and search this agent's memory"
        )

    # -- keeping the index ---------------------------------------------------------------------------
    def sync(
        self, force: bool = False, progress: Progress | None = None, prune: bool = False, *, embed: bool = True
    ) -> dict[str, Any]:
        """``Memory.sync`` (see there)."""
        if not self.settings.enabled:
            from mdmem.index.report import SyncReport

            return {**SyncReport().to_dict(), "disabled": True, "reason": self.disabled_reason()}
        report = self.keeper.sync(force=force, progress=progress, prune=prune, embed=embed).to_dict()
        if self.keeper.last_repair is not None:
            report["repaired"] = self.keeper.last_repair
        if self.providers.provider_error is not None and self.providers.choice.hint:
            report["warnings"] = [self.providers.choice.hint]
        return report

    def take_over(self, progress: Progress | None = None) -> dict[str, Any]:
        """``Memory.take_over`` (see there)."""
        replaced = self.keeper.store.claim_workspace()
        return {**self.sync(force=True, progress=progress), "tookOver": replaced}

    def catch_up(self) -> tuple[bool, list[str]]:
        """What a search does first (``sync.onSearch``), alone: (stale, notes)."""
        if not self.settings.sync.on_search:
            return False, []
        with deadline.until(self.keeper.embedding_deadline()):
            return self.catchup.run()

    def session_start(self) -> dict[str, Any]:
        """``Memory.session_start`` (see there)."""
        report = None
        if self.settings.sync.on_session_start and self.settings.enabled:
            try:
                report = self.keeper.sync().to_dict()
            except EmbeddingsPending as exc:  # the text is indexed; status shows what waits for embeddings
                report = exc.report
        return {"sync": report, "status": self.status()}

    # -- answering -----------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        max_results: int | None = None,
        min_score: float | None = None,
        *,
        session_kind: str = "main",
        neighbors: int = 0,
        include_archive: bool = False,
    ) -> dict[str, Any]:
        """``Memory.search`` (see there)."""
        query, max_results, min_score = check_search_arguments(query, max_results, min_score)
        neighbors = check_neighbors(neighbors)
        if not self.settings.enabled:
            return {"results": [], "disabled": True, "error": self.disabled_reason()}
        q = self.settings.query
        limit = q.max_results if max_results is None else max_results
        threshold = q.min_score if min_score is None else min_score
        with self.keeper.store_faults():
            outcome, _, extra = self.search_outcome(query, limit, threshold, _hidden(include_archive))
            if neighbors:
                from mdmem.search.neighbors import with_neighbours

                with self.keeper.store.reading():
                    outcome = with_neighbours(self.keeper.store, outcome, limit)
                if not include_archive:  # a link into the archive does not bring it in either
                    kept = [h for h in outcome.hits if not h.chunk.path.startswith(ARCHIVE_PREFIX)]
                    outcome = dataclasses.replace(outcome, hits=kept)
            choice = self.providers.choice
            model = choice.provider.model if choice.provider else None
            cited = citations_on(q.citations, session_kind)
            self.usage.record("search", [(h.chunk.path, h.chunk.hash) for h in outcome.hits])
            return {**search_response(outcome, provider=choice.name, model=model, citations=cited), **extra}

    def truth(self, subject: str, max_facts: int = 5) -> dict[str, Any]:
        """``Memory.truth`` (see there)."""
        from mdmem.engine.truth import TRUTH_CANDIDATES, truth_view
        from mdmem.util.errors import ConfigError

        if not isinstance(subject, str) or not subject.strip():
            raise ConfigError("truth: the subject is empty. Fix: name who or what the fact is about, e.g. 'Priya'")
        if not isinstance(max_facts, int) or isinstance(max_facts, bool) or not 1 <= max_facts <= 50:
            raise ConfigError(f"truth: maxFacts must be an integer from 1 to 50, got {max_facts!r}")
        if not self.settings.enabled:
            return {"subject": subject, "facts": [], "disabled": True, "error": self.disabled_reason()}
        with self.keeper.store_faults():
            outcome, _, extra = self.search_outcome(subject.strip(), TRUTH_CANDIDATES, 0.0)
            with self.keeper.store.reading():
                return {**truth_view(self.keeper.store, subject.strip(), outcome, max_facts), **extra}

    def links(self, path: str) -> dict[str, Any]:
        """``Memory.links`` (see there)."""
        from mdmem.search.linkview import file_links
        from mdmem.util.errors import ConfigError

        if not isinstance(path, str) or not path.strip():
            raise ConfigError("links: the path is empty. Fix: pass a memory file's path, e.g. memory/people/priya.md")
        rel = self.workspace.rel(self.workspace.resolve_for_read(path.strip()))
        with self.keeper.store_faults():
            self.catch_up()
            with self.keeper.store.reading():
                if rel not in self.keeper.store.files():
                    raise ConfigError(f"links: {rel} is not indexed. Fix: check the path, or run `mdmem index`")
                return file_links(self.keeper.store, rel)

    def indexed_lines(self, path: str) -> list[str] | None:
        """The lines of ``path`` as the index holds them; None when it is not indexed or the index cannot be
        read (``remember --supersedes`` finds a line a hand edit moved by them, and goes on without)."""
        from mdmem.store.lines import file_lines
        from mdmem.util.errors import StoreError

        try:
            chunks = self.keeper.store.chunks_of(path)
        except (StoreError, OSError):
            return None
        return file_lines(chunks) if chunks else None

    def search_outcome(
        self, query: str, limit: int, threshold: float, hidden: tuple[str, ...] = ()
    ) -> tuple[SearchOutcome, np.ndarray | None, dict[str, Any]]:
        """Catch up, embed the query, search: (outcome, query vector or None, notes) (mdmem.engine.searching);
        paths under ``hidden`` left out."""
        return search_outcome(self.keeper, self.catchup, query, limit, threshold, hidden)

    def pack(
        self,
        query: str,
        budget_tokens: int = 1000,
        max_items: int | None = None,
        sources: Sequence[str] | None = None,
        trace: bool = False,
        neighbors: int = 0,
        include_archive: bool = False,
    ) -> dict[str, Any]:
        """``Memory.pack`` (see there)."""
        neighbors = check_neighbors(neighbors)
        from mdmem.engine.packing import run_pack
        from mdmem.pack.arguments import check_pack_arguments
        from mdmem.pack.inputs import lines_reader

        if not self.settings.enabled:
            check_pack_arguments(query, budget_tokens, max_items, sources)
            empty = {"query": query, "budgetTokens": budget_tokens, "usedTokens": 0, "items": [], "bundleText": ""}
            return {**empty, "disabled": True, "error": self.disabled_reason()}
        with self.keeper.store_faults():
            hidden = _hidden(include_archive)
            return run_pack(
                lambda q, limit, threshold: self.search_outcome(q, limit, threshold, hidden),
                self.settings,
                lambda: self.providers.choice,
                lambda: self.keeper.store,
                lambda: lines_reader(self.agent.files_here, self.workspace, self.keeper.store),
                query,
                budget_tokens,
                max_items=max_items,
                sources=sources,
                trace=trace,
                neighbors=neighbors,
                hidden=hidden,
                used=lambda chunks: self.usage.record("pack", chunks),
            )

    def get(self, path: str, from_line: int | None = None, lines: int | None = None) -> dict[str, Any]:
        """``Memory.get`` (see there)."""
        if not self.settings.enabled:
            return {"path": path, "text": "", "disabled": True, "error": self.disabled_reason()}
        got = get_file(self.workspace, path, from_line, lines, max_bytes=self.settings.max_file_bytes)
        if not got.get("error") and got.get("text") and not _names_a_secret(got["path"]):
            self.usage.record("get", [(got["path"], "")])
        return got

    def status(self) -> dict[str, Any]:
        """``Memory.status`` (see there)."""
        from mdmem.engine.status import build_status

        out = build_status(self.keeper, self.catchup, self.config, self.disabled_reason())
        readable = (out.get("storeState") or {}).get("state") in ("ok", "read-only", "full")
        out.update(self.use_status(readable))
        return out

    # -- uses and the lifecycle (docs/lifecycle.md) -----------------------------------------------------
    def usage_report(self, limit: int = 10) -> dict[str, Any]:
        """``Memory.usage`` (see there)."""
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
            from mdmem.util.errors import InvalidArgumentError

            raise InvalidArgumentError(f"usage: the limit must be an integer from 1 to 1000, got {limit!r}")
        with self.keeper.store_faults():
            return self._usage_view(limit)

    def _usage_view(self, limit: int) -> dict[str, Any]:
        from mdmem.engine.usage import file_uses, hottest_and_coldest

        self.usage.flush()
        store = self.keeper.store
        uses = file_uses(store.files(), store.usage_rows())
        return {"files": len(uses), "used": sum(1 for u in uses.values() if u.uses), **hottest_and_coldest(uses, limit)}

    def use_status(self, readable: bool = True) -> dict[str, Any]:
        """The uses (the three hottest and coldest files, the accumulator) and the last lifecycle receipt; the
        uses only from an index status found ``readable``, and without recording a failure (status reports)."""
        from mdmem.engine.archiving import last_receipts

        out: dict[str, Any] = {"lifecycle": last_receipts(self.agent)}
        if not self.settings.enabled:
            return out
        try:
            if not readable:
                raise RuntimeError("the index cannot be read (see storeState)")
            usage = {**self._usage_view(3), **self.usage.state()}
        except Exception as exc:  # status never fails: the index's own state is reported above
            usage = {**self.usage.state(), "error": f"uses unavailable: {exc}"}
        return {"usage": usage, **out}

    def lifecycle(self, action: str, path: str | None = None) -> dict[str, Any]:
        """``Memory.lifecycle`` (see there)."""
        from mdmem.engine import archiving
        from mdmem.files.archive import Held, plan_moves
        from mdmem.util.errors import ConfigError

        if action not in ("plan", "apply", "revive"):
            raise ConfigError(f"lifecycle: unknown action {action!r}. Fix: use plan, apply or revive")
        if not self.agent.files_here:
            raise ConfigError(f"lifecycle: agent {self.agent.id!r}'s files are not on this host. Fix: run it there")
        self.usage.flush()
        with self.keeper.store_faults():
            store = self.keeper.store if self.settings.enabled else None
            seen = archiving.seen_files(self.workspace, store)
        if action == "revive":
            if not path:
                raise ConfigError("lifecycle revive: name the archived file. Fix: mdmem lifecycle revive PATH")
            moves, held = archiving.revive_moves(self.workspace, seen, path), list[Held]()
        else:
            policy = self.settings.lifecycle
            now = self.clock()
            moves, held = plan_moves(
                seen, policy.tiers, archiving.today(self.agent, now), now, revive_on_use=policy.revive_on_use
            )
            if action == "plan":
                return archiving.plan_view(moves, held)
        index = (lambda: self.keeper.store) if self.settings.enabled else None
        revived: list[str] = []  # a person asked for these back: a use (a read), so the next apply keeps them
        on_move = (lambda m: revived.append(m.to)) if action == "revive" else None
        out = archiving.apply_plan(self.agent, self.workspace, moves, held, index, action=action, moved=on_move)
        if revived:
            self.usage.record("get", [(to, "") for to in revived])
        if out["moved"] and self.settings.enabled:
            self.catchup.changed()
            try:
                out["sync"] = self.sync()
            except Exception as exc:  # the files moved; the next sync or search indexes them
                out.setdefault("warnings", []).append(f"index not updated yet: {exc}")
        return out


def _names_a_secret(path: str) -> bool:
    """Whether ``get`` answered with its path redacted (it names a secret): such a path counts no use."""
    if "[" not in path:
        return False  # a plain path: the redaction rules need not even load
    from mdmem.util.redaction import MARKER_PREFIX, REDACTED

    return REDACTED in path or MARKER_PREFIX in path
