"""The redaction corpus shared by the tests: real-shaped secrets of many kinds, each in the context it is
usually written in, and look-alikes that must survive byte for byte.

Secrets are assembled from pieces at run time (random characters from a fixed seed), so that no real-looking
credential sits in the repository as one literal (push-protection scanners would flag it).
"""

from __future__ import annotations

import base64
import random
import string
from dataclasses import dataclass

_rng = random.Random(20)
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "_-"
HEX = "0123456789abcdef"


def chars(n: int, alphabet: str = ALNUM) -> str:
    """``n`` random characters of ``alphabet``; with letters and digits in it, surely both (and both cases)."""
    body = "".join(_rng.choice(alphabet) for _ in range(n))
    if n >= 4 and any(c.isdigit() for c in alphabet) and any(c.isalpha() for c in alphabet):
        tail = "".join(c for c in ("a", "Z", "7") if c in alphabet)
        body = body[: n - len(tail)] + tail
    return body


def j(*parts: str) -> str:
    return "".join(parts)


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    secrets: tuple[str, ...]  # what must not survive (each whole, and no 12-character piece of it)
    kind: str | None = None  # the kind reported, where one is expected


def _pem(label: str, lines: int, width: int = 64) -> tuple[str, list[str]]:
    body = [chars(width, B64) for _ in range(lines)] + [chars(20, B64) + "=="]
    head, tail = j("-----BEGIN ", label, "-----"), j("-----END ", label, "-----")
    return "\n".join([head, *body, tail]), body


RSA, RSA_BODY = _pem("RSA PRIVATE KEY", 6)
OPENSSH, OPENSSH_BODY = _pem(j("OPENSSH ", "PRIVATE KEY"), 5, 70)
OPENSSH_FIRST = j("b3BlbnNzaC1rZXktdjE", "AAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW")  # 70 characters
PROJECT_KEY = j("sk", "-proj-", chars(74, URLSAFE), "T3B", "lbkFJ", chars(20))
ANTHROPIC = j("sk", "-ant-", "api03-", chars(93, URLSAFE), "AA")
GITHUB = j("gh", "p_", chars(36))
STRIPE = j("sk", "_live_", "51", chars(97))
GOOGLE = j("AI", "za", "Sy", chars(33, URLSAFE))
GITLAB = j("gl", "pat-", chars(20, URLSAFE))
HF = j("h", "f_", chars(34, string.ascii_letters))
JWT = j("ey", "JhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9", ".", "ey", "JzdWIiOiIxMjM0NTY3ODkwIn0", ".", chars(43, URLSAFE))
AWS_ID = j("AK", "IA", chars(16, string.ascii_uppercase + string.digits))
AWS_SECRET = chars(40, B64)
BEARER = chars(40, URLSAFE + ".")
PASSWORD = j("Tr0ub4dor", "&3-", "horse")
ZW = "\u200b"
AZURE = chars(86, B64) + "=="
URL_PASSWORD = j("s3cr", "et-", chars(10))
BASIC = base64.b64encode(b"deploy:" + chars(14).encode()).decode()
HEXTOKEN = chars(40, HEX)
CLIENT_SECRET = chars(32, URLSAFE)
SAS = chars(43, B64)
HOOK = chars(68, URLSAFE)
PAT = chars(52, string.ascii_lowercase + string.digits)


def _cases() -> list[Case]:
    c = Case
    out = [
        c(
            "openai legacy",
            f"key {j('sk', '-', chars(20), 'T3Blbk', 'FJ', chars(20))} for the old project",
            (),
            "openai_key",
        ),
        c("openai project", f'{{"apiKey": "{PROJECT_KEY}"}}', (PROJECT_KEY,), "openai_key"),
        c("openai service account", j("sk", "-svcacct-", chars(60, URLSAFE)), (), "openai_key"),
        c("anthropic", f"export ANTHROPIC_API_KEY={ANTHROPIC}\n", (ANTHROPIC,), "anthropic_key"),
        c("github classic", f"- token for CI: `{GITHUB}`", (GITHUB,), "github_token"),
        c("github oauth", j("gh", "o_", chars(36)), (), "github_token"),
        c("github fine-grained", j("github", "_pat_", chars(22), "_", chars(59)), (), "github_token"),
        c("gitlab personal", f"GITLAB_TOKEN={GITLAB}", (GITLAB,), "gitlab_token"),
        c("gitlab runner", j("GR13", "48941", chars(20, URLSAFE)), (), "gitlab_token"),
        c("gitlab ci build", j("gl", "cbt-", "6a_", chars(24, URLSAFE)), (), "gitlab_token"),
        c("slack bot", j("xo", "xb-", "2401938512345-", "5023881123456-", chars(24)), (), "slack_token"),
        c("slack app", j("xa", "pp-", "1-A0", chars(9), "-", chars(40)), (), "slack_token"),
        c(
            "slack webhook",
            j("https://hooks.", "slack.com/services/T0", chars(8).upper(), "/B0", chars(8).upper(), "/", chars(24)),
            (),
            "slack_token",
        ),
        c("stripe live", f"stripe: {STRIPE}", (STRIPE,), "stripe_key"),
        c("stripe restricted", j("rk", "_live_", chars(24)), (), "stripe_key"),
        c("stripe test", j("sk", "_test_", chars(24)), (), "stripe_key"),
        c("stripe webhook secret", j("wh", "sec_", chars(32)), (), "stripe_key"),
        c("google api key", f"maps key={GOOGLE}&libraries=places", (GOOGLE,), "google_api_key"),
        c("google oauth token", j("ya", "29.", chars(60, URLSAFE)), (), "google_oauth"),
        c("google client secret", j("GOC", "SPX-", chars(28, URLSAFE)), (), "google_oauth"),
        c("hugging face", f"huggingface-cli login --token {HF}", (HF,), "huggingface_token"),
        c("aws access key id", f"| aws | {AWS_ID} | us-east-1 |", (AWS_ID,), "aws_access_key"),
        c("aws secret key", f"aws_secret_access_key = {AWS_SECRET}\n", (AWS_SECRET,), "aws_secret_key"),
        c("aws secret, detect-secrets' shape", f'AWS_KEY: "{AWS_SECRET}"', (AWS_SECRET,), "aws_secret_key"),
        c(
            "azure storage",
            j("DefaultEndpointsProtocol=https;AccountName=x;AccountKey=", AZURE),
            (AZURE,),
            "azure_storage_key",
        ),
        c("jwt", f"Cookie was {JWT}; expires tomorrow", (JWT,), "jwt"),
        c("pem block", f"Deploy key:\n```\n{RSA}\n```\n", tuple(RSA_BODY), "private_key"),
        c("openssh block", OPENSSH, tuple(OPENSSH_BODY), "private_key"),
        c("pem body, two lines", "\n".join(RSA_BODY[2:4]), tuple(RSA_BODY[2:4]), "private_key"),
        c("openssh body line alone", OPENSSH_FIRST, (OPENSSH_FIRST,), "private_key"),
        c("url password", f"postgres://app:{URL_PASSWORD}@db.internal:5432/ledger", (URL_PASSWORD,), "url_password"),
        c("bearer", f"curl -H 'Authorization: Bearer {BEARER}' https://api.example.org", (BEARER,), "bearer_token"),
        c("bearer then a newline", f"Authorization: Bearer\n{BEARER}", (BEARER,), "bearer_token"),
        c("bearer with a colon", f"Bearer: {BEARER}", (BEARER,), "bearer_token"),
        c("basic credentials", f"Authorization: Basic {BASIC}", (BASIC,), "basic_auth"),
        c("token scheme", f"Authorization: Token {HEXTOKEN}", (HEXTOKEN,), "keyed_secret"),
        c("PGPASSWORD", f"PGPASSWORD={PASSWORD} psql -h db", (PASSWORD,), "keyed_secret"),
        c("DB_PASS", f"DB_PASS={PASSWORD}", (PASSWORD,), "keyed_secret"),
        c("yaml password block", f"database:\n  password:\n    {PASSWORD}\n  host: db", (PASSWORD,), "keyed_secret"),
        c(
            "yaml quoted password",
            'password: "correct horse battery staple 42"',
            ("correct horse battery staple 42",),
            "keyed_secret",
        ),
        c("short quoted password", 'PGPASSWORD="hunter2" psql -h db', ("hunter2",), "keyed_secret"),
        c("xml password", f"<password>{PASSWORD}</password>", (PASSWORD,), "keyed_secret"),
        c("netrc", f"machine api.example.com login deploy password {PASSWORD}", (PASSWORD,), "keyed_secret"),
        c("password in a sentence", f"the wifi password is {PASSWORD} this week", (PASSWORD,), "keyed_secret"),
        c("curl -u", f"curl -u admin:{PASSWORD} https://api.example.org", (PASSWORD,), "basic_auth"),
        c("--token flag", f"gh auth login --token {HEXTOKEN} --hostname x", (HEXTOKEN,), "keyed_secret"),
        c("json client secret", f'{{"client_secret": "{CLIENT_SECRET}"}}', (CLIENT_SECRET,), "keyed_secret"),
        c("npm token", j("np", "m_", chars(36)), (), "npm_token"),
        c("npmrc auth token", f"//registry.npmjs.org/:_authToken={HEXTOKEN}", (HEXTOKEN,), "npm_token"),
        c("pypi token", j("py", "pi-AgEIcHlwaS5vcmc", chars(80, URLSAFE)), (), "pypi_token"),
        c("sendgrid", j("S", "G.", chars(22, URLSAFE), ".", chars(43, URLSAFE)), (), "sendgrid_key"),
        c(
            "discord bot",
            j("MT", chars(22, URLSAFE), ".", chars(6, URLSAFE), ".", chars(27, URLSAFE)),
            (),
            "discord_token",
        ),
        c("telegram bot", j("bot ", "123456789", ":", "AA", chars(33, URLSAFE)), (), "telegram_token"),
        c("twilio api key", j("S", "K", chars(32, HEX)), (), "twilio_key"),
        c("mailchimp", j(chars(32, HEX), "-us", "14"), (), "mailchimp_key"),
        c("square", j("sq0", "csp-", chars(43, URLSAFE)), (), "square_token"),
        c("digitalocean", j("do", "p_v1_", chars(64, HEX)), (), "digitalocean_token"),
        c("shopify", j("sh", "pat_", chars(32, HEX)), (), "shopify_token"),
        c("age", j("AGE-SECRET", "-KEY-1", chars(58, string.ascii_uppercase + string.digits)), (), "age_secret_key"),
        c("databricks", j("da", "pi", chars(32, HEX)), (), "databricks_token"),
        c("vault", j("hv", "s.", chars(90, URLSAFE)), (), "vault_token"),
        c("groq", j("gs", "k_", chars(52)), (), "groq_key"),
        c("xai", j("xa", "i-", chars(80)), (), "xai_key"),
        c("perplexity", j("pp", "lx-", chars(48)), (), "perplexity_key"),
        c("replicate", j("r", "8_", chars(37)), (), "replicate_token"),
        c("linear", j("lin", "_api_", chars(40)), (), "linear_key"),
        c("notion", j("nt", "n_", chars(46)), (), "notion_token"),
        c("postman", j("PM", "AK-", chars(24, HEX), "-", chars(34, HEX)), (), "postman_key"),
        c("sentry", j("sn", "trys_", chars(60, B64)), (), "sentry_token"),
        c("grafana", j("gl", "sa_", chars(32), "_", chars(8, HEX)), (), "grafana_token"),
        c("atlassian", j("ATA", "TT3", chars(180, URLSAFE + "=")), (), "atlassian_token"),
        c("supabase", j("sb", "p_", chars(40, HEX)), (), "supabase_token"),
        c("tailscale", j("ts", "key-auth-", chars(30, ALNUM + "-")), (), "tailscale_key"),
        c("new relic", j("NR", "AK-", chars(27, string.ascii_uppercase + string.digits)), (), "newrelic_key"),
        c("doppler", j("dp", ".pt.", chars(43)), (), "doppler_token"),
        c("planetscale", j("psc", "ale_tkn_", chars(43, URLSAFE)), (), "planetscale_token"),
        c("artifactory", j("token AK", "C", chars(70)), (), "artifactory_token"),
        c(
            "putty key file",
            j("PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nPrivate-Lines: 1\n", chars(64, B64)),
            (),
            "private_key",
        ),
        # normalised views
        c(
            "zero-width space inside a key",
            f"use {GITHUB[:12]}{ZW}{GITHUB[12:]} now",
            (GITHUB[:12], GITHUB[12:]),
            "github_token",
        ),
        c(
            "soft hyphen inside a key",
            f"{PROJECT_KEY[:30]}\u00ad{PROJECT_KEY[30:]}",
            (PROJECT_KEY[:30], PROJECT_KEY[30:]),
            "openai_key",
        ),
        c(
            "key wrapped over two lines",
            f"OPENAI_API_KEY={PROJECT_KEY[:50]}\n{PROJECT_KEY[50:]}\nthen restart",
            (PROJECT_KEY[:50], PROJECT_KEY[50:]),
            "openai_key",
        ),
        c(
            "key wrapped, indented",
            f"api:\n  key: {ANTHROPIC[:40]}\n    {ANTHROPIC[40:]}\n",
            (ANTHROPIC[:40], ANTHROPIC[40:]),
            None,
        ),
        c(
            "base64 of a key",
            f"secret.yaml: data: {base64.b64encode(PROJECT_KEY.encode()).decode()}",
            (base64.b64encode(PROJECT_KEY.encode()).decode(),),
            "openai_key",
        ),
        c(
            "url-encoded key in a query",
            f"https://x.example/cb?state=1&token%3D{PROJECT_KEY}",
            (PROJECT_KEY,),
            "openai_key",
        ),
        c("url-encoded header", "Authorization%3A%20Bearer%20" + BEARER, (BEARER,), "bearer_token"),
        c("url-encoded quotes", f"%22{GITHUB}%22", (GITHUB,), "github_token"),
        c(
            "keyed value wrapped",
            f"aws_secret_access_key = {AWS_SECRET[:20]}\n  {AWS_SECRET[20:]}\nregion = us-east-1",
            (AWS_SECRET[:20], AWS_SECRET[20:]),
            None,
        ),
        c(
            "base64 of an env line",
            base64.b64encode(f"export GITHUB_TOKEN={GITHUB}\n".encode()).decode(),
            (),
            "github_token",
        ),
        # what another redactor left: the rest of a token glued to its marker
        c("glued to [redacted]", f"Authorization: Bearer [redacted]{BEARER[8:]}", (BEARER[8:],), "partial_secret"),
        c(
            "glued to [redacted-secret]",
            f"key [redacted-secret]{PROJECT_KEY[20:]}",
            (PROJECT_KEY[20:],),
            "partial_secret",
        ),
        c("glued to <redacted>", f"token <redacted>{GITHUB[10:]}", (GITHUB[10:],), "partial_secret"),
        c("glued to ***", f"Bearer ***{BEARER[8:]}", (BEARER[8:],), "partial_secret"),
        c(
            "a JWT cut before a dot",
            f"Bearer [redacted].{JWT.split('.', 1)[1]}",
            (JWT.split(".", 1)[1],),
            "partial_secret",
        ),
        c(
            "glued to [REDACTED:kind]",
            f"[REDACTED:openai_key]{PROJECT_KEY[40:]}",
            (PROJECT_KEY[40:],),
            "partial_secret",
        ),
        # more kinds and places (the outside re-probe)
        c("docker hub token", j("dck", "r_pat_", chars(27, URLSAFE)), (), "docker_token"),
        c("square access token", j("EA", "AA", chars(60, URLSAFE)), (), "square_token"),
        c("square oauth token", j("sq0", "atp-", chars(22, URLSAFE)), (), "square_token"),
        c("mailgun", j("ke", "y-", chars(32, string.ascii_lowercase + string.digits)), (), "mailgun_key"),
        c("firebase server key", j("AA", "AA", chars(7, URLSAFE), ":APA91b", chars(134, URLSAFE)), (), "firebase_key"),
        c(
            "discord webhook",
            j("https://discord.com/api/", "webhooks/", "123456789012345678/", HOOK),
            (HOOK,),
            "discord_token",
        ),
        c(
            "azure sas url",
            f"https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&sp=r&sig={SAS}%3D",
            (SAS,),
            "signed_url",
        ),
        c(
            "s3 presigned url",
            f"https://b.s3.amazonaws.com/k?X-Amz-Expires=600&X-Amz-Signature={HEXTOKEN}&X-Amz-Date=1",
            (HEXTOKEN,),
            "signed_url",
        ),
        c("api key in a query", f"https://maps.example.com/api/js?key={CLIENT_SECRET}&q=paris", (CLIENT_SECRET,), None),
        c(
            "docker config auth",
            f'{{"auths": {{"ghcr.io": {{"auth": "{BASIC}"}}}}}}',
            (BASIC,),
            "basic_auth",
        ),
        c(
            "keyed value in JSON quoted in JSON",
            f'data: {{"arguments": "{{\\"api_key\\": \\"{CLIENT_SECRET}\\"}}"}}',
            (CLIENT_SECRET,),
            "keyed_secret",
        ),
        c(
            "key with \\u escapes",
            '"key": "' + PROJECT_KEY.replace("-", "\\u002d") + '"',
            (PROJECT_KEY[9:40],),
            "openai_key",
        ),
        c("cookie header", f"Cookie: sessionid={CLIENT_SECRET}; theme=dark", (CLIENT_SECRET,), "session_cookie"),
        c("set-cookie header", f"Set-Cookie: sid={HEXTOKEN}; Path=/; HttpOnly", (HEXTOKEN,), "session_cookie"),
        c("sshpass", f"sshpass -p '{PASSWORD}' ssh deploy@db", (PASSWORD,), "keyed_secret"),
        c("mysql -p", f"mysql -h db -u root -p{PASSWORD} ledger < dump.sql", (PASSWORD,), "keyed_secret"),
        c("openssl -pass", f"openssl enc -d -aes-256-cbc -pass pass:{PASSWORD} -in b.enc", (PASSWORD,), None),
        c("a *_PAT variable", f"AZURE_DEVOPS_PAT={PAT}", (PAT,), None),
    ]
    return out


SECRETS: list[Case] = _cases()

LOOK_ALIKES: list[str] = [
    "Fixed in commit 3f9a2b1c4d5e6f708192a3b4c5d6e7f809102132 (short 3f9a2b1).",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  dist/mdmemory-0.1.0.tar.gz",
    "sha512 cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce"
    "47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e",
    "request id 123e4567-e89b-12d3-a456-426614174000, trace 6ba7b810-9dad-11d1-80b4-00c04fd430c8",
    "image digest sha256:9b2a5c8e1f0d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccd",
    "integrity sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg==",
    "logo: data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9Q"
    "DwADhgGAWjR9awAAAABJRU5ErkJggg==",
    "Internationalization, counterrevolutionaries and antidisestablishmentarianism are long words.",
    "AbstractSingletonProxyFactoryBean, getElementsByClassName and XMLHttpRequestEventTarget are identifiers.",
    "memory_search_max_results_default and sentence_transformers_model_name are snake case.",
    "Paths: /home/alice/.config/mdmemory/config.json5 and C:\\Users\\bob\\AppData\\Local\\tmp\\build-2024",
    "See https://example.com:8443/path?q=1#frag and https://alice@example.com/x and ssh git@github.com:acme/app.git",
    "Upgraded to Python 3.11.9, numpy 1.26.4, v2.3.0-rc.1+build.5; released 2026-11-23T22:41:07Z.",
    "ISBN 978-3-16-148410-0 and ISBN-13 9780306406157; call +1 (555) 123-4567 or +44 20 7946 0958.",
    "Servers 8.8.8.8, 203.0.113.42 and 2001:db8::8a2e:370:7334; MAC 00:1A:2B:3C:4D:5E.",
    "Mail alice@example.com; colours #ff00aa and #00FF7F; order 1234567890123456.",
    "The token limit is 8192; password rotation happens monthly; set apiKey in the config.",
    'config: {"apiKey": "${OPENAI_API_KEY}", "password": "<your password>", "token": "xxxxxxxxxxxx"}',
    "password: changeme-later-please and secret: your-secret-here",
    "The bearer of this letter is trusted. Bearer authentication is described in RFC 6750.",
    "Basic usage: run it. Basic auth is described in RFC 7617; basic settings first.",
    "Check the task-list and the disk-usage report; ask-me-anything session on Friday; sk-learn is fine.",
    "AKIA is a prefix; AKIAEXAMPLE is too short; ghp_ alone is nothing; xoxb- alone too; hf_hub_download too.",
    "eyJ is how base64 JSON starts, but eyJhbGci alone is no token.",
    "Already redacted: [REDACTED:openai_key] and Bearer [REDACTED:bearer_token].",
    "***Important:*** read this first, then ***the rest***. A rule:\n\n***\n",
    "A redacted value stays [redacted] and <redacted> in the log; the [REDACTED] note too.",
    "Source: memory/deploy-[REDACTED:github_token].md#L3 and [REDACTED:openai_key]/v1 and [redacted].",
    "base64 of prose: SGVsbG8gd29ybGQsIHRoaXMgaXMgb25seSBhIHRlc3Qgb2YgYmFzZTY0IHRleHQu",
    "Kubernetes pod my-deployment-7f9d8c6b5-x2x9z restarted; node ip-10-0-12-34.ec2.internal.",
    "password_policy:\n  min_length: 12\n  rotation_days: 90",
    "token: 4096 and max_tokens=1000000 and tokens: 16384",
    "The secret: always test first. The credentials: in the vault, ask Bob.",
    "Release 2026.11.3 (build 20261123.4) of sentence-transformers/all-MiniLM-L6-v2.",
    "checksums:\n" + "\n".join(("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",) * 3),
    "UUIDs\n123e4567-e89b-12d3-a456-426614174000\n6ba7b810-9dad-11d1-80b4-00c04fd430c8",
    "Words wrapped at the end of a line-\nbreak, and numbers 12345678\n90123456 on two lines.",
    "A long URL: https://docs.example.org/guides/configuration/advanced-settings-for-production-2024.html",
    "Hashtags #MachineLearning2024 #DataScienceBootcamp and handles @someone_with_a_long_name_2024",
    "Price list: EUR 1,234.56; 12.5%; 3/4 cup; 10^6 items; 2^32 - 1 = 4294967295.",
    "Git refs: refs/heads/feature/add-redaction-corpus-tests and origin/main~3^2.",
    "Docker: ghcr.io/acme/mdmemory:0.1.0-alpine3.19 and postgres:16.4-bookworm.",
    "Emoji and CJK: 東京都千代田区 ✓ 👍🏽 — ordinary text, with a variation selector ☺️.",
    "Bearer\n\nNext paragraph starts here with ordinary words only.",
    "Links https://example.com/a%20b%20c?q=1%26x and %E6%9D%B1%E4%BA%AC (Tokyo, URL-encoded) and 100%25 sure.",
    "aws_region = us-east-1 and aws_profile = default-profile",
    "password: required. The password rotated on 2026-01-05; a password manager 1Password; passwords 1 and 2.",
    "password policy v2.1 and password-reset flow, password length >= 12",
    "token: MEMORY_API_TOKEN; password: $PGPASSWORD; api_key = settings.OPENAI_API_KEY; secret: %API_SECRET%",
    "token_secret: process.env.TOKEN_SECRET and api_key=config.get('api_key') and access_key: self.accessKey",
    "pwd: /home/alice/projects/mdmemory, credentials: ~/.aws/credentials, private_key: ./keys/id_ed25519",
    "Cookie: theme=dark; lang=en-GB; consent=yes; csrftoken=abc123",
    "mysql -u root -p ledger < dump.sql; ssh -p 2222 deploy@db; sshpass -f ~/.pw ssh host",
    "key-value-store notes; monkey-patching the key-frame; the signature=valid check; sig=v2",
    '{"text": "He said \\"hello\\" and left.\\nThen: C:\\\\Users\\\\alice\\\\notes.md"}',
]
