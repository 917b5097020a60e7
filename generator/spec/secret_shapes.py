"""What a secret looks like, besides a Hugging Face token: values in the shape of a known
provider's key, and env var and flag names that carry a credential. ``secrets.py`` refuses
them in a spec; ``source.py`` masks the values in parser messages."""

from __future__ import annotations

import re

__all__ = ["SECRET_VALUE", "names_a_secret", "plain_setting"]

# Provider keys with a fixed prefix (OpenAI/Anthropic sk-, AWS access key ids, GitHub,
# GitLab, Slack, Google API keys), JSON web tokens and PEM private keys.
SECRET_VALUE = re.compile(
    r"sk-[A-Za-z0-9_-]{16,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|AIza[0-9A-Za-z_-]{35}"
    r"|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
_LAST = frozenset({"token", "secret", "password", "passwd", "credential", "credentials"})
_LAST |= frozenset({"apikey", "pat"})
_LAST_TWO = frozenset({("api", "key"), ("access", "key"), ("secret", "key"), ("private", "key")})
_LAST_TWO |= frozenset({("auth", "key"), ("session", "key")})
# Values of switches, not credentials (HF_HUB_DISABLE_IMPLICIT_TOKEN=1).
_PLAIN = frozenset({"", "0", "1", "true", "false", "yes", "no", "on", "off", "y", "n"})


def names_a_secret(name: str) -> bool:
    """An env var or flag whose name says it holds a credential: VLLM_API_KEY,
    AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, --api-key, --hf-token, --password."""
    parts = [part for part in re.split(r"[-_.]+", name.lower()) if part]
    if not parts:
        return False
    return parts[-1] in _LAST or tuple(parts[-2:]) in _LAST_TWO


def plain_setting(value: str) -> bool:
    return value.strip().lower() in _PLAIN
