"""Secrets out of everything the config is written to: config.yaml in the run dir, the
``config`` stored in every checkpoint, ``up config``, the command line recorded with them,
error messages.

A value is secret by its key's name: a key whose ``_``/``-``/``.``-separated words include
token, password, passwd, secret, apikey, credential(s), or that contains api_key, access_key,
private_key or secret_key (``writer_kwargs.token``, ``db_password``, ``aws_secret_access_key``;
not ``num_tokens``). Its value, unless null or a bool, becomes ``<redacted>``. A password in a
URL (``https://user:pass@host``) is redacted wherever it appears. The run itself keeps the real
values: only what is written is redacted.
"""
import re

REDACTED = "<redacted>"
_SECRET_WORDS = {"token", "password", "passwd", "secret", "apikey", "credential", "credentials"}
_SECRET_PARTS = ("api_key", "access_key", "private_key", "secret_key")
# `{token: x}` / `token=x` inside a flow value given on the command line
_INLINE_SECRET = re.compile(r"((?:token|password|passwd|secret|api_?key|credentials?)[\w-]*\s*[:=]\s*)([^\s,}\]]+)",
                            re.IGNORECASE)
_URL_PASSWORD = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*):[^/\s@]*@")


def is_secret_key(key):
    name = str(key).lower().replace("-", "_")
    return bool(_SECRET_WORDS & set(re.split(r"[_.]", name))) or any(p in name for p in _SECRET_PARTS)


def redact_text(text):
    """``scheme://user:password@host`` -> ``scheme://user:<redacted>@host``."""
    return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text)


def redact(value, key=None, secret=False):
    """A copy of ``value`` (a config, or any part of it) with secrets replaced; everything
    under a secret key (``credentials: {user, pass}``) counts as secret."""
    secret = secret or (key is not None and is_secret_key(key))
    if isinstance(value, dict):
        return {k: redact(v, k, secret) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, None, secret) for v in value]
    if secret and value is not None and not isinstance(value, bool):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_argv(argv):
    """The command line with ``KEY=VALUE`` options of secret keys (``--opts ...token=x``) and
    URL passwords redacted."""
    out = []
    for arg in argv:
        key, eq, _ = arg.partition("=")
        if eq and is_secret_key(key.rsplit(".", 1)[-1]):
            arg = f"{key}={REDACTED}"
        out.append(_INLINE_SECRET.sub(lambda m: m.group(1) + REDACTED, redact_text(arg)))
    return out
