"""Hide passwords and tokens in anything specfleet prints, logs or stores about a connection.

Connection strings carry secrets in several forms, and each is masked as `***`:
- a URL's user info: `postgresql://user:SECRET@host/db`, `https://user:hf_...@host`;
- a URL's query: `...?password=SECRET&sslmode=require` (also `token`, `api_key`, ...);
- libpq key=value strings: `host=db user=me password=SECRET` or `password='a b'`;
- headers: `Authorization: Bearer SECRET` (or `token`, `Basic`, no scheme at all), `X-Api-Key:
  SECRET`, `X-Auth-Token: SECRET`;
- `NAME=value` pairs of known secret names (`HF_TOKEN=...`);
- Hugging Face tokens on their own (`hf_` and 30 or more letters and digits);
- the value of every environment variable named like a secret (`is_secret_name`), wherever it
  appears, once it is 8 characters or more (a shorter one, `true` or `1`, is no secret worth
  garbling every message over).
The rest of the text is kept, so a message still says which host or database it is about.
"""

from __future__ import annotations

import os
import re

# names whose value is a secret, as query parameters, key=value pairs or variables
SECRET_NAMES = (
    r"(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|auth|credentials?"
    r"|[A-Z0-9_]*_TOKEN|[A-Z0-9_]*SECRET[A-Z0-9_]*|[A-Z0-9_]*PASSWORD|[A-Z0-9_]*PASSWD"
    r"|[A-Z0-9_]*_API_KEY|[A-Z0-9_]*_ACCESS_KEY(?:_ID)?)"
)
MASK = "***"
MIN_VARIABLE_SECRET = 8  # the shortest environment value masked wherever it appears

# the secret runs to the last @ before the host: an unencoded @ in a password is still hidden
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s/@:]*):(?P<secret>[^\s/]*)@")
_QUERY = re.compile(rf"(?P<key>[?&;]{SECRET_NAMES}=)(?P<secret>[^&\s;#]*)", re.IGNORECASE)
_VALUE = r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s,;&'"@/]+"""  # quoted, or up to a separator
# a secret name, or an HTTP header ending in one (X-Api-Key, X-Auth-Token), then = or :
_KEYVALUE = re.compile(
    rf"(?P<key>(?<![\w.\-])(?:X-(?:[A-Za-z0-9]+-)*?)?{SECRET_NAMES}[\"']?\s*[=:]\s*)(?P<secret>{_VALUE})",
    re.IGNORECASE,
)
# the header's scheme word (Bearer, token, Basic) is kept; what follows it is the secret
_AUTHORIZATION = re.compile(
    r"(?P<key>\bAuthorization[\"']?\s*[=:]\s*[\"']?(?:[A-Za-z][\w-]*\s+)?)(?P<secret>[^\s\"',;]+)", re.IGNORECASE
)
_BEARER = re.compile(r"(?P<key>\b(?:Bearer|Basic)\s+)(?P<secret>[A-Za-z0-9._~+/=\-]{8,})")
_HF_TOKEN = re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9_])")
# a word of a variable's name (split at _ and -) that makes its value a secret: HF_TOKEN, OPENAI_API_KEY,
# AWS_SECRET_ACCESS_KEY, DB_PASSWORD, GOOGLE_APPLICATION_CREDENTIALS, BASIC_AUTH; not TOKENIZERS_PARALLELISM
_SECRET_WORD = re.compile(
    r"[A-Z0-9]*(?:TOKEN|KEY|AUTH)|[A-Z0-9]*(?:SECRET|PASSWORD|PASSWD|CREDENTIAL)[A-Z0-9]*|AUTHORIZATION"
)


def mask_secrets(text: str) -> str:
    """`text` with every secret it holds replaced by ***."""
    if not text:
        return text
    for value in _variable_secrets():
        text = text.replace(value, MASK)
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    text = _QUERY.sub(lambda m: f"{m['key']}{MASK}", text)
    text = _AUTHORIZATION.sub(lambda m: f"{m['key']}{MASK}", text)
    text = _KEYVALUE.sub(lambda m: m[0] if m["secret"].startswith(MASK) else f"{m['key']}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m['key']}{MASK}", text)
    return _HF_TOKEN.sub(MASK, text)


def is_secret_name(name: str) -> bool:
    """Whether a setting or environment variable called `name` (HF_TOKEN, password, api_key,
    X-Api-Key ...) holds a secret."""
    return any(_SECRET_WORD.fullmatch(word) for word in re.split(r"[^A-Z0-9]+", name.upper()))


def _variable_secrets() -> list[str]:
    """This process's environment values that are secrets, longest first (so one that holds
    another is masked whole)."""
    found = {v for n, v in _environment().items() if len(v) >= MIN_VARIABLE_SECRET and is_secret_name(n)}
    return sorted(found, key=len, reverse=True)


def _environment() -> dict[str, str]:
    """The environment as it is now. Another thread may change it meanwhile (MLflow's telemetry drops a
    variable of its own while a run starts): a name that went between listing and reading is skipped,
    where iterating os.environ's items would raise KeyError."""
    return {name: value for name in list(os.environ) if (value := os.environ.get(name)) is not None}
