"""A store's ``retention`` and ``forgetting`` -> mdmem's lifecycle policy (``lifecycle.tiers``, docs/lifecycle.md):
one archive tier for the daily logs, by age (``recency``, ``max_age``) and use (``reuse``)."""

from __future__ import annotations

from typing import Any

from mdmem.config.ckp.fields import DAILY_TIER, MS, duration_days
from mdmem.config.ckp.mapper import Mapper
from mdmem.config.settings import LifecycleConfig, TierConfig

_DEFAULT_TIER = TierConfig()


def lifecycle(m: Mapper, at: str, store: dict[str, Any]) -> None:
    """``retention`` and ``forgetting`` -> one archive tier for the daily logs (docs/lifecycle.md)."""
    retention, forgetting = store.get("retention", {}), store.get("forgetting")
    strategy = forgetting.get("strategy") if forgetting else None
    if forgetting is None:
        signals = {"recency"}  # a retention alone: by age, whatever the use
    elif "signals" in forgetting:
        signals = set(forgetting["signals"])
        for i, signal in enumerate(forgetting["signals"]):
            where = f"{at}.forgetting.signals[{i}]"
            if signal in ("recency", "reuse"):
                what = "age (olderThanDays)" if signal == "recency" else "use (unusedDays): a file used lately stays"
                m.add(where, "mapped", signal, note=what)
            else:
                note = "mdmem archives by age and use only"
                if signal == "contradiction":
                    note += "; a superseded line is ranked below its current one (query.currentFirst), not forgotten"
                m.add(where, "unsupported", signal, note=note)
    else:
        signals = {"recency", "reuse"}
        m.add(f"{at}.forgetting.signals", "defaulted", None, note="recency and reuse: age and use")
    if strategy == "none" and "max_age" not in retention:
        m.add(f"{at}.forgetting.strategy", "mapped", strategy, m.put("lifecycle.tiers", []), [], "nothing is archived")
        return
    reuse = "reuse" in signals and strategy != "none"
    unused = _DEFAULT_TIER.unused_days if reuse else 0
    if "max_age" in retention:
        older, exact = duration_days(retention["max_age"])
        note = "" if exact else "rounded up to whole days"
        if older > 100_000:
            older, note = 100_000, "capped at 100000 days"
        m.add(
            f"{at}.retention.max_age",
            "mapped" if exact else "unsupported",
            retention["max_age"],
            f"{MS}.lifecycle.tiers[0].olderThanDays",
            older,
            note,
        )
    else:
        older = _DEFAULT_TIER.older_than_days if "recency" in signals else unused
        m.add(f"{at}.retention.max_age", "defaulted", None, f"{MS}.lifecycle.tiers[0].olderThanDays", older)
    if "max_entries" in retention:
        m.add(
            f"{at}.retention.max_entries",
            "unsupported",
            retention["max_entries"],
            note="mdmem archives by age and use, not by count",
        )
    if strategy in ("decay", "adaptive", "none"):
        note = (
            "a soft, reversible archive: memory/archive/YYYY/, out of default search and packs"
            if strategy != "none"
            else "by age only"
        )
        m.add(f"{at}.forgetting.strategy", "mapped", strategy, f"{MS}.lifecycle.tiers[0].action", "archive", note)
    elif strategy == "summarize":
        m.add(
            f"{at}.forgetting.strategy",
            "unsupported",
            strategy,
            f"{MS}.lifecycle.tiers[0].action",
            "archive",
            "mdmem does not summarize: it archives whole files (reversible)",
        )
    tier = {**DAILY_TIER, "olderThanDays": older, "unusedDays": unused, "action": "archive"}
    m.add(
        at,
        "mapped",
        None,
        m.put("lifecycle.tiers", [tier]),
        [tier],
        "daily logs memory/YYYY-MM-DD.md; MEMORY.md and pinned files never move",
    )
    m.add(
        at,
        "defaulted",
        None,
        f"{MS}.lifecycle.schedule",
        LifecycleConfig.schedule,
        "applied by `mdmem lifecycle apply`, or set lifecycle.schedule for `mdmem watch`",
    )
