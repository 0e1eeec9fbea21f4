"""Schemathesis hooks of the gateway's spec-driven fuzz run (e2e/no-cluster/spec-fuzz.e2e.test.ts).

`retryable_or_not_server_error` stands in for the built-in `not_a_server_error`: a 5xx is a
finding unless it is a 503 with Retry-After (the gateway's "retry later": an upstream overloaded
or draining), which a caller's SDK retries as the vendors document.
"""

import itertools

import schemathesis


@schemathesis.check
def retryable_or_not_server_error(ctx, response, case):
    status = response.status_code
    if status < 500 or (status == 503 and response.headers.get("retry-after")):
        return None
    raise AssertionError(f"{status} is a server error, not a retryable 503 with Retry-After: {response.text[:300]}")


_streamed = itertools.count()


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    """Every other body that says `stream` streams, in every phase: drawn, it is nearly always
    false (the simplest value), and the streams would go unfuzzed. Both are what the spec allows."""
    if isinstance(case.body, dict) and isinstance(case.body.get("stream"), bool):
        case.body["stream"] = next(_streamed) % 2 == 0


import re

# A refusal that names what the chosen model cannot do (README, "Refused although the spec allows
# it"): OpenAI's hosted tools off OpenAI, token prompts to a text-only server, images to a
# text-only model. Its code says so: unsupported_<what>.
_DOCUMENTED = re.compile(r"^unsupported_[a-z_]+$")


def _error_code(response):
    try:
        body = response.json()
    except Exception:
        return "", response.text[:200]
    err = body.get("error", {}) if isinstance(body, dict) else {}
    if not isinstance(err, dict):
        return "", ""
    message = str(err.get("message", ""))
    code = err.get("code")
    if not isinstance(code, str):
        # Anthropic's envelope has no code: the gateway appends it to the message, in parentheses.
        m = re.search(r"\(([a-z_]+)\)$", message)
        code = m.group(1) if m else ""
    return code, message


@schemathesis.check
def served_or_refused_by_upstream(ctx, response, case):
    """The positive run's check: a request the spec accepts is served, or refused for a reason the
    chosen upstream gave (the gateway's `upstream_rejected`), or for one the README names (an
    `unsupported_*` code). Any other 4xx of the gateway's own is a finding, named by its message so
    that each distinct refusal is listed."""
    status = response.status_code
    if status < 400 or status >= 500 or status in (401, 403, 404, 409, 429):
        return None
    code, message = _error_code(response)
    if code == "upstream_rejected" or _DOCUMENTED.match(code):
        return None
    raise AssertionError(f"the gateway refused a request the spec accepts ({status} {code}): {message[:240]}")
