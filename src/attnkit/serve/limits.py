"""What the playground accepts, and the one error type every bad request becomes.

Every limit is a number here, named in the error a request past it gets, so the page, the README
and the tests read the same values. A request body is JSON; a field of the wrong type, a value out
of range or an unknown choice raises :class:`ApiError`, which the server turns into
``{"error": message, "field": name}`` with a 4xx status — never a traceback, never a dead server.

Why these numbers: all-MiniLM-L6-v2 has 512 position embeddings ([CLS] and [SEP] included), so
512 tokens is the model's own limit; full weights of every head travel only up to
``FULL_WEIGHTS_MAX`` tokens (at 128 tokens that is 6 × 12 × 128² ≈ 1.2M numbers, ~11 MB of JSON);
longer inputs get the row summaries (top-k keys, entropy) of the head being looked at. The decode
limits keep one request under a few seconds on one CPU thread.
"""

from __future__ import annotations

from dataclasses import dataclass

#: largest request body read, in bytes (a longer Content-Length gets 413 before anything is read)
MAX_BODY_BYTES = 64 * 1024
#: characters of text accepted before tokenizing (a cheap bound; the token limit is the real one)
MAX_TEXT_CHARS = 4000
#: all-MiniLM-L6-v2's position embeddings: tokens per request, [CLS] and [SEP] included
MAX_TOKENS = 512
#: up to this many tokens the response carries every head's full L × L weights
FULL_WEIGHTS_MAX = 128
#: side of the pooled thumbnail of each head drawn in the grid
THUMB_MAX = 32
#: top-k keys per row in the row summaries of the looked-at head
TOP_K = 5
#: padding tokens appended in the "padding" mask mode (as if batched with a longer sentence)
PAD_EXTRA = 4
#: characters of decode prompt; decode steps per request
MAX_PROMPT_CHARS = 200
MAX_STEPS = 200
#: seconds a request may compute; decoding stops there and says so
COMPUTE_SECONDS = 10.0
#: seconds a request waits for the model while another request uses it (then 503)
WAIT_SECONDS = 20.0
#: seconds the server waits for a client to send its request (slow or silent clients are dropped)
SOCKET_SECONDS = 10.0


class ApiError(ValueError):
    """A request the API refuses: ``status`` (4xx/5xx), the ``field`` at fault, and the message."""

    def __init__(self, message: str, *, field: str | None = None, status: int = 400):
        super().__init__(message)
        self.field, self.status = field, status

    def body(self) -> dict:
        return {"error": str(self), "field": self.field}


@dataclass(frozen=True)
class Field:
    """A request field's name, for the checks below (one place that spells the message)."""

    name: str

    def require_int(self, value, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ApiError(f"{self.name} must be an integer in [{lo}, {hi}], got {value!r}", field=self.name)
        if not lo <= value <= hi:
            raise ApiError(f"{self.name} must be in [{lo}, {hi}], got {value}", field=self.name)
        return value

    def require_text(self, value, limit: int) -> str:
        if not isinstance(value, str):
            raise ApiError(f"{self.name} must be a string, got {type(value).__name__}", field=self.name)
        if not value.strip():
            raise ApiError(f"{self.name} is empty; type a sentence", field=self.name)
        if len(value) > limit:
            raise ApiError(f"{self.name} has {len(value)} characters; the limit is {limit}", field=self.name, status=413)
        return value

    def require_choice(self, value, choices: tuple[str, ...]) -> str:
        if value not in choices:
            raise ApiError(f"{self.name} must be one of {', '.join(map(repr, choices))}, got {value!r}", field=self.name)
        return value

    def require_number(self, value, lo: float, hi: float) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
            raise ApiError(f"{self.name} must be a number in [{lo}, {hi}], got {value!r}", field=self.name)
        return float(value)


def require_object(body, name: str = "body") -> dict:
    """``body`` as a JSON object (dict), or a 400 naming what came instead."""
    if not isinstance(body, dict):
        raise ApiError(f"the request {name} must be a JSON object like {{\"text\": \"...\"}}, got {type(body).__name__}", field=name)
    return body


def reject_unknown(body: dict, known: tuple[str, ...]) -> None:
    """A misspelt field is an error, not a silent default."""
    extra = sorted(set(body) - set(known))
    if extra:
        raise ApiError(f"unknown field(s) {extra}; this endpoint reads {list(known)}", field=extra[0])
