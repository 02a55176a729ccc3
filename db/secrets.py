"""Hide passwords and tokens in anything specfleet prints, logs or stores about a connection.

Connection strings carry secrets in several forms, and each is masked as `***`:
- a URL's user info: `postgresql://user:SECRET@host/db`, `http://user:SECRET@host:5000`;
- a URL's query: `...?password=SECRET&sslmode=require` (also `token`, `api_key`, ...);
- libpq key=value strings: `host=db user=me password=SECRET` or `password='a b'`;
- `Authorization` headers and `NAME=value` pairs of known secret names (`HF_TOKEN=...`).
The rest of the text is kept, so a message still says which host or database it is about.
"""

from __future__ import annotations

import re

# names whose value is a secret, as query parameters, key=value pairs or variables
SECRET_NAMES = (
    r"(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|auth|credentials?"
    r"|[A-Z0-9_]*_TOKEN|[A-Z0-9_]*SECRET[A-Z0-9_]*|[A-Z0-9_]*PASSWORD|[A-Z0-9_]*PASSWD"
    r"|[A-Z0-9_]*_API_KEY|[A-Z0-9_]*_ACCESS_KEY(?:_ID)?)"
)
MASK = "***"

# the secret runs to the last @ before the host: an unencoded @ in a password is still hidden
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s/@:]*):(?P<secret>[^\s/]*)@")
_QUERY = re.compile(rf"(?P<key>[?&;]{SECRET_NAMES}=)(?P<secret>[^&\s;#]*)", re.IGNORECASE)
_VALUE = r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s,;&'"@/]+"""  # quoted, or up to a separator
_KEYVALUE = re.compile(rf"(?P<key>(?<![\w.\-]){SECRET_NAMES}[\"']?\s*[=:]\s*)(?P<secret>{_VALUE})", re.IGNORECASE)
_NAME = re.compile(rf"{SECRET_NAMES}", re.IGNORECASE)
_BEARER = re.compile(r"(?P<key>\b(?:Bearer|Basic)\s+)(?P<secret>[A-Za-z0-9._~+/=\-]{8,})")


def mask_secrets(text: str) -> str:
    """`text` with every secret it holds replaced by ***."""
    if not text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    text = _QUERY.sub(lambda m: f"{m['key']}{MASK}", text)
    text = _KEYVALUE.sub(lambda m: m[0] if m["secret"].startswith(MASK) else f"{m['key']}{MASK}", text)
    return _BEARER.sub(lambda m: f"{m['key']}{MASK}", text)


def is_secret_name(name: str) -> bool:
    """Whether a setting called `name` (HF_TOKEN, password, api_key ...) holds a secret."""
    return _NAME.fullmatch(name) is not None
