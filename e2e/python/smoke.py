"""The official OpenAI Python SDK and LiteLLM's SDK calling the gateway, as Python users would.

Usage: smoke.py GATEWAY_BASE_URL API_KEY MODEL
Prints one JSON object: each case's outcome, for e2e/no-cluster/ollama.e2e.test.ts to assert on (and to
compare with Ollama's direct answers). The prompt is deterministic (temperature 0).
"""

import json
import sys

import litellm
import openai

base, key, model = sys.argv[1], sys.argv[2], sys.argv[3]
api = f"{base}/openai/v1"
messages = [{"role": "user", "content": "Name a fruit."}]
params = {"model": model, "messages": messages, "max_tokens": 12, "temperature": 0, "seed": 3}
out = {}


def error_of(fn):
    try:
        fn()
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        return {"status": e.status_code, "code": body.get("code"), "type": type(e).__name__}
    except litellm.exceptions.APIError as e:  # noqa: F841 - any other LiteLLM wrapper
        return {"status": getattr(e, "status_code", None), "type": type(e).__name__}
    except Exception as e:  # litellm maps statuses to its own exception classes
        return {"status": getattr(e, "status_code", None), "type": type(e).__name__}
    return None


client = openai.OpenAI(base_url=api, api_key=key, max_retries=0)

# openai: chat, stream, stream with usage, tags by header and body.
r = client.chat.completions.with_raw_response.create(**params)
c = r.parse()
out["openai_chat"] = {
    "content": c.choices[0].message.content,
    "finish_reason": c.choices[0].finish_reason,
    "usage": c.usage.model_dump(include={"prompt_tokens", "completion_tokens"}),
    "request_id": r.headers.get("x-request-id"),
}
parts, finish = [], None
for chunk in client.chat.completions.create(**params, stream=True):
    for choice in chunk.choices:
        parts.append(choice.delta.content or "")
        finish = choice.finish_reason or finish
out["openai_stream"] = {"content": "".join(parts), "finish_reason": finish}
usage = None
parts = []
for chunk in client.chat.completions.create(**params, stream=True, stream_options={"include_usage": True}):
    if chunk.usage:
        usage = chunk.usage.model_dump(include={"prompt_tokens", "completion_tokens"})
    for choice in chunk.choices:
        parts.append(choice.delta.content or "")
out["openai_stream_usage"] = {"content": "".join(parts), "usage": usage}
r = client.chat.completions.with_raw_response.create(
    **params, extra_headers={"X-Tags": "team:python"}, extra_body={"tags": ["project:smoke"]}
)
out["openai_tags"] = {"request_id": r.headers.get("x-request-id"), "content": r.parse().choices[0].message.content}
out["openai_404"] = error_of(lambda: client.chat.completions.create(**{**params, "model": "no-such-model:1b"}))
bad = openai.OpenAI(base_url=api, api_key="sk-wrong-key-000000000000", max_retries=0)
out["openai_401"] = error_of(lambda: bad.chat.completions.create(**params))

# LiteLLM's SDK with the gateway as an OpenAI-compatible endpoint.
lp = {**params, "model": f"openai/{model}", "api_base": api, "api_key": key}
c = litellm.completion(**lp)
out["litellm_chat"] = {
    "content": c.choices[0].message.content,
    "usage": {"prompt_tokens": c.usage.prompt_tokens, "completion_tokens": c.usage.completion_tokens},
}
parts = []
usage = None
for chunk in litellm.completion(**lp, stream=True, stream_options={"include_usage": True}):
    if getattr(chunk, "usage", None):
        usage = {"prompt_tokens": chunk.usage.prompt_tokens, "completion_tokens": chunk.usage.completion_tokens}
    for choice in chunk.choices:
        parts.append(choice.delta.content or "")
out["litellm_stream"] = {"content": "".join(parts), "usage": usage}
out["litellm_tags"] = {
    "content": litellm.completion(**lp, extra_headers={"X-Tags": "team:litellm"}).choices[0].message.content
}
out["litellm_404"] = error_of(lambda: litellm.completion(**{**lp, "model": "openai/no-such-model:1b"}))
out["litellm_401"] = error_of(lambda: litellm.completion(**{**lp, "api_key": "sk-wrong-key-000000000000"}))

print(json.dumps(out))
