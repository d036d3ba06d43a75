"""The one secret redactor for everything `up` writes or shows: config.yaml in the run dir, the
``config`` stored in every checkpoint, ``up config``, the command line recorded with them, the
log (console and train.log), error messages and tracebacks, and what the trackers receive.

Three rules, applied everywhere:

- A config value is secret by its key's name: a key whose words (split at ``_``, ``-``, ``.``
  and camelCase) include token, password, passwd, passphrase, secret, apikey, credential(s), or
  that contains api_key, access_key, private_key or secret_key (``writer_kwargs.token``,
  ``db_password``, ``accessToken``; not ``num_tokens``). Its value, unless null or a bool,
  becomes ``<redacted>``; so does everything under it (``credentials: {user, pass}``).
- In any text, a URL's userinfo is parsed as a URL parser does: it runs up to the LAST ``@``
  before the host, so ``http://alice:p@ss@host`` hides all of ``p@ss``. ``user:password``
  keeps the user name; a lone ``token@host`` is hidden whole (git's token-as-user form). A
  password holding an unencoded ``/``, ``?`` or ``#`` is caught too (its "port" is not a number).
- In any text, a query or fragment parameter is secret by its name, case-insensitive, by the
  key rule above plus sig, signature, key, auth, pwd, session, jwt, sas
  (``?token=``, ``&sig=``, ``X-Amz-Signature``, ``X-Amz-Credential``, ``AWSAccessKeyId``).

Every value hidden once is remembered (with its %-encoded and decoded forms, 6 characters or
more; a URL's lone user name excepted) and hidden wherever it shows up later, in whatever
shape: a library's error message that quotes only the path and query of a URL, say. The run
itself keeps the real values: only what is written or shown is redacted.
"""
import logging
import re
import sys
import threading
from urllib.parse import quote, unquote

REDACTED = "<redacted>"
_SECRET_WORDS = {"token", "password", "passwd", "passphrase", "secret", "apikey", "credential", "credentials"}
_SECRET_PARTS = ("api_key", "access_key", "private_key", "secret_key")
_QUERY_SECRET_WORDS = _SECRET_WORDS | {"sig", "signature", "key", "auth", "pwd", "session", "jwt", "sas"}
# `{token: x}` / `token=x` inside a flow value given on the command line
_INLINE_SECRET = re.compile(r"((?:token|password|passwd|secret|api_?key|credentials?)[\w-]*\s*[:=]\s*)([^\s,}\]]+)",
                            re.IGNORECASE)
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)([^\s\"'<>`]*)")
_QUERY_PARAM = re.compile(r"([?&#])([^=&#?\s\"'<>]+)=([^&#\s\"'<>]*)")
MIN_REMEMBERED = 6  # shorter values are not searched for in free text (too many false hits)

_known = set()
_known_pattern = None
_lock = threading.Lock()


def _words(name):
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name))
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", spaced)
    return set(re.split(r"[_.\-\s]+", spaced.lower())), spaced.lower().replace("-", "_")


def is_secret_key(key):
    words, name = _words(key)
    return bool(_SECRET_WORDS & words) or any(p in name or p in str(key).lower() for p in _SECRET_PARTS)


def is_secret_query_name(name):
    return is_secret_key(unquote(name)) or bool(_QUERY_SECRET_WORDS & _words(unquote(name))[0])


# -- remembered values ------------------------------------------------------------------------------
def remember(value):
    """Hide ``value`` (and its %-encoded / decoded forms) wherever it shows up from now on."""
    global _known_pattern
    text = str(value)
    forms = {text, unquote(text), quote(text, safe="")} - {REDACTED}
    forms = {f for f in forms if len(f) >= MIN_REMEMBERED}
    with _lock:
        if forms - _known:
            _known.update(forms)
            _known_pattern = re.compile("|".join(re.escape(f) for f in sorted(_known, key=len, reverse=True)))


def remember_secrets(cfg):
    """Remember every secret a config holds (a run calls this before it logs anything)."""
    redact(cfg)


def forget_all():  # tests
    global _known_pattern
    with _lock:
        _known.clear()
        _known_pattern = None


# -- text ------------------------------------------------------------------------------------------
def _userinfo_end(rest):
    """Where the userinfo of ``rest`` (a URL after ``scheme://``) ends: its last ``@``; -1 if none."""
    cut = re.search(r"[/?#]", rest)
    authority_end = cut.start() if cut else len(rest)
    at = rest.rfind("@", 0, authority_end)
    if at >= 0:
        return at
    # No '@' before the first '/', '?' or '#': a password holding one of them cut the authority
    # short ("alice:pa/ss@host" reads as host alice, port "pa"). A port that is not a number
    # gives that away; the userinfo then runs to the last '@'.
    head = rest[:authority_end]
    if ":" in head and not head.startswith("[") and not head.rsplit(":", 1)[1].isdigit():
        return rest.rfind("@")
    return -1


def _redact_url(match):
    scheme, rest = match.group(1), match.group(2)
    at = _userinfo_end(rest)
    if at <= 0:
        return match.group(0)
    user, colon, password = rest[:at].partition(":")
    if colon and not password:
        return match.group(0)  # `user:@host`: nothing hidden there
    if colon:
        remember(password)
    kept = f"{user}:{REDACTED}" if colon else REDACTED
    return f"{scheme}{kept}{rest[at:]}"


def _redact_param(match):
    sep, name, value = match.groups()
    if not value or value == REDACTED or not is_secret_query_name(name):
        return match.group(0)
    remember(value)
    return f"{sep}{name}={REDACTED}"


def redact_text(text):
    """``text`` with URL passwords, secret query values and every remembered secret hidden."""
    text = _QUERY_PARAM.sub(_redact_param, _URL.sub(_redact_url, str(text)))
    pattern = _known_pattern
    return pattern.sub(REDACTED, text) if pattern is not None else text


# -- structures ------------------------------------------------------------------------------------
def redact(value, key=None, secret=False):
    """A copy of ``value`` (a config, or any part of it) with secrets replaced; everything
    under a secret key (``credentials: {user, pass}``) counts as secret."""
    secret = secret or (key is not None and is_secret_key(key))
    if isinstance(value, dict):
        return {k: redact(v, k, secret) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, None, secret) for v in value]
    if secret and value is not None and not isinstance(value, bool):
        remember(value)
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_argv(argv):
    """The command line with ``KEY=VALUE`` options of secret keys (``--opts ...token=x``) and
    URL passwords redacted."""
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        if eq and is_secret_key(key.rsplit(".", 1)[-1]):
            remember(value)
            arg = f"{key}={REDACTED}"
        out.append(_INLINE_SECRET.sub(lambda m: m.group(1) + REDACTED, redact_text(arg)))
    return out


# -- sinks -----------------------------------------------------------------------------------------
class RedactingFilter(logging.Filter):
    """On a log handler: the formatted message (and a traceback it carries) redacted."""

    def filter(self, record):
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: logging reports it itself, as without this filter
            return True
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        return True


def _print_redacted(exc_type, exc, tb):
    import traceback

    sys.stderr.write(redact_text("".join(traceback.format_exception(exc_type, exc, tb))))
    sys.stderr.flush()


def _thread_hook(args):
    if args.exc_type is not SystemExit:
        _print_redacted(args.exc_type, args.exc_value, args.exc_traceback)


def install_excepthooks():
    """Tracebacks Python prints itself (an uncaught bug, a thread's exception) go out redacted."""
    sys.excepthook = _print_redacted
    threading.excepthook = _thread_hook
