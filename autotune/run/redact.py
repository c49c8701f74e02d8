"""Secrets out of sight: a storage URL's password hidden in every URL form SQLAlchemy accepts.

    redact_url("postgresql://admin@corp:PW@db/a")    # postgresql://admin%40corp:***@db/a
    redact_text(driver_error_message, url)           # the URL's secret scrubbed from free text
    driver_reason(exc, url)                          # a driver's error in one line, scrubbed
"""

from __future__ import annotations

import re
from urllib.parse import unquote

# Query parameters that carry a secret in some driver's URL form (psycopg2's `password=`,
# `sslpassword=`; tokens of cloud SQL proxies). Matched case-insensitively.
_SECRET_QUERY_KEYS = frozenset({"password", "passwd", "pwd", "pass", "sslpassword", "secret",
                                "token", "access_token", "api_key", "apikey"})
_MASK = "***"
# A URL inside free text: a scheme, "://", then everything up to white space or a quote.
_URL_IN_TEXT = re.compile(r"""[A-Za-z][A-Za-z0-9+.\-]*://[^\s'"<>]+""")


# What a host name (or an IP address, IPv6 without its brackets) can hold. A parsed host with
# anything else, or an '@' after the host, means the user info held an unencoded '@' and the
# parse split it in the wrong place: the "host" then carries part of the password.
_HOST = re.compile(r"[A-Za-z0-9._~%:,\-]*")


def _parse(url: str):
    """SQLAlchemy's reading of a URL (the one that opens the database), or None."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url)
    except Exception:  # noqa: BLE001 - not an RDB URL: the fallback below handles it
        return None


def parse_clean(url: str):
    """SQLAlchemy's reading of `url` when it is unambiguous, else None: a URL it cannot read,
    or one whose host (or what follows it) shows an '@' of the user info taken for the end of
    the user info (`postgresql://u:p@ss#x@host/db` reads as password 'p', host 'ss#x@host')."""
    parsed = _parse(url)
    if parsed is None:
        return None
    host = parsed.host or ""
    if not _HOST.fullmatch(host) or (host and "@" in (parsed.database or "")):
        return None
    return parsed


def _secret_query_keys(parsed) -> list[str]:
    return [k for k in parsed.query if k.lower() in _SECRET_QUERY_KEYS]


def redact_url(url: str) -> str:
    """The URL with its password and secret query parameters shown as ***.

    Parsed as SQLAlchemy parses it to connect, so every form it accepts is covered: a user
    name holding `@` (`postgresql://admin@corp:PW@host/db`), a password holding `#`, `/`, `:`
    or `@`, percent-encoded or not, `?password=` in the query. A URL without a secret comes
    back as given."""
    if url.startswith("journal:") or (url.endswith(".log") and "://" not in url):
        return _redact_journal(url)
    parsed = parse_clean(url)
    if parsed is None:
        return _redact_unparsed(url)
    keys = _secret_query_keys(parsed)
    if parsed.password is None and not keys:
        return url
    # A placeholder that survives percent-encoding, swapped for the mask after rendering
    # (hide_password renders the password itself as ***).
    placeholder = "AUTOTUNEREDACTED"
    if keys:
        parsed = parsed.update_query_dict({k: placeholder for k in keys})
    return parsed.render_as_string(hide_password=True).replace(placeholder, _MASK)


def _split_unclear(url: str) -> tuple[str, str, str]:
    """An unclear URL as (head, '://' or '', rest): without '://' (`postgresql:/u:pw@host/db`,
    `u:pw@host/db`), the head is a scheme-like start, if any."""
    head, sep, rest = url.partition("://")
    if not sep:
        start = re.match(r"[A-Za-z][A-Za-z0-9+.\-]*:/*", url)
        head, sep, rest = (url[:start.end()], "", url[start.end():]) if start else ("", "", url)
    return head, sep, rest


def _hidden_part(url: str) -> str:
    """What an unclear URL hides: everything after its head up to its last '@' ('' if none)."""
    return _split_unclear(url)[2].rpartition("@")[0]


# A path segment that reads as user info (`user:password@`): a journal URL written as a
# server's (`journal://u:pw@/runs/study.log`), or such a URL made absolute against a folder.
_USERINFO_SEGMENT = re.compile(r"(?<=/)[^/]*:[^/]*@|(?<=^journal:)[^/]*:[^/]*@")


def _redact_journal(url: str) -> str:
    """A journal URL names a file and holds no secret, but one written as a server URL does:
    every segment that reads as user info hidden."""
    return _USERINFO_SEGMENT.sub(_MASK + "@", url)


def has_user_info(url: str) -> bool:
    """Whether a journal URL (or path) holds a segment that reads as `user:password@`."""
    return _USERINFO_SEGMENT.search(url) is not None


def _redact_unparsed(url: str) -> str:
    """A URL that does not parse cleanly: everything between '://' and the last '@' hidden
    (where an unencoded '@' ends the user info is anyone's guess), and the value of every
    secret-looking query parameter. Without '://' (`postgresql:/u:pw@host/db`, `u:pw@host/db`),
    everything after a scheme-like start up to the last '@'."""
    head, sep, rest = _split_unclear(url)
    if "@" in rest:
        rest = _MASK + "@" + rest.rpartition("@")[2]
    rest = re.sub(r"(?i)([?&;](?:" + "|".join(sorted(_SECRET_QUERY_KEYS)) + r")=)[^&;\s]*",
                  lambda m: m.group(1) + _MASK, rest)
    return f"{head}{sep}{rest}"


def _unclear_secrets(url: str) -> list[str]:
    """The hidden part of an unclear URL and the pieces of it a driver may echo: the password
    as written, what follows each '@' in it, and the parse's host (`ss#x@host`) and password."""
    hidden = _hidden_part(url)
    found = [hidden, hidden.partition(":")[2]]
    found += [hidden[i + 1:] for i, c in enumerate(hidden) if c == "@"]
    parsed = _parse(url)
    if parsed is not None:
        found.append(str(parsed.password or ""))
        # The parse's host or database when it swallowed part of the user info ("ss#x@host").
        found += [p for p in (parsed.host, parsed.database) if p and ("@" in p or not _HOST.fullmatch(p))]
    return [s for s in found if s]


def url_secrets(url: str) -> list[str]:
    """The secret strings of a URL, as written, percent-decoded and percent-encoded, for
    scrubbing free text (a driver's error message may echo the password in any of them)."""
    from urllib.parse import quote

    found: list[str] = []
    parsed = parse_clean(url)
    if parsed is not None:
        if parsed.password:
            found.append(str(parsed.password))
        for k in _secret_query_keys(parsed):  # a repeated key holds a tuple: each value is a secret
            v = parsed.query[k]
            found += [str(x) for x in v] if isinstance(v, tuple) else [str(v)]
    else:
        found += _unclear_secrets(url)
    out: list[str] = []
    for s in found:
        for v in (s, unquote(s), quote(s, safe="")):
            if v and v not in out:
                out.append(v)
    return out


def redact_text(text: str, url: str | None = None) -> str:
    """Scrub free text (a driver's error message, a log line): every URL in it, and the
    secrets of `url` wherever they appear."""
    for secret in sorted(url_secrets(url or ""), key=len, reverse=True):
        # One- and two-character "secrets" would blank out unrelated letters; the URL forms
        # of such a password are still caught below.
        if len(secret) >= 3:
            text = text.replace(secret, _MASK)
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)


# ---------------------------------------------------------------------------------------
# Opening a storage
# ---------------------------------------------------------------------------------------


def driver_reason(exc: BaseException, url: str, limit: int = 400) -> str:
    """A database driver's own reason for `exc` (the innermost error SQLAlchemy wrapped), as
    "Type: text" on one line, the URL's secrets removed. psycopg2 puts "connection to server at
    ... failed:" on its first line and the reason on the next, so two lines are kept."""
    inner = getattr(exc, "orig", None) or exc.__cause__ or exc
    lines = [ln.strip() for ln in str(inner).splitlines() if ln.strip()]
    text = " ".join(lines[:2]) if lines else type(inner).__name__
    return redact_text(f"{type(inner).__name__}: {text}", url)[:limit]
