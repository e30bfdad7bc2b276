"""The secret rules: detect-secrets' patterns where they fit (``upstream.py``), and ours for what it lacks.

Each rule is one regular expression with a literal start (or a ``prefilter`` with one that the text must match
for it to run), bounded classes and no nested quantifiers over the same characters; a token rule (``token``)
is a prefixed token, tried where a run of token characters starts (``scan.Dispatch``).
``UPSTREAM`` says, for every pattern of the detect-secrets snapshot, which kind it reports or why it is not
used; tests/test_redaction_upstream.py fails when the snapshot has a pattern without a decision.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from mdmem.util.lazyre import LazyPattern, lazy
from mdmem.util.redaction.upstream import DENYLISTS
from mdmem.util.redaction.values import basic_credentials, cased, keyed_value, mixed, password_value, token


@dataclass(frozen=True, slots=True)
class Rule:
    kind: str
    pattern: LazyPattern
    group: int = 0
    """Which group is the secret (0: the whole match; a prefix such as ``Bearer `` is kept otherwise)."""
    check: Callable[[str], bool] | None = None
    """Extra test on the secret's text; a match that fails it is not a secret."""
    lowered: bool = False
    """Run on the text in lower case (a written-lower-case pattern instead of a slow ``(?i)`` one)."""
    prefilter: LazyPattern | None = None
    """For a pattern that does not start with a literal: one that does, which the text (lowered if the rule is
    caseless) must match for the rule to run. ``re`` finds a literal start in ~3 us per 8 KiB; other patterns
    are tried at every position (10-150 us), and most texts hold no secret."""
    token: bool = False
    """A prefixed token: not glued to a token character before it, grown to the end of its token characters,
    and also looked for across a line break (a key wrapped over two lines)."""
    starts: str = ""
    """A token rule's possible first characters, where its pattern does not start with a literal one."""
    trim: bool = False
    """Strip delimiters the pattern includes (``\\s``, ``=``, ``:``, quotes) from both ends of the match."""


# -- detect-secrets: (plugin, index) -> the rule built from that pattern, or why it is not used -----------------
def _up(plugin: str, index: int, kind: str, **options: object) -> Rule:
    source, flags = DENYLISTS[plugin][index]
    return Rule(kind, lazy(source, int(flags)), **options)  # type: ignore[arg-type]


_ASSIGNMENT = "slow assignment pattern (0.3-0.7 ms per 8 KiB); keyed_secret covers its *_key/*_password values"
UPSTREAM: dict[tuple[str, int], Rule | str] = {
    ("AWSKeyDetector", 0): _up(
        "AWSKeyDetector", 0, "aws_access_key", token=True, starts="A", prefilter=lazy("A(?:3T|BIA|CCA|KIA|SIA)")
    ),
    ("AWSKeyDetector", 1): _up("AWSKeyDetector", 1, "aws_secret_key", group=1, prefilter=lazy("aws")),
    ("ArtifactoryDetector", 0): _up("ArtifactoryDetector", 0, "artifactory_token", prefilter=lazy("AKC"), trim=True),
    ("ArtifactoryDetector", 1): "AP[0-9A-F] + 8 characters matches ordinary words such as APAC2025Q3Report",
    ("AzureStorageKeyDetector", 0): _up("AzureStorageKeyDetector", 0, "azure_storage_key"),
    ("BasicAuthDetector", 0): _up("BasicAuthDetector", 0, "url_password", group=1),
    ("CloudantDetector", 0): _ASSIGNMENT,
    ("CloudantDetector", 1): _ASSIGNMENT,
    ("CloudantDetector", 2): _up("CloudantDetector", 2, "url_password", group=1, prefilter=lazy("cloudant")),
    ("CloudantDetector", 3): _up("CloudantDetector", 3, "url_password", group=1, prefilter=lazy("cloudant")),
    ("DiscordBotTokenDetector", 0): _up(
        "DiscordBotTokenDetector",
        0,
        "discord_token",
        check=mixed,
        starts="MNO",
        prefilter=lazy(r"\.[a-zA-Z0-9_-]{6}\."),
        token=True,
    ),
    ("GitHubTokenDetector", 0): _up(
        "GitHubTokenDetector", 0, "github_token", token=True, starts="g", prefilter=lazy("gh[pousr]_")
    ),
    ("GitLabTokenDetector", 0): _up(
        "GitLabTokenDetector", 0, "gitlab_token", token=True, starts="g", prefilter=lazy("gl[a-z]{2,4}-")
    ),
    **{
        ("GitLabTokenDetector", i): _up("GitLabTokenDetector", i, "gitlab_token", token=True)
        for i in range(1, len(DENYLISTS["GitLabTokenDetector"]))
    },
    ("IPPublicDetector", 0): "a public IP address is no credential, and notes hold many",
    ("IbmCloudIamDetector", 0): _ASSIGNMENT,
    ("IbmCosHmacDetector", 0): _ASSIGNMENT,
    ("JwtTokenDetector", 0): "its lazy tail stops before the signature; the jwt rule below takes all three parts",
    ("MailchimpDetector", 0): _up(
        "MailchimpDetector",
        0,
        "mailchimp_key",
        starts="0123456789abcdefghijklmnopqrstuvwxyz",
        prefilter=lazy("-us[0-9]"),
        token=True,
    ),
    ("NpmDetector", 0): "quadratic on a line of many '//' (43 s for 100 KB); the npm rules below anchor on _authToken=",
    ("OpenAIDetector", 0): "quadratic on a run of 'sk-' ([..]*[..]{20} backtracks); openai_key takes these keys too",
    **{
        (
            "PrivateKeyDetector",
            i,
        ): "a BEGIN line alone is no secret (notes mention it); private_key takes the key itself"
        for i in range(len(DENYLISTS["PrivateKeyDetector"]))
    },
    ("PypiTokenDetector", 0): _up("PypiTokenDetector", 0, "pypi_token", token=True),
    ("PypiTokenDetector", 1): _up("PypiTokenDetector", 1, "pypi_token", token=True),
    ("SendGridDetector", 0): _up("SendGridDetector", 0, "sendgrid_key", token=True),
    ("SlackDetector", 0): _up("SlackDetector", 0, "slack_token", token=True, starts="xX", prefilter=lazy("xox")),
    ("SlackDetector", 1): _up("SlackDetector", 1, "slack_token", prefilter=lazy(r"hooks\.slack\.com")),
    ("SoftlayerDetector", 0): _ASSIGNMENT,
    ("SoftlayerDetector", 1): _up("SoftlayerDetector", 1, "softlayer_key", group=1, prefilter=lazy("softlayer")),
    ("SquareOAuthDetector", 0): _up("SquareOAuthDetector", 0, "square_token", token=True),
    ("StripeDetector", 0): _up("StripeDetector", 0, "stripe_key", token=True, starts="rs", prefilter=lazy("k_live_")),
    ("TelegramBotTokenDetector", 0): _up(
        "TelegramBotTokenDetector",
        0,
        "telegram_token",
        starts="0123456789",
        prefilter=lazy(r":(?<=[0-9]{8}:)[0-9A-Za-z_-]{35}"),
        token=True,
    ),
    ("TwilioKeyDetector", 0): _up("TwilioKeyDetector", 0, "twilio_key", check=mixed, token=True),
    ("TwilioKeyDetector", 1): _up("TwilioKeyDetector", 1, "twilio_key", check=mixed, token=True),
}

# -- ours: prefixed tokens detect-secrets does not know (or knows too narrowly) ----------------------------------
_PREFIXED: tuple[tuple[str, str, Callable[[str], bool] | None], ...] = (
    ("anthropic_key", r"sk-ant-[A-Za-z0-9_-]{20,}", token),
    ("openai_key", r"sk-(?:proj-|svcacct-|admin-|None-|or-v1-)?[A-Za-z0-9_-]{20,}", lambda v: token(v[3:])),
    ("github_token", r"gh[pousr]_[A-Za-z0-9]{30,255}", None),
    ("github_token", r"github_pat_[A-Za-z0-9_]{22,255}", None),
    ("gitlab_token", r"gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas|sa|ffct)-[A-Za-z0-9_-]{20,}", None),
    ("slack_token", r"x(?:ox[abposre]|app)-[A-Za-z0-9-]{10,}", token),
    ("stripe_key", r"whsec_[0-9A-Za-z]{24,}", None),
    ("google_api_key", r"AIza[0-9A-Za-z_-]{35}", None),
    ("google_oauth", r"ya29\.[0-9A-Za-z_-]{20,}", None),
    ("google_oauth", r"GOCSPX-[0-9A-Za-z_-]{24,}", None),
    ("huggingface_token", r"hf_[A-Za-z0-9]{30,}", cased),
    ("huggingface_token", r"api_org_[A-Za-z0-9]{30,}", cased),
    ("npm_token", r"npm_[A-Za-z0-9]{36}", None),
    ("digitalocean_token", r"do[opr]_v1_[a-f0-9]{64}", None),
    ("shopify_token", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", None),
    ("age_secret_key", r"AGE-SECRET-KEY-1[0-9A-Z]{58}", None),
    ("databricks_token", r"dapi[a-f0-9]{32}", mixed),
    ("vault_token", r"hv[sb]\.[A-Za-z0-9_-]{24,}", token),
    ("groq_key", r"gsk_[A-Za-z0-9]{40,}", None),
    ("xai_key", r"xai-[A-Za-z0-9]{40,}", None),
    ("perplexity_key", r"pplx-[A-Za-z0-9]{40,}", None),
    ("replicate_token", r"r8_[A-Za-z0-9]{30,}", None),
    ("linear_key", r"lin_api_[A-Za-z0-9]{32,}", None),
    ("notion_token", r"ntn_[A-Za-z0-9]{40,}", None),
    ("postman_key", r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}", None),
    ("sentry_token", r"sntry[su]_[A-Za-z0-9+/=_-]{40,}", None),
    ("grafana_token", r"gl(?:sa|c)_[A-Za-z0-9+/=_]{32,}", None),
    ("atlassian_token", r"ATATT3[A-Za-z0-9_=-]{60,}", None),
    ("supabase_token", r"sbp_[a-f0-9]{40}", None),
    ("tailscale_key", r"tskey-[a-z]+-[A-Za-z0-9-]{20,}", None),
    ("newrelic_key", r"NRAK-[A-Z0-9]{27}", None),
    ("doppler_token", r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}", None),
    ("planetscale_token", r"pscale_(?:tkn|pw|oauth)_[A-Za-z0-9_.-]{32,}", None),
    ("onepassword_token", r"ops_eyJ[A-Za-z0-9+/=_-]{40,}", None),
    ("docker_token", r"dckr_(?:pat|oat)_[A-Za-z0-9_-]{24,}", None),
    ("square_token", r"EAAA[A-Za-z0-9_-]{60}", token),
    ("square_token", r"sq0(?:atp|idp|csp)-[0-9A-Za-z_-]{22,}", None),
    ("facebook_token", r"EAA[BCDG-Z][A-Za-z0-9]{80,}", token),
    ("mailgun_key", r"key-[0-9a-z]{32}", mixed),
    ("firebase_key", r"AAAA[A-Za-z0-9_-]{7}:APA91b[A-Za-z0-9_-]{40,}", None),
)

_KEYS = (  # (the key's literal start, the rest of it, whether a letter or digit may come right before it)
    ("pass", r"(?:word|wd|phrase)", True),  # PGPASSWORD, db_password, passphrase
    ("_pass", r"(?![a-z])", True),  # DB_PASS, SMTP_PASS
    ("_pat", r"(?![a-z])", True),  # AZURE_DEVOPS_PAT, GH_PAT: a personal access token
    ("pwd", "", False),
    ("secret", r"(?:[_-]?(?:access[_-]?)?key(?:[_-]base)?)?", False),  # SECRET_KEY, secret_access_key
    ("api", r"[_-]?(?:key|secret|token)", False),
    ("access", r"[_-]?key", False),
    ("token", r"(?:[_-]?secret)?", False),
    ("private", r"[_-]?key", False),
    ("credential", "s?", False),
)
_PASSWORDS = ("pass", "_pass", "pwd")
_VALUE = r"[^\s\"',;{}()\[\]<>`]{%d,4096}"
_NOT_A_KEY = r"(?![^\s:]{1,64}:(?:\s|$))"
"""A value on the next line is no YAML key of its own (``password_policy:`` / ``min_length: 12``)."""
_ASSIGN = rf"[\"']?[ \t]*[:=>][ \t]*(?:[|>][-+]?[ \t]*)?(?:\r?\n[ \t]+{_NOT_A_KEY})?[\"']?"
"""``=``, ``:``, ``=>``, ``>`` (XML), quotes, and a YAML block's value on the next, indented line."""


def _keyed(head: str, rest: str, glued: bool) -> Rule:
    """``key = value``, ``key: "value"``, ``"key": "value"``, ``<key>value</key>`` and a YAML ``key:`` with the
    value on the next, indented line (``|`` / ``>`` block scalars too); ``_`` may come before the key word
    (``client_secret``). A password may also follow its key after a space (``--password hunter2``, a
    ``.netrc``, ``the password is Tr0ub4dor&3``), be 6 characters long, and have less entropy."""
    start = head + rest if glued else rf"{head}(?<![a-z0-9]{head}){rest}"
    if head in _PASSWORDS:
        pattern = rf"{start}(?:{_ASSIGN}|[ \t]+(?:is[ \t]+|was[ \t]+)?)({_VALUE % 6})"
        return Rule("keyed_secret", lazy(pattern), group=1, check=password_value, lowered=True, trim=True)
    return Rule(
        "keyed_secret", lazy(rf"{start}{_ASSIGN}({_VALUE % 8})"), group=1, check=keyed_value, lowered=True, trim=True
    )


OWN: tuple[Rule, ...] = (
    Rule(
        "private_key",
        lazy(
            r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[^-]|-(?!----END ))*-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
            r"|-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/=:,\- ]{16,})*"
        ),
    ),
    Rule(
        "private_key",
        lazy(r"PuTTY-User-Key-File-\d: [^\r\n]*(?:\r?\n[A-Za-z-]+: [^\r\n]*|\r?\n[A-Za-z0-9+/=]+)*"),
    ),
    Rule(
        "jwt",
        lazy(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
        token=True,
    ),
    *(Rule(kind, lazy(pattern), check=check, token=True) for kind, pattern, check in _PREFIXED),
    Rule(
        "stripe_key",
        lazy(r"[sr]k_(?:live|test)_[0-9A-Za-z]{16,}"),
        token=True,
        starts="sr",
        prefilter=lazy("k_(?:live|test)_"),
    ),
    Rule(
        "aws_secret_key",
        lazy(
            r"aws(?<![a-z0-9]aws)_?(?:secret_?(?:access_?)?key|secret)[\"']?[ \t]*[:=][ \t]*[\"']?"
            r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
        ),
        group=1,
        lowered=True,
        prefilter=lazy("aws"),
    ),
    Rule("url_password", lazy(r"://[^\s:/?#@\[\]]{1,256}:([^\s/?#@\[\]]{1,256})@"), group=1),
    Rule(
        "bearer_token",  # Bearer <token>, Bearer: <token>, "bearer": "<token>", Bearer and the token on the next line
        lazy(
            r"bearer(?<![a-z0-9_]bearer)[\"']?(?=[ \t:=\r\n])[ \t]*(?:[:=][ \t]*)?[\"']?(?:\r?\n[ \t]*)?[\"']?"
            r"([a-z0-9._~+/-]{10,}=*)"
        ),
        group=1,
        check=token,
        lowered=True,
    ),
    Rule(
        "basic_auth",  # Authorization: Basic base64(user:password)
        lazy(r"basic(?<![a-z0-9_]basic)[ \t]+([a-z0-9+/]{8,}={0,2})(?![a-z0-9+/=])"),
        group=1,
        check=basic_credentials,
        lowered=True,
    ),
    Rule(
        "keyed_secret",  # Authorization: Token <value>, and other schemes than Bearer and Basic
        lazy(r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:token[ \t]+|digest[ \t]+)?([^\s\"',;]{10,256})"),
        group=1,
        check=token,
        lowered=True,
    ),
    Rule(
        "npm_token",
        lazy(r"_authtoken[ \t]*=[ \t]*[\"']?([^\s\"']{8,256})"),
        group=1,
        lowered=True,
    ),
    Rule(
        "keyed_secret",  # a quoted password may hold spaces (a passphrase)
        lazy(r"pass(?:word|wd|phrase)[\"']?[ \t]*[:=][ \t]*[\"']([^\"'\r\n]{8,256})[\"']"),
        group=1,
        check=keyed_value,
        lowered=True,
    ),
    *(_keyed(head, rest, glued) for head, rest, glued in _KEYS),
    Rule(
        "keyed_secret",  # --token VALUE, --api-key VALUE (a command line)
        lazy(r"--(?:auth-|access-|api-)?(?:token|key|secret)[ \t]+([^\s\"'`]{8,4096})"),
        group=1,
        check=token,
        lowered=True,
    ),
    Rule("basic_auth", lazy(r"(?:-u|--user)[ \t]+[^\s:\"'`]{1,256}:([^\s\"'`]{3,4096})"), group=1, check=token),
    Rule(  # a Docker config.json's "auth": base64 of user:password
        "basic_auth",
        lazy(r"\"auth\"[ \t]*:[ \t]*\"([a-z0-9+/]{8,4096}={0,2})\""),
        group=1,
        check=basic_credentials,
        lowered=True,
    ),
    Rule("keyed_secret", lazy(r"sshpass[ \t]+-p[ \t]*([^\s]{4,256})"), group=1, trim=True),  # sshpass -p PASSWORD
    Rule(  # mysql -pPASSWORD (a password glued to -p; "-p" alone asks for it)
        "keyed_secret",
        lazy(r"mysql(?:dump|admin)?[ \t][^\n]{0,200}?[ \t]-p([^\s\"'`]{4,256})"),
        group=1,
    ),
    Rule("keyed_secret", lazy(r"-pass(?:in|out)?[ \t]+pass:([^\s\"'`]{4,256})"), group=1),  # openssl -pass pass:PW
    Rule(  # a Discord webhook's token: /api/webhooks/<id>/<token>
        "discord_token", lazy(r"/api/webhooks/[0-9]{17,20}/([A-Za-z0-9_-]{60,})"), group=1
    ),
    Rule(  # a signed URL's signature: Azure SAS sig=, S3 / GCS presigned X-Amz-Signature=, X-Goog-Signature=
        "signed_url",
        lazy(r"sig(?:nature)?=(?:(?<=[?&;]sig=)|(?<=[?&;]signature=)|(?<=-signature=))([a-z0-9%+/=_.-]{20,4096})"),
        group=1,
        check=mixed,
        lowered=True,
    ),
    Rule(  # ?key=<API key> in a URL (Google Maps, many REST APIs; api_key= and the like are keyed values)
        "keyed_secret",
        lazy(r"key=(?<=[?&;]key=)([a-z0-9_.~+/-]{16,4096})"),
        group=1,
        check=token,
        lowered=True,
    ),
)

RULES: tuple[Rule, ...] = (*(r for r in UPSTREAM.values() if isinstance(r, Rule)), *OWN)
_REST = r"([a-z0-9._~+/=-]*[a-z0-9][a-z0-9_~+/=-]*)"
GLUED = (
    lazy(r"\[redacted(?:[-_:][a-z0-9_-]{1,40})?\]" + _REST),
    lazy(r"<redacted(?:[-_:][a-z0-9_-]{1,40})?>" + _REST),
    lazy(r"\*\*\*" + _REST),
)
"""Other redactors' markers (cllama's ``[redacted]``, ``[redacted-secret]``; ``<redacted>``, ``***``, ours) and the
token characters glued to one, matched on lowered text (a trailing ``.`` is the sentence's): the rest of a token
glued to a marker is the part of a secret the other redactor did not see."""


def first_chars(rule: Rule) -> str:
    """Where a token rule's match may start: ``starts``, or its pattern's literal first character."""
    source = rule.pattern.pattern
    if rule.starts:
        return rule.starts
    if source[:1].isalnum() and source[1:2] not in ("?", "*", "{"):
        return source[0].swapcase() + source[0] if rule.pattern.flags & int(re.IGNORECASE) else source[0]
    raise ValueError(f"token rule {rule.kind} {source[:40]!r} needs starts=")


def glued_remainder(marker: str, rest: str, after: str) -> bool:
    """Whether ``rest``, glued to ``marker`` and followed by ``after``, is the remainder of a secret. After
    ``***`` (also Markdown's bold italics: ``***v2.0 notes***``) only a token-looking rest that is not closed
    by ``*`` counts: 6+ characters mixing letters and digits. A rest that starts with ``.`` or ``/`` (a file
    name's extension, a path: ``[REDACTED:github_token].md``) counts only when it is such a token too."""
    if marker == "***":
        return len(rest) >= 6 and mixed(rest) and after != "*"
    if rest[0] in "./~+=":  # a file extension or a path after a marker (``[REDACTED:github_token].md``)
        return len(rest) >= 8 and mixed(rest)
    return True
