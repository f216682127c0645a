"""LLM clients for the compression digests, the summary proposals and the dream's reflections.

Three implementations of one small protocol:

- `ExtractiveClient` (the default, no network): the deterministic stand-ins of
  `evolution.algorithms.text` - an extractive digest that keeps names, numbers and decision sentences,
  RAKE-style key phrases, and a condensed line built from the memories themselves. Same input, same
  output, so a dry run previews exactly what the real run writes.
- `FakeClient` for tests: canned replies, every call recorded.
- `OpenAICompatibleClient`: POST {LLM_BASE_URL}/chat/completions (the OpenAI chat completions shape, which
  vLLM, llama.cpp server, Ollama, LiteLLM and OpenAI itself accept) over the standard library's
  http.client, with a timeout on connect and on every read, a bounded response size and an LLMError that
  says what went wrong without ever echoing the API key.

Every client honours the bounds the callers rely on: a digest is at most floor(max_ratio * len(text))
characters, a skeleton has at most 10 phrases, a condensed summary is one line of at most 500 characters,
a reflection and its lesson are one line of at most 300 characters each.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from django.conf import settings

from evolution.algorithms.text import extractive_summary, key_phrases

log = logging.getLogger(__name__)

MAX_PHRASES = 10
CONDENSED_MAX_CHARS = 500
REFLECTION_MAX_CHARS = 300
# An answer larger than this is not a digest; reading stops there rather than buffering without bound.
MAX_RESPONSE_BYTES = 1 << 20


class LLMError(RuntimeError):
    """The LLM endpoint could not give a usable answer (unreachable, timeout, HTTP error, bad shape)."""


class LLMClient(Protocol):
    """What the compression ladder and SummaryEvolver ask of a language model."""

    @property
    def name(self) -> str: ...

    def digest(self, text: str, *, max_ratio: float) -> str:
        """A digest of `text` of at most floor(max_ratio * len(text)) characters keeping names, numbers
        and decisions."""
        ...

    def key_phrases(self, text: str) -> list[str]:
        """5-10 key phrases of `text` (fewer only for a very short text), in order of appearance."""
        ...

    def condense(self, texts: Sequence[str], *, subject: str) -> str:
        """One line (<= 500 characters) that condenses `texts`, all about `subject`."""
        ...

    def reflect(self, *, context: str, reflection: str, lesson: str) -> tuple[str, str]:
        """(reflection, lesson), each one line of at most 300 characters, written from the draft a pattern
        detector made of the facts (`reflection` states what happened with its numbers, `lesson` what to do
        differently) about the task or topic `context`."""
        ...


def fit(text: str, max_chars: int) -> str:
    """Collapse whitespace and cut `text` to at most `max_chars`, at a word boundary when there is one."""
    flat = " ".join(text.split())
    if len(flat) <= max_chars:
        return flat
    if max_chars <= 0:
        return ""
    cut = flat[: max_chars + 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > 0 else flat[:max_chars]).rstrip()


def digest_budget(text: str, max_ratio: float) -> int:
    if not 0.0 < max_ratio <= 1.0:
        raise ValueError("max_ratio must be in (0, 1]")
    return int(max_ratio * len(text))


def _unique_lines(texts: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for text in texts:
        line = " ".join(text.split()).rstrip(".")
        if line and line.casefold() not in seen:
            seen.add(line.casefold())
            out.append(line)
    return out


class ExtractiveClient:
    """Deterministic, offline: the default when LLM_BASE_URL is not set."""

    name = "extractive"

    def digest(self, text: str, *, max_ratio: float) -> str:
        budget = digest_budget(text, max_ratio)
        return fit(extractive_summary(text, max_ratio), budget)

    def key_phrases(self, text: str) -> list[str]:
        return key_phrases(text)[:MAX_PHRASES]

    def condense(self, texts: Sequence[str], *, subject: str) -> str:
        """ "{subject}: t1; t2; ..." of the distinct texts; when that is too long, an extractive digest of
        them (salient sentences first) cut to 500 characters."""
        lines = _unique_lines(texts)
        prefix = f"{subject.strip()}: " if subject.strip() else ""
        joined = prefix + "; ".join(lines)
        if len(joined) <= CONDENSED_MAX_CHARS:
            return joined
        body = "\n".join(f"{line}." for line in lines)
        room = CONDENSED_MAX_CHARS - len(prefix)
        ratio = min(1.0, max(room, 1) / max(len(body), 1))
        return fit(prefix + extractive_summary(body, ratio).replace(". ", "; "), CONDENSED_MAX_CHARS)

    def reflect(self, *, context: str, reflection: str, lesson: str) -> tuple[str, str]:
        """The draft as it is: the deterministic default writes the pattern detector's own sentences."""
        return fit(reflection, REFLECTION_MAX_CHARS), fit(lesson, REFLECTION_MAX_CHARS)


@dataclass
class FakeClient:
    """Canned answers for tests; `calls` lists (method, first argument) of every request.

    reply: the digest / condensed text; phrases: the skeleton (default: the words of `reply`); error:
    raised by every call when set. Bounds are applied as the real clients apply them.
    """

    reply: str = "fake summary"
    phrases: list[str] | None = None
    error: Exception | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)
    name: str = "fake"

    def _called(self, method: str, argument: str) -> None:
        self.calls.append((method, argument))
        if self.error is not None:
            raise self.error

    def digest(self, text: str, *, max_ratio: float) -> str:
        self._called("digest", text)
        return fit(self.reply, digest_budget(text, max_ratio))

    def key_phrases(self, text: str) -> list[str]:
        self._called("key_phrases", text)
        return list(self.phrases if self.phrases is not None else self.reply.split())[:MAX_PHRASES]

    def condense(self, texts: Sequence[str], *, subject: str) -> str:
        self._called("condense", "\n".join(texts))
        return fit(self.reply, CONDENSED_MAX_CHARS)

    def reflect(self, *, context: str, reflection: str, lesson: str) -> tuple[str, str]:
        """`reply` as the reflection; the lesson is `phrases[0]` when given, else `reply` too."""
        self._called("reflect", context)
        lesson_text = self.phrases[0] if self.phrases else self.reply
        return fit(self.reply, REFLECTION_MAX_CHARS), fit(lesson_text, REFLECTION_MAX_CHARS)


_BULLET_RE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s*")

DIGEST_PROMPT = (
    "You compress long-term memories of an AI agent. Rewrite the memory as a digest of at most {budget} "
    "characters. Keep every name, number and decision. Reply with the digest only."
)
PHRASES_PROMPT = (
    "List the 5 to 10 key phrases of the memory, most informative first, one per line, without numbering "
    "or commentary. Keep names and numbers."
)
REFLECT_PROMPT = (
    "You write the reflection log of an AI agent. From the facts about {context!r} below, write what the agent "
    "noticed and what it should do differently. Keep every number and name. Reply with exactly two lines: "
    "'REFLECTION: <one sentence>' and 'LESSON: <one imperative sentence>', each at most {limit} characters."
)
# "REFLECTION: ...", also as Markdown models like to write it ("**REFLECTION:** ...", "- LESSON: ...").
_LABELLED_RE = re.compile(r"^[\s*_-]*(REFLECTION|LESSON)[\s*_]*:[\s*_]*(.+?)\s*$", re.IGNORECASE)
CONDENSE_PROMPT = (
    "Condense these related memories about {subject} into one factual sentence of at most {limit} "
    "characters. Keep names, numbers and decisions. Reply with the sentence only."
)


class OpenAICompatibleClient:
    """Chat completions over HTTP(S) with the standard library; see the module docstring."""

    name = "openai-compatible"

    def __init__(self, base_url: str, *, model: str, api_key: str = "", timeout: float = 30.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise LLMError(f"LLM_BASE_URL {base_url!r} is not an http(s):// URL")
        if timeout <= 0:
            raise LLMError("LLM_TIMEOUT_SECONDS must be positive")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = float(timeout)
        self._api_key = api_key
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._path = parts.path.rstrip("/") + "/chat/completions"

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/chat/completions"

    def chat(self, system: str, user: str, *, max_tokens: int) -> str:
        """Send one system + user message pair and return the assistant's text, stripped."""
        body = json.dumps(
            {
                "model": self.model,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                "temperature": 0,
                "max_tokens": max_tokens,
            }
        ).encode()
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "smartmemory-site",
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        connection_class = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        conn = connection_class(self._host, self._port, timeout=self.timeout)
        try:
            conn.request("POST", self._path, body=body, headers=headers)
            response = conn.getresponse()
            raw = response.read(MAX_RESPONSE_BYTES + 1)
            status = response.status
        except TimeoutError:
            raise LLMError(f"LLM endpoint {self.endpoint} did not answer within {self.timeout:g}s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise LLMError(f"LLM endpoint {self.endpoint} could not be reached: {exc}") from None
        finally:
            conn.close()
        if len(raw) > MAX_RESPONSE_BYTES:
            raise LLMError(f"LLM endpoint {self.endpoint} answered more than {MAX_RESPONSE_BYTES} bytes")
        if status != 200:
            raise LLMError(f"LLM endpoint {self.endpoint} answered HTTP {status}: {_error_text(raw)}")
        return _content_of(raw, self.endpoint)

    def digest(self, text: str, *, max_ratio: float) -> str:
        budget = digest_budget(text, max_ratio)
        if budget <= 0:
            return ""
        answer = self.chat(DIGEST_PROMPT.format(budget=budget), text, max_tokens=max(16, budget // 2))
        return fit(answer, budget)

    def key_phrases(self, text: str) -> list[str]:
        answer = self.chat(PHRASES_PROMPT, text, max_tokens=200)
        phrases: list[str] = []
        for line in re.split(r"[\n;]+", answer):
            phrase = _BULLET_RE.sub("", line).strip().strip("\"'").strip()
            if phrase and phrase.casefold() not in {p.casefold() for p in phrases}:
                phrases.append(phrase)
        if not phrases:
            raise LLMError(f"LLM endpoint {self.endpoint} returned no key phrases")
        return phrases[:MAX_PHRASES]

    def condense(self, texts: Sequence[str], *, subject: str) -> str:
        prompt = CONDENSE_PROMPT.format(subject=subject or "one topic", limit=CONDENSED_MAX_CHARS)
        answer = self.chat(prompt, "\n".join(f"- {line}" for line in _unique_lines(texts)), max_tokens=250)
        line = fit(answer, CONDENSED_MAX_CHARS)
        if not line:
            raise LLMError(f"LLM endpoint {self.endpoint} returned an empty summary")
        return line

    def reflect(self, *, context: str, reflection: str, lesson: str) -> tuple[str, str]:
        prompt = REFLECT_PROMPT.format(context=context, limit=REFLECTION_MAX_CHARS)
        answer = self.chat(prompt, f"What happened: {reflection}\nSuggested lesson: {lesson}", max_tokens=250)
        found: dict[str, str] = {}
        for line in answer.splitlines():
            match = _LABELLED_RE.match(line)
            if match is not None:
                found.setdefault(match.group(1).upper(), fit(match.group(2), REFLECTION_MAX_CHARS))
        if not found.get("REFLECTION") or not found.get("LESSON"):
            raise LLMError(f"LLM endpoint {self.endpoint} answered without a REFLECTION and a LESSON line")
        return found["REFLECTION"], found["LESSON"]


def _error_text(raw: bytes) -> str:
    try:
        data: Any = json.loads(raw)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return fit(error["message"], 300)
        if isinstance(error, str):
            return fit(error, 300)
    return fit(raw.decode("utf-8", "replace"), 300) or "(empty body)"


def _content_of(raw: bytes, endpoint: str) -> str:
    try:
        data: Any = json.loads(raw)
    except ValueError:
        raise LLMError(f"LLM endpoint {endpoint} answered with something that is not JSON") from None
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise LLMError(f"LLM endpoint {endpoint} answered without choices[0].message.content") from None
    if not isinstance(content, str):
        raise LLMError(f"LLM endpoint {endpoint} answered with non-text content")
    return content.strip()


def default_client() -> LLMClient:
    """The client the settings configure: OpenAI-compatible when LLM_BASE_URL is set, else extractive."""
    base_url = str(getattr(settings, "LLM_BASE_URL", "") or "")
    if not base_url:
        return ExtractiveClient()
    return OpenAICompatibleClient(
        base_url,
        model=str(getattr(settings, "LLM_MODEL", "") or "gpt-4o-mini"),
        api_key=str(getattr(settings, "LLM_API_KEY", "") or ""),
        timeout=float(getattr(settings, "LLM_TIMEOUT_SECONDS", 30)),
    )


DETERMINISTIC = "deterministic"
"""``written_by`` of a reflection whose lines are the pattern detector's own draft."""


@dataclass(frozen=True)
class WrittenReflection:
    """A reflection's REFLECTION and LESSON lines, who wrote them, and the LLM's error when it failed."""

    reflection: str
    lesson: str
    written_by: str
    llm_error: str = ""


def configured_client() -> tuple[LLMClient | None, str]:
    """`default_client()`, or None and the reason when the settings name an endpoint it cannot use."""
    try:
        return default_client(), ""
    except LLMError as exc:
        return None, str(exc)


def written_reflection(
    client: LLMClient | None, *, context: str, reflection: str, lesson: str, error: str = ""
) -> WrittenReflection:
    """The lines of a detected pattern: the LLM's (`client.reflect`) when a client other than the extractive
    default is configured and answers, else the detector's draft, with the LLM's error (or `error`, why no
    client could be built) when one was wanted."""
    if client is None or isinstance(client, ExtractiveClient):
        # The draft exactly as the detector wrote it: the deterministic default changes nothing.
        return WrittenReflection(reflection, lesson, DETERMINISTIC, error)
    try:
        new_reflection, new_lesson = client.reflect(context=context, reflection=reflection, lesson=lesson)
    except LLMError as exc:
        log.warning("reflection on %r written without the LLM: %s", context, exc)
        return WrittenReflection(reflection, lesson, DETERMINISTIC, str(exc))
    return WrittenReflection(new_reflection, new_lesson, f"llm:{client.name}")
