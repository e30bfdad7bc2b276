"""``memorySearch.store``: which store holds an agent's index, and where.

- ``backend: "sqlite"`` (the default): one SQLite file per agent at ``path``.
- ``backend: "postgres"``: every agent in one PostgreSQL + pgvector database, ``url`` (or the
  ``MDMEMORY_PG_URL`` environment variable when ``url`` is null), tables in ``schema`` (default
  ``mdmem``). ``path`` then only names where this host keeps the agent's local state files (the
  health, watcher, worker and circuit-breaker files beside it).

The URL may hold a password: it is never shown, not in a message, a status or a ``repr`` (``shown_url``
replaces it by ``[REDACTED]``, mdmem.util.redaction's marker). Imports nothing of mdmem's but the error types
and that marker, so ``config`` can use it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from mdmem.util.errors import ConfigError
from mdmem.util.redaction import REDACTED

DEFAULT_STORE_PATH = "{home}/state/memory/{agentId}.sqlite"
DEFAULT_SCHEMA = "mdmemory"
URL_ENV = "MDMEMORY_PG_URL"

StoreBackend = Literal["sqlite", "postgres"]

_SCHEMES = ("postgresql://", "postgres://")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# PostgreSQL's keywords that cannot name a schema unquoted (pg_get_keywords(), catcode R and T; checked
# against the server in tests/test_storeconfig.py): `CREATE SCHEMA select` is a syntax error.
RESERVED_WORDS = frozenset(
    """all analyse analyze and any array as asc asymmetric authorization binary both case cast check collate
    collation column concurrently constraint create cross current_catalog current_date current_role
    current_schema current_time current_timestamp current_user default deferrable desc distinct do else end
    except false fetch for foreign freeze from full grant group having ilike in initially inner intersect into
    is isnull join lateral leading left like limit localtime localtimestamp natural not notnull null offset on
    only or order outer overlaps placing primary references returning right select session_user similar some
    symmetric system_user table tablesample then to trailing true union unique user using variadic verbose when
    where window with""".split()
)
_PASSWORD = re.compile(r"(?P<head>://[^/?#@:]*:)[^/?#@]*(?P<at>@)")
_PASSWORD_PARAM = re.compile(r"(?i)(?P<head>[?&]password=)[^&#]*")


@dataclass(frozen=True)
class HnswConfig:
    """pgvector's HNSW index of each agent's vectors (``store.hnsw``, PostgreSQL only): ``m`` neighbours per
    vector and ``efConstruction`` candidates while building (a new index generation takes them), ``efSearch``
    candidates while searching (and at least twice the vectors a search asks for). The defaults find 0.95
    of the exact nearest neighbours at 1M MiniLM vectors (README, PostgreSQL figures)."""

    m: int = 16
    ef_construction: int = 64
    ef_search: int = 200


@dataclass(frozen=True)
class IvfConfig:
    """The inverted file of a large SQLite index's vectors (``store.ivf``, SQLite only): an index of
    ``exactBelow`` vectors or more is split into about sqrt(vectors) lists by k-means when a sync ends, and
    a KNN search scores the vectors of the ``probes`` lists nearest the query (then rescores the best
    exactly); smaller indexes are searched exactly. More probes: higher recall, slower searches."""

    exact_below: int = 50_000
    probes: int = 48


@dataclass(frozen=True)
class StoreConfig:
    path: str = DEFAULT_STORE_PATH
    backend: StoreBackend = "sqlite"
    url: str | None = field(default=None, repr=False)  # a secret: it may hold the password
    schema: str = DEFAULT_SCHEMA
    max_connections: int = 16  # per process and database (PostgreSQL): one pool shared by every agent
    hnsw: HnswConfig = field(default_factory=HnswConfig)
    ivf: IvfConfig = field(default_factory=IvfConfig)


def shown_url(url: str) -> str:
    """``url`` with any password replaced by ``[REDACTED]``: what messages and status may print."""
    return _PASSWORD_PARAM.sub(rf"\g<head>{REDACTED}", _PASSWORD.sub(rf"\g<head>{REDACTED}\g<at>", url))


def resolve_store(store: StoreConfig, key: str, env: Mapping[str, str], source: str | None) -> StoreConfig:
    """Check the keys that depend on each other and fill ``url`` from ``MDMEMORY_PG_URL``.

    ``key`` is the dotted path of the ``store`` object that set them (for messages). Raises ``ConfigError``
    naming the key and the fix; the URL's password is never part of it.
    """

    def bad(name: str, message: str) -> ConfigError:
        return ConfigError(f"{key}.{name}: {message}", key=f"{key}.{name}", source=source)

    problem = schema_problem(store.schema)
    if problem is not None:
        raise bad("schema", problem)
    url = store.url or env.get(URL_ENV) or None
    if store.backend != "postgres":  # the URL is kept for `mdmem store migrate --to postgres`
        return replace(store, url=url)
    if url is None:
        raise bad(
            "url",
            'missing: store.backend is "postgres" but no database is named. Fix: set store.url to a '
            f"postgresql://user@host:5432/dbname URL, or set the {URL_ENV} environment variable.",
        )
    problem = url_problem(url, "store.url" if store.url else URL_ENV)
    if problem is not None:
        raise bad("url", problem)
    return replace(store, url=url)


def schema_problem(name: str) -> str | None:
    """What is wrong with ``name`` as ``store.schema``, with the fix (None: a name mdmem may use).

    mdmem writes its SQL with the schema name unquoted and makes generic tables in it (``files``,
    ``chunks``, ``meta``, ``entries``, ``migrations``...), so the name must be a plain identifier that is no
    keyword, and a schema of mdmem's own: not a system schema (``pg_*``, ``information_schema``), nor
    ``public``, every database's default schema, where applications keep their tables (a ``migrations`` or
    ``files`` table of theirs would be read and written as mdmem's)."""
    fix = f'or remove the key to use the default ("{DEFAULT_SCHEMA}")'
    if not _SCHEMA_NAME.match(name):
        return (
            f"expected a plain PostgreSQL name, got {name!r}. Fix: use lower-case letters, digits and _ "
            f"(at most 63, not starting with a digit), {fix}."
        )
    if name in RESERVED_WORDS:
        return (
            f"{name!r} is a reserved word in PostgreSQL's SQL. Fix: choose another name, such as {name}_memory, {fix}."
        )
    if name.startswith("pg_") or name == "information_schema":
        return f"{name!r} is a PostgreSQL system schema name. Fix: choose a schema of mdmem's own, {fix}."
    if name == "public":
        return (
            "'public' is every database's default schema, shared with other applications' tables; mdmem "
            "makes generic tables (files, chunks, meta, migrations...) in its schema. Fix: choose a schema of "
            f"mdmem's own, {fix}."
        )
    return None


def url_problem(url: str, origin: str) -> str | None:
    """What is wrong with a PostgreSQL URL, with the fix (None when it looks right); never its password."""
    if url.startswith(_SCHEMES):
        return None
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]{0,20})://", url)
    got = (
        f"a {scheme.group(1)}:// URL" if scheme else "a value that is not a URL"
    )  # never the value: it may hold a password
    return (
        f"expected a postgresql:// URL (from {origin}), got {got}. Fix: write it as "
        "postgresql://user:password@host:5432/dbname (the password is never printed)."
    )


# -- index file names that cannot be taken for another agent's --------------------------------------------
# What mdmem keeps beside an index file ``<name>``: generations ``<name>.g<N>`` and corrupt copies
# ``<name>.corrupt-<time>`` (each with ``-wal``/``-shm``/``-journal``), locks, state files and sockets
# (``<name>.lock``, ``.embed.lock``, ``.worker.json``, ``.health.json``, ``.pod.json``, ``.sock`` ...) and
# their temporary files (``<name>.worker.json.<pid>.tmp``), swap links ``.<name>.swap-<pid>`` and
# ``.<name>.health.json.<pid>.tmp``. The words are matched in any sequence, so that a name that is a prefix of
# one (``<name>.embed``) counts too: two agents' locks must not be one file either.
_WORDS = r"(?:\.(?:lock|embed|worker|spawn|watch|health|breaker|pod|json|log|sock|tmp|\d+))+"
_COMPANION = re.compile(r"(?:\.g\d+|\.corrupt-\d{8}T\d{6}Z(?:-\d+)?)?(?:-wal|-shm|-journal)?|" + _WORDS)
_DOT_COMPANION = re.compile(r"\.swap-\d+|" + _WORDS)
# the widest id any agent may have: a service.autoAgents id, or a pod's own agent "<id>@<pod>"
AGENT_ID_PATTERN = r"[A-Za-z0-9._-]{1,64}(?:@[A-Za-z0-9._-]{1,64})?"


def store_path_clash(template: str, home: str, agent_id: str) -> str | None:
    """The id of another possible agent whose index files ``agent_id``'s index file would be taken for
    (its generation, WAL, lock or state file), or None.

    ``template`` is ``memorySearch.store.path`` (with ``{agentId}`` and ``{home}``). With the default,
    ``{home}/state/memory/{agentId}.sqlite``, no id ever clashes (every index name ends in ``.sqlite``, none of
    the files kept beside one does); a template that ends in ``{agentId}`` makes ``main.g1`` or ``main-wal``
    the files of agent ``main``.
    """
    path = template.replace("{agentId}", agent_id).replace("{home}", home)
    parts = re.split(r"(\{agentId\})", template.replace("{home}", home))
    if len(parts) == 1:
        return None  # one index for every agent: config refuses two agents sharing it
    pattern = "".join(
        re.escape(p)
        if p != "{agentId}"
        else (f"(?P<id>{AGENT_ID_PATTERN})" if i == parts.index("{agentId}") else "(?P=id)")
        for i, p in enumerate(parts)
    )
    base = re.compile(pattern)
    name = path.rpartition("/")[2]
    candidates = [(path, _COMPANION)]
    if name.startswith("."):
        candidates.append((path[: len(path) - len(name)] + name[1:], _DOT_COMPANION))
    for whole, companion in candidates:
        for cut in range(1, len(whole)):
            if not companion.fullmatch(whole[cut:]):
                continue
            m = base.fullmatch(whole[:cut])
            if m and m.group("id") not in (agent_id, ".", ".."):
                return m.group("id")
    return None
