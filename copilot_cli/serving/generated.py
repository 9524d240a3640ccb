"""What an engine returns for one served request (every engine the endpoint drives)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Generated:
    """The greedy tokens of a request and what it cost."""

    tokens: list[int]
    finish_reason: str  # "length" | "stop"
    prompt_tokens: int
    cached_tokens: int  # restored or placed: not computed
    recomputed_tokens: int  # placed tokens computed again (selective recompute)
    prompt_ms: float  # the request to its first token
    predicted_ms: float
    note: str = ""  # why chunk KV was not used, where it was not
