"""Which agent answers a request: its ``agent_id`` within its ``pod`` (``service.podScope``).

Clawdapus runs a proxy per pod; one memory service may serve several pods, and two pods may well name an
agent alike. So that they never share memory by accident, an agent serves one pod:

- ``agents.list[].pod`` binds a configured agent to a pod (``"*"``: every pod, shared on purpose);
- under ``podScope: "bind"`` (the default) an agent with no binding — configured, or made by
  ``service.autoAgents`` — belongs to the first pod whose request uses it (a recall, retain or forget; a
  status request claims nothing). The claim is kept beside the agent's index (mdmem.service.podclaims);
- under ``podScope: "namespace"`` only a binding gives a pod a configured agent, and ``autoAgents`` gives
  every pod agents of its own;
- a request from another pod is refused (``PodRefused``, HTTP 403, naming both pods), or, under
  ``service.autoAgents``, served by the pod's own agent ``<id>@<pod>`` (workspace
  ``{home}/agents/<id>@<pod>/``, index ``store.path`` with ``{agentId}`` = ``<id>@<pod>``, rows keyed so in
  PostgreSQL; ``@`` is in no agent id, so it never meets an agent without a pod);
- a request without ``pod`` is served by the agent ``agent_id`` as before pods were looked at, and under
  ``podScope: "off"`` every request is.

``decide`` is the rule, pure; ``Pods`` adds the claims and remembers what it learnt (a claim never moves while
the service runs: a binding in the configuration wins over it, and takes effect on a restart).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from mdmem.config.load import AgentConfig, Config
from mdmem.service.contract import check_agent_id, check_pod
from mdmem.service.podclaims import Owner, claim, read_claim
from mdmem.util.errors import MdMemoryError

SEPARATOR = "@"


class PodRefused(MdMemoryError):
    """The agent serves another pod (HTTP 403)."""


class _Unknown(Exception):
    """The claim is not known without reading it."""


def scoped_id(agent_id: str, pod: str) -> str:
    """The id of ``pod``'s own agent ``agent_id`` (autoAgents): what its folder, index and rows are named."""
    return f"{agent_id}{SEPARATOR}{pod}"


def split_id(key: str) -> tuple[str, str | None]:
    """``(agent id, pod)`` of an agent's id here: ``("a", "p")`` for ``a@p``, ``("a", None)`` for ``a``."""
    agent_id, sep, pod = key.partition(SEPARATOR)
    return (agent_id, pod) if sep else (agent_id, None)


def decide(
    agent_id: str,
    pod: str | None,
    *,
    scope: str,
    configured: bool,
    binding: str | None,
    auto: bool,
    owner: Callable[[], Owner | None],
) -> str:
    """The id of the agent that answers ``agent_id`` asked from ``pod`` (see the module docstring); ``owner``
    looks up (or makes) the claim of the agent ``agent_id``, called only under ``bind`` for an agent with no
    binding. Raises ``PodRefused``; an unknown agent without ``auto`` is the caller's to refuse."""
    if pod is None or scope == "off":
        return agent_id
    if not configured and not auto:
        return agent_id  # unknown: refused as such
    if binding == "*" or binding == pod:
        return agent_id
    if binding is not None:
        held: Owner | None = Owner(binding, "agents.list")
    elif scope == "bind":
        held = owner()
        if held is None or held.pod == pod:
            return agent_id
    else:  # namespace: only a binding gives a pod an agent that is not its own
        held = None
    if auto:
        return scoped_id(agent_id, pod)
    raise PodRefused(_refusal(agent_id, pod, held))


def _refusal(agent_id: str, pod: str, held: Owner | None) -> str:
    if held is None:
        why = (
            f'is bound to no pod, and service.podScope "namespace" serves it only to requests without a pod; '
            f"this request is from pod {pod!r}"
        )
    elif held.by == "agents.list":
        why = f"serves pod {held.pod!r} (its agents.list[].pod); this request is from pod {pod!r}"
    else:
        since = held.to_dict().get("since", "")
        why = f"serves pod {held.pod!r} (the first pod that used it, since {since}); this request is from pod {pod!r}"
    return (
        f"agent {agent_id!r} {why}, and two pods never share an agent's memory. Fix: give the agent in pod {pod!r} "
        f'another id; or set its agents.list[].pod ("*" shares it with every pod); or set service.autoAgents so '
        f'each pod gets an agent of its own ({scoped_id(agent_id, pod)!r}); or service.podScope "off" to serve '
        "every pod alike"
    )


class Pods:
    """``decide`` with the configuration and the claims (see the module docstring). ``config_of(id, create)``
    is the agent's configuration (``Agents.config_of``: configured, or made by autoAgents)."""

    def __init__(self, config: Config, config_of: Callable[[str, bool], AgentConfig]) -> None:
        self.config = config
        self.config_of = config_of
        self._bindings = {a.id: a.pod for a in config.agents}  # the configured agents and their agents.list[].pod
        self._owners: dict[str, Owner] = {}  # agent id -> its pod, once known (a claim never moves)
        self._provisional: dict[str, Owner] = {}  # claims this process made but could not record yet
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def known(self, agent_id: str, pod: str | None) -> str | None:
        """The agent's id for ``pod`` when no claim needs reading (never waits, never refuses): None otherwise."""

        def cached() -> Owner | None:
            held = self._owners.get(agent_id)
            if held is None:
                raise _Unknown
            return held

        try:
            return self._decide(agent_id, pod, cached)
        except (_Unknown, PodRefused):
            return None

    def key(self, agent_id: str, pod: str | None, *, create: bool = True) -> str:
        """The id of the agent that answers ``agent_id`` from ``pod``; with ``create`` (a recall, retain or
        forget) an agent no pod has claimed yet becomes ``pod``'s. May read or write the claim: call it off
        the event loop. Raises ``PodRefused``, ``UnknownAgent``, or what reading the claim raises."""
        check_agent_id(agent_id)
        check_pod(pod)
        return self._decide(agent_id, pod, lambda: self._owner(agent_id, pod if create else None, create))

    def _decide(self, agent_id: str, pod: str | None, owner: Callable[[], Owner | None]) -> str:
        service = self.config.service
        configured = agent_id in self._bindings
        binding = self._bindings.get(agent_id)
        return decide(
            agent_id,
            pod,
            scope=service.pod_scope,
            configured=configured,
            binding=binding,
            auto=service.auto_agents,
            owner=owner,
        )

    def owner(self, agent: AgentConfig) -> Owner | None:
        """The pod ``agent`` (an id here, ``<id>@<pod>`` included) serves, for its status; None: any pod."""
        agent_id, pod = split_id(agent.id)
        if pod is not None:
            return Owner(pod, "first request")  # autoAgents made it for that pod
        binding = self._bindings.get(agent_id)
        if binding is not None:
            return None if binding == "*" else Owner(binding, "agents.list")
        if self.config.service.pod_scope != "bind":
            return None
        return self._owners.get(agent_id) or self._provisional.get(agent_id) or read_claim(agent)

    def _owner(self, agent_id: str, pod: str | None, create: bool) -> Owner | None:
        """The claim on ``agent_id``; made for ``pod`` when there is none yet and ``pod`` is given."""
        with self._lock:
            lock = self._locks.setdefault(agent_id, threading.Lock())
        with lock:
            held = self._owners.get(agent_id)
            if held is not None:
                return held
            agent = self.config_of(agent_id, create)
            wanted = self._provisional.get(agent_id)  # claimed here, not recorded yet: recorded now if it can be
            if pod is None and wanted is None:
                held = read_claim(agent)
            elif pod is None:
                return wanted
            else:
                held = claim(agent, wanted.pod if wanted is not None else pod)
            if held is not None and held.provisional:
                self._provisional[agent_id] = held
            elif held is not None:
                self._owners[agent_id] = held
                self._provisional.pop(agent_id, None)
            return held
