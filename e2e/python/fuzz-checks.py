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
