"""The agent's clock: "now" and "today" in ``agents.defaults.userTimezone`` (default: the local zone)."""

from __future__ import annotations

from datetime import date, datetime, tzinfo

from mdmem.config.load import AgentConfig
from mdmem.util.errors import ConfigError

DAILY_DIR = "memory"


def zone(agent: AgentConfig) -> tzinfo:
    """The agent's time zone: ``userTimezone`` when set, else the local zone (``TZ`` is honoured)."""
    if agent.user_timezone:
        from zoneinfo import ZoneInfo  # here: `mdmem get` and a config without userTimezone never need it

        return ZoneInfo(agent.user_timezone)
    local = datetime.now().astimezone().tzinfo
    assert local is not None  # astimezone() always returns an aware datetime
    return local


def zone_name(agent: AgentConfig) -> str:
    """``userTimezone``, or ``local (<abbreviation>)``."""
    return agent.user_timezone or f"local ({datetime.now().astimezone().tzname()})"


def now(agent: AgentConfig, at: datetime | None = None) -> datetime:
    """``at`` (default: the current time) as an aware datetime in the agent's zone."""
    return (at or datetime.now().astimezone()).astimezone(zone(agent))


def day(agent: AgentConfig, value: date | str | None = None) -> date:
    """A date given as a ``date`` or ``YYYY-MM-DD``; None is today in the agent's zone."""
    if value is None:
        return now(agent).date()
    if isinstance(value, datetime):
        return now(agent, value).date()
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(value)
    except (TypeError, ValueError):
        raise ConfigError(f"date {value!r} is not a date. Fix: write it as YYYY-MM-DD, e.g. 2026-03-09.") from None


def daily_log(when: date) -> str:
    """The workspace-relative path of the daily log of ``when``: ``memory/YYYY-MM-DD.md``."""
    return f"{DAILY_DIR}/{when.isoformat()}.md"
