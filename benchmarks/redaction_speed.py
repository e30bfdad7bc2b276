"""Speed of ``mdmem.util.redaction.redact`` on typical text (recall redacts every block it returns, a pack each
file it cites once per version of it).

Redacts 8 KiB of README.md, of a prose-with-hashes sample, of plain notes and of a chat log holding real-shaped
tokens, ``--runs`` times each, and prints µs per call and per KiB. With ``--detect-secrets`` (needs
``pip install detect-secrets``) it also times the eight detect-secrets plugins that cover the same kinds, line
by line, as detect-secrets runs them. Target: <= ~1 ms per 8 KiB.

    python benchmarks/redaction_speed.py [--runs 300] [--detect-secrets]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from mdmem.util.redaction import redact

ROOT = Path(__file__).resolve().parent.parent
NOTES = (
    "- Met Dana about the Lisbon offsite; she prefers the second week of March and wants the budget by Friday.\n"
    "- The staging database moved to Postgres 16 on port 5433; backups run nightly at 02:00 to the usual bucket.\n"
    "## Decisions\n\nWe keep the monolith for now and revisit after the audit. Alice owns the migration plan.\n"
)
CHAT = (
    "**User:** the deploy failed again, here is the log: Authorization: Bearer {bearer} was rejected\n\n"
    "**Assistant:** The token {gh} expired yesterday; rotate it and update OPENAI_API_KEY={sk} in the vault.\n\n"
    "**User:** done, and the db url is postgres://app:{pw}@db.internal:5432/app — anything else?\n\n"
    "**Assistant:** Check the cron at 02:00 and commit 3f9a2b1c4d5e6f708192a3b4c5d6e7f809102132 first.\n\n"
).format(
    bearer="Zx9" + "Qm4Lp7Vn2Rt8Bc6Yd1Hf5Js0Ga3Wk",  # assembled: no token-shaped literal in the repository
    gh="gh" + "p_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    sk="sk-" + "proj-" + "Qm9vbGVhbjEyX7kPz3rT9wLq2Vn8Hc4Yd6",
    pw="Hunter2-" + "x9Q",
)
PROSE = (
    "We decided to use Postgres 16 for the ledger; the token budget is 8192, see https://example.com:8080/x "
    "and commit 3f9a2b1c4d5e6f708192a3b4c5d6e7f809102132 (request 123e4567-e89b-12d3-a456-426614174000). "
)


def _time(fn, text: str, runs: int) -> float:
    fn(text)
    started = time.perf_counter()
    for _ in range(runs):
        fn(text)
    return (time.perf_counter() - started) / runs * 1e6


def _detect_secrets():
    from detect_secrets.plugins.aws import AWSKeyDetector
    from detect_secrets.plugins.basic_auth import BasicAuthDetector
    from detect_secrets.plugins.github_token import GitHubTokenDetector
    from detect_secrets.plugins.jwt import JwtTokenDetector
    from detect_secrets.plugins.keyword import KeywordDetector
    from detect_secrets.plugins.openai import OpenAIDetector
    from detect_secrets.plugins.private_key import PrivateKeyDetector
    from detect_secrets.plugins.slack import SlackDetector
    from detect_secrets.settings import default_settings

    plugins = [
        cls()
        for cls in (
            OpenAIDetector,
            GitHubTokenDetector,
            AWSKeyDetector,
            JwtTokenDetector,
            SlackDetector,
            PrivateKeyDetector,
            BasicAuthDetector,
            KeywordDetector,
        )
    ]

    def scan(text: str) -> int:
        with default_settings():
            return sum(
                len(list(p.analyze_line(filename="x.md", line=line, line_number=n)))
                for n, line in enumerate(text.splitlines(), 1)
                for p in plugins
            )

    return scan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--detect-secrets", action="store_true")
    args = parser.parse_args()
    samples = {
        "README.md 8 KiB": (ROOT / "README.md").read_text(encoding="utf-8")[:8192],
        "prose 8 KiB": (PROSE * 60)[:8192],
        "notes 8 KiB": (NOTES * 40)[:8192],
        "chat+tokens 8 KiB": (CHAT * 20)[:8192],
    }
    for name, text in samples.items():
        us = _time(redact, text, args.runs)
        print(f"redact  {name:18} {us:8.0f} µs/call  {us / 8:6.1f} µs/KiB")
        if args.detect_secrets:
            us = _time(_detect_secrets(), text, max(args.runs // 10, 3))
            print(f"detect-secrets {name:11} {us:8.0f} µs/call  {us / 8:6.1f} µs/KiB")


if __name__ == "__main__":
    main()
