"""Database URLs as they may be shown: in logs, on stderr, in exception messages.

A URL's password (and any password given as a query parameter, which libpq
accepts) is replaced by ***, so that a failed connection does not put the
database password into pod logs. `scrub` removes the password from any text,
such as a driver's error message, that might quote it.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

MASK = "***"
# `scrub` replaces a password wherever it appears in text only from this length on:
# replacing "p" everywhere would garble every message, and a password of one to
# three characters protects nothing. (In a URL, any password is masked.)
MIN_SCRUBBED = 4
# Query parameters that carry a secret (libpq and the common drivers).
SECRET_PARAMS = frozenset({"password", "passwd", "pwd", "sslpassword"})
# scheme://user:password@ in text that SQLAlchemy cannot parse.
_USERINFO = re.compile(r"(?P<head>(?:[A-Za-z][A-Za-z0-9+.\-]*)?://[^:/@\s]*:)[^@\s]*@")


def mask_url(url: str) -> str:
    """`url` with its password and password query parameters replaced by ***."""
    from sqlalchemy.engine import make_url

    try:
        u = make_url(url)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads: mask by pattern
        return _USERINFO.sub(lambda m: m.group("head") + MASK + "@", url)
    secret = {k: MASK for k in u.query if k.lower() in SECRET_PARAMS}
    if secret:
        u = u.update_query_dict(secret)
    return u.render_as_string(hide_password=True).replace(quote(MASK, safe=""), MASK)


def secrets_of(url: str) -> list[str]:
    """The password strings of `url` (as typed, decoded and encoded) of MIN_SCRUBBED characters
    or more, longest first."""
    from sqlalchemy.engine import make_url

    found: list[str] = []
    try:
        u = make_url(url)
        if u.password:
            found.append(str(u.password))
        for key, value in u.query.items():
            if key.lower() in SECRET_PARAMS:
                found.extend([value] if isinstance(value, str) else list(value))
    except Exception:  # noqa: BLE001 - unparsable: take what looks like user:password@
        m = _USERINFO.search(url)
        if m:
            found.append(url[m.end("head"):m.end() - 1])
    both = {s for p in found if p for s in (p, unquote(p), quote(p, safe="")) if len(s) >= MIN_SCRUBBED}
    return sorted(both, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """`text` with the database URL masked and every occurrence of its password replaced by ***."""
    text = text.replace(url, mask_url(url))
    for secret in secrets_of(url):
        text = text.replace(secret, MASK)
    return _USERINFO.sub(lambda m: m.group("head") + MASK + "@", text)
