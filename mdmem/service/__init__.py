"""The memory-plane service (``mdmem serve``): recall, retain, forget and backfill for agent proxies.

Modules, imports pointing down: ``canonical`` (the proxy's entry id), ``contract`` (request shapes, pure),
``blocks`` (retained-turn Markdown, pure), ``sessionlog`` (one agent's session files and tombstones),
``recall`` (a ContextPack within the proxy's limits), ``pods`` and ``podclaims`` (which agent answers a
request's ``agent_id`` from its ``pod``), ``agents`` (the served agents and their open indexes),
``telemetry``, ``app`` (the thin HTTP edge), ``server`` (uvicorn), ``backfill`` (ledger replay).
The core (``SessionLog``, ``recall``) needs no HTTP: ``mdmem backfill`` uses it locally.
"""
