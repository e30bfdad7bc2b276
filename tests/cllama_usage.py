"""The ``usage`` of a cllama session-history entry, from the upstream's reply as cllama reads it.

``internal/cost/usage.go`` (``ExtractUsage``, ``ExtractUsageFromSSE``, ``parseUsageObject``, ``mergeUsage``),
``internal/cost/pricing.go`` (``DefaultPricing``: a few of its rates here) and ``internal/proxy/handler.go``
(``resolveCost`` 1524, ``sessionHistoryCostUSD`` 1429); ``Usage`` is ``sessionhistory.Usage`` (recorder.go 28-34).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.gojson import go_float, go_int


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reported_cost_usd: float | None = None

    def go(self) -> str:
        parts = []
        if self.prompt_tokens:
            parts.append(f'"prompt_tokens":{go_int(self.prompt_tokens)}')
        if self.completion_tokens:
            parts.append(f'"completion_tokens":{go_int(self.completion_tokens)}')
        if self.reported_cost_usd is not None:
            parts.append(f'"reported_cost_usd":{go_float(self.reported_cost_usd)}')
        return "{" + ",".join(parts) + "}"


# A few rates of DefaultPricing (USD per million tokens; the fixtures' models). Prefix match, longest wins.
PRICING = {
    "openai": {
        "gpt-4o": (2.50, 10.0),
        "gpt-4o-mini": (0.15, 0.60),
        "gpt-4.1": (2.0, 8.0),
        "gpt-4.1-mini": (0.40, 1.60),
    },
    "anthropic": {"claude-haiku-4-5": (1.0, 5.0), "claude-sonnet-4": (3.0, 15.0), "claude-sonnet-4-6": (3.0, 15.0)},
}


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        return 0
    try:
        return int(float(v)) if not isinstance(v, str) else int(v)
    except ValueError:
        return 0


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        return None
    try:
        return float(v)
    except ValueError:
        return None


def _usage_of(obj: Any) -> tuple[int, int, float | None]:
    """``parseUsageObject``: the first positive of each pair of names, and ``cost`` when given."""
    if not isinstance(obj, dict):
        return 0, 0, None
    prompt = next((n for k in ("prompt_tokens", "input_tokens") if (n := _int(obj.get(k))) > 0), 0)
    completion = next((n for k in ("completion_tokens", "output_tokens") if (n := _int(obj.get(k))) > 0), 0)
    return prompt, completion, _float(obj.get("cost"))


def extract_usage(response: bytes, sse: bool) -> tuple[int, int, float | None]:
    """``ExtractUsage`` / ``ExtractUsageFromSSE`` + ``mergeUsage``: ``usage`` and ``message.usage`` of each
    payload, the largest prompt and completion counts and reported cost seen (Anthropic streams put them in
    two events: ``message_start`` and ``message_delta``)."""
    payloads: list[Any] = []
    if sse:
        for line in response.split(b"\n"):
            line = line.strip()
            if line.startswith(b"data: ") and line[6:] != b"[DONE]":
                try:
                    payloads.append(json.loads(line[6:]))
                except ValueError:
                    pass
    else:
        payloads.append(json.loads(response))
    prompt, completion, cost = 0, 0, None
    for p in payloads:
        if not isinstance(p, dict):
            continue
        message = p.get("message")
        for obj in (p.get("usage"), message.get("usage") if isinstance(message, dict) else None):
            a, b, c = _usage_of(obj)
            prompt, completion = max(prompt, a), max(completion, b)
            if c is not None and (cost is None or c > cost):
                cost = c
    return prompt, completion, cost


def cost_usd(provider: str, model: str, prompt: int, completion: int) -> float | None:
    """``Pricing.Lookup`` + ``Rate.Compute`` for the models of ``PRICING`` (None: not priced)."""
    rates = PRICING.get(provider, {})
    key = model if model in rates else max((k for k in rates if model.startswith(k)), key=len, default=None)
    if key is None:
        return None
    inp, out = rates[key]
    return prompt / 1_000_000 * inp + completion / 1_000_000 * out


def usage_for(provider: str, model: str, response: bytes, sse: bool) -> Usage:
    """The entry's ``usage`` (handler.go ``recordResponse`` + ``resolveCost`` + ``sessionHistoryCostUSD``):
    the counts, and the cost from the pricing table (OpenRouter: the reported one), else the reported one."""
    prompt, completion, reported = extract_usage(response, sse)
    if not prompt and not completion and reported is None:
        return Usage()
    if reported is not None and provider.lower() == "openrouter":
        return Usage(prompt, completion, reported)
    priced = cost_usd(provider, model, prompt, completion)
    return Usage(prompt, completion, priced if priced is not None else reported)
