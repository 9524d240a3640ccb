"""Retry with exponential backoff and full jitter, as a decorator or a plain call."""

from __future__ import annotations

import functools
import random
import time
from typing import Callable, Optional, Tuple, Type, TypeVar

T = TypeVar("T")


class RetryError(RuntimeError):
    """Raised when every attempt failed; ``last`` holds the final exception."""

    def __init__(self, attempts: int, last: BaseException) -> None:
        super().__init__(f"gave up after {attempts} attempts: {last!r}")
        self.attempts = attempts
        self.last = last


def backoff_delays(base: float, cap: float, attempts: int, rng: random.Random):
    """Yield ``attempts - 1`` sleep times: uniform(0, min(cap, base * 2**n))."""
    for attempt in range(attempts - 1):
        yield rng.uniform(0, min(cap, base * (2 ** attempt)))


def retry(
    attempts: int = 5,
    base: float = 0.05,
    cap: float = 2.0,
    retry_on: Tuple[Type[BaseException], ...] = (ConnectionError, TimeoutError),
    sleep: Callable[[float], None] = time.sleep,
    seed: Optional[int] = None,
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorate a function so that listed exceptions are retried with backoff."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")

    def decorate(func: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(func)
        def wrapper(*args, **kwargs) -> T:
            rng = random.Random(seed)
            delays = backoff_delays(base, cap, attempts, rng)
            last: Optional[BaseException] = None
            for attempt in range(attempts):
                try:
                    return func(*args, **kwargs)
                except retry_on as exc:
                    last = exc
                    if attempt == attempts - 1:
                        break
                    sleep(next(delays))
            assert last is not None
            raise RetryError(attempts, last)

        wrapper.retry_attempts = attempts  # type: ignore[attr-defined]
        return wrapper

    return decorate
