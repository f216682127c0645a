"""LLM clients: the offline extractive default, the fake, and the OpenAI-compatible client against a real
HTTP server on 127.0.0.1 that speaks the chat completions shape."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from evolution.llm import (
    CONDENSED_MAX_CHARS,
    REFLECTION_MAX_CHARS,
    ExtractiveClient,
    FakeClient,
    LLMError,
    OpenAICompatibleClient,
    default_client,
    fit,
)

LONG_TEXT = (
    "The team met on Monday to review the billing outage. Alice Chen decided to move invoices to "
    "PostgreSQL 15 because SQLite locked under 400 writes per second. Lunch was pizza. Bob said the "
    "weather was nice. The migration must finish by March 3 and will cost 2 engineer weeks. Everyone "
    "agreed the dashboards looked fine and nobody had other comments about the plan or the room."
)


@dataclass
class Script:
    """What the fake endpoint answers next, and what it received."""

    status: int = 200
    body: Any = None
    raw: bytes | None = None
    delay: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)


class ChatHandler(BaseHTTPRequestHandler):
    script: Script

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        payload = json.loads(self.rfile.read(length))
        self.script.requests.append({"path": self.path, "headers": dict(self.headers), "json": payload})
        if self.script.delay:
            time.sleep(self.script.delay)
        raw = self.script.raw
        if raw is None:
            raw = json.dumps(self.script.body).encode()
        self.send_response(self.script.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        return


def completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script(body=completion("ok"))
    handler = type("Handler", (ChatHandler,), {"script": script})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_chat_posts_the_openai_shape_with_bearer_auth(server: tuple[str, Script]) -> None:
    base, script = server
    script.body = completion("  Alice moved invoices to PostgreSQL 15.  ")
    client = OpenAICompatibleClient(base, model="test-model", api_key="sk-test", timeout=5)
    assert client.chat("system text", "user text", max_tokens=50) == "Alice moved invoices to PostgreSQL 15."
    (request,) = script.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    assert request["json"]["model"] == "test-model"
    assert request["json"]["temperature"] == 0
    assert [m["role"] for m in request["json"]["messages"]] == ["system", "user"]
    assert request["json"]["messages"][1]["content"] == "user text"


def test_no_api_key_sends_no_authorization_header(server: tuple[str, Script]) -> None:
    base, script = server
    OpenAICompatibleClient(base, model="m", timeout=5).chat("s", "u", max_tokens=5)
    assert "Authorization" not in script.requests[0]["headers"]


def test_digest_from_the_endpoint_is_held_to_the_forty_percent_budget(server: tuple[str, Script]) -> None:
    base, script = server
    script.body = completion("word " * 500)
    digest = OpenAICompatibleClient(base, model="m", timeout=5).digest(LONG_TEXT, max_ratio=0.4)
    assert 0 < len(digest) <= int(0.4 * len(LONG_TEXT))
    assert str(int(0.4 * len(LONG_TEXT))) in script.requests[0]["json"]["messages"][0]["content"]


def test_key_phrases_parse_bullets_and_numbering_and_cap_at_ten(server: tuple[str, Script]) -> None:
    base, script = server
    lines = ["1. Alice Chen", "- PostgreSQL 15", "* billing outage", "Alice Chen"] + [f"phrase {k}" for k in range(12)]
    script.body = completion("\n".join(lines))
    phrases = OpenAICompatibleClient(base, model="m", timeout=5).key_phrases(LONG_TEXT)
    assert phrases[:3] == ["Alice Chen", "PostgreSQL 15", "billing outage"]
    assert len(phrases) == 10


def test_condense_returns_one_line_within_the_limit(server: tuple[str, Script]) -> None:
    base, script = server
    script.body = completion("Deploys\nhappen on Fridays " + "x" * 1000)
    line = OpenAICompatibleClient(base, model="m", timeout=5).condense(["a", "b"], subject="deploys")
    assert "\n" not in line
    assert len(line) <= CONDENSED_MAX_CHARS
    assert "deploys" in script.requests[0]["json"]["messages"][0]["content"]


def test_http_errors_name_the_status_and_the_endpoint_message(server: tuple[str, Script]) -> None:
    base, script = server
    script.status = 401
    script.body = {"error": {"message": "invalid api key", "type": "auth"}}
    with pytest.raises(LLMError, match="HTTP 401: invalid api key") as info:
        OpenAICompatibleClient(base, model="m", api_key="sk-secret", timeout=5).chat("s", "u", max_tokens=5)
    assert "sk-secret" not in str(info.value)


def test_a_slow_endpoint_times_out_with_a_clear_error(server: tuple[str, Script]) -> None:
    base, script = server
    script.delay = 1.5
    started = time.monotonic()
    with pytest.raises(LLMError, match=r"did not answer within 0\.3s"):
        OpenAICompatibleClient(base, model="m", timeout=0.3).chat("s", "u", max_tokens=5)
    assert time.monotonic() - started < 1.4


def test_an_unreachable_endpoint_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(LLMError, match="could not be reached"):
        OpenAICompatibleClient(f"http://127.0.0.1:{port}/v1", model="m", timeout=2).chat("s", "u", max_tokens=5)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"<html>not json</html>", "not JSON"),
        (json.dumps({"choices": []}).encode(), r"choices\[0\]\.message\.content"),
        (json.dumps(completion("")).encode(), "no key phrases"),
    ],
)
def test_malformed_answers_are_clear_errors(server: tuple[str, Script], raw: bytes, message: str) -> None:
    base, script = server
    script.raw = raw
    with pytest.raises(LLMError, match=message):
        OpenAICompatibleClient(base, model="m", timeout=5).key_phrases(LONG_TEXT)


def test_a_base_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(LLMError, match="not an http"):
        OpenAICompatibleClient("ftp://example.org", model="m")


def test_extractive_digest_keeps_the_decision_sentence_within_budget() -> None:
    digest = ExtractiveClient().digest(LONG_TEXT, max_ratio=0.4)
    assert len(digest) <= int(0.4 * len(LONG_TEXT))
    assert "Alice Chen decided" in digest
    assert "weather" not in digest


def test_extractive_client_is_deterministic() -> None:
    client = ExtractiveClient()
    assert client.digest(LONG_TEXT, max_ratio=0.4) == client.digest(LONG_TEXT, max_ratio=0.4)
    assert client.key_phrases(LONG_TEXT) == client.key_phrases(LONG_TEXT)
    assert 5 <= len(client.key_phrases(LONG_TEXT)) <= 10


def test_extractive_condense_lists_distinct_texts_under_the_subject() -> None:
    line = ExtractiveClient().condense(["Deploy failed.", "deploy failed", "Rollback worked"], subject="deploy")
    assert line == "deploy: Deploy failed; Rollback worked"


def test_extractive_condense_of_many_texts_stays_within_the_limit() -> None:
    texts = [f"On day {k} the nightly import of 1{k}00 rows decided nothing new about the schema" for k in range(40)]
    line = ExtractiveClient().condense(texts, subject="import")
    assert line.startswith("import: ")
    assert len(line) <= CONDENSED_MAX_CHARS


def test_fake_client_records_calls_and_can_fail() -> None:
    fake = FakeClient("a short digest", phrases=["x", "y"])
    assert fake.digest(LONG_TEXT, max_ratio=0.4) == "a short digest"
    assert fake.key_phrases("t") == ["x", "y"]
    assert [c[0] for c in fake.calls] == ["digest", "key_phrases"]
    failing = FakeClient(error=LLMError("down"))
    with pytest.raises(LLMError, match="down"):
        failing.condense(["a"], subject="s")


def test_fit_cuts_at_a_word_boundary() -> None:
    assert fit("alpha beta gamma", 12) == "alpha beta"
    assert fit("  alpha   beta ", 50) == "alpha beta"
    assert fit("abcdefgh", 4) == "abcd"


def test_default_client_follows_the_settings(settings: Any, server: tuple[str, Script]) -> None:
    settings.LLM_BASE_URL = ""
    assert isinstance(default_client(), ExtractiveClient)
    base, script = server
    settings.LLM_BASE_URL = base
    settings.LLM_MODEL = "local-model"
    settings.LLM_API_KEY = "k"
    settings.LLM_TIMEOUT_SECONDS = 3
    client = default_client()
    assert isinstance(client, OpenAICompatibleClient)
    assert client.timeout == 3.0
    script.body = completion("Alice Chen; PostgreSQL 15")
    assert client.key_phrases(LONG_TEXT) == ["Alice Chen", "PostgreSQL 15"]
    assert script.requests[0]["json"]["model"] == "local-model"


def test_reflect_parses_the_labelled_lines_and_holds_them_to_the_limit(server: tuple[str, Script]) -> None:
    base, script = server
    script.body = completion(f"**REFLECTION:** Deploys failed 3 of 4 times.\nLESSON: {'Pin the version. ' * 40}")
    client = OpenAICompatibleClient(base, model="m")
    reflection, lesson = client.reflect(context="deploy", reflection="deploy failed 3 of 4", lesson="pin it")
    assert reflection == "Deploys failed 3 of 4 times."
    assert lesson.startswith("Pin the version.") and len(lesson) <= REFLECTION_MAX_CHARS
    sent = script.requests[0]["json"]["messages"]
    assert "'deploy'" in sent[0]["content"]
    assert "deploy failed 3 of 4" in sent[1]["content"] and "pin it" in sent[1]["content"]


def test_reflect_without_both_lines_is_a_clear_error(server: tuple[str, Script]) -> None:
    base, script = server
    script.body = completion("Deploys failed a lot; pin the version.")
    with pytest.raises(LLMError, match="without a REFLECTION and a LESSON line"):
        OpenAICompatibleClient(base, model="m").reflect(context="deploy", reflection="r", lesson="l")


def test_the_extractive_client_reflects_the_draft_as_it_is() -> None:
    assert ExtractiveClient().reflect(context="c", reflection="what happened", lesson="do this") == (
        "what happened",
        "do this",
    )
