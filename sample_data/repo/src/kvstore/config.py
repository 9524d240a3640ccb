"""Server configuration: defaults, environment overrides and validation."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Dict, Mapping


class ConfigError(ValueError):
    """A configuration value is missing or out of range."""


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 7379
    max_entries: int = 100_000
    max_bytes: int = 256 << 20
    max_value_bytes: int = 8 << 20
    max_connections: int = 1024
    max_pending_bytes: int = 16 << 20
    idle_timeout: float = 300.0
    shards: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ConfigError(f"port must be in 1..65535, got {self.port}")
        if self.max_value_bytes > self.max_bytes:
            raise ConfigError("max_value_bytes cannot exceed max_bytes")
        for name in ("max_entries", "max_connections", "shards"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "ServerConfig":
        known = {f.name: f for f in fields(cls)}
        kwargs: Dict[str, Any] = {}
        for key, raw in values.items():
            if key not in known:
                raise ConfigError(f"unknown setting {key!r}")
            kind = known[key].type
            kwargs[key] = _coerce(key, raw, kind)
        return cls(**kwargs)

    @classmethod
    def from_env(cls, prefix: str = "KVSTORE_") -> "ServerConfig":
        values = {
            key[len(prefix):].lower(): value
            for key, value in os.environ.items()
            if key.startswith(prefix)
        }
        return cls.from_mapping(values)


def _coerce(key: str, raw: Any, kind: Any) -> Any:
    kind_name = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    try:
        if kind_name == "int":
            return int(raw)
        if kind_name == "float":
            return float(raw)
        return str(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: cannot read {raw!r} as {kind_name}") from None
