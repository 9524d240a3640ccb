"""An asyncio server that answers kvstore frames from an LRU cache."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Dict, Optional

from kvstore.config import ServerConfig
from kvstore.lru import LRUCache
from kvstore.metrics import Metrics
from kvstore.protocol import Frame, FrameReader, Opcode, ProtocolError, encode_frame

log = logging.getLogger("kvstore.server")


class ConnectionHandler:
    """Serves one client connection: reads frames, dispatches them, writes replies."""

    def __init__(self, server: "KVServer", reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.frames = FrameReader()
        self.peer = writer.get_extra_info("peername")
        self.requests = 0

    async def run(self) -> None:
        """Read until the client closes the connection or sends a malformed frame."""
        log.debug("connection from %s", self.peer)
        try:
            while True:
                data = await asyncio.wait_for(
                    self.reader.read(65536), timeout=self.server.config.idle_timeout
                )
                if not data:
                    break
                try:
                    frames = self.frames.feed(data)
                except ProtocolError as exc:
                    self.writer.write(encode_frame(Opcode.REPLY_ERROR, value=str(exc).encode()))
                    await self.writer.drain()
                    self.server.metrics.increment("protocol_errors")
                    break
                for frame in frames:
                    reply = self.dispatch(frame)
                    self.writer.write(reply)
                    self.requests += 1
                await self.writer.drain()
                if self.frames.pending > self.server.config.max_pending_bytes:
                    log.warning("client %s exceeded the pending-bytes limit", self.peer)
                    break
        except asyncio.TimeoutError:
            log.info("closing idle connection from %s", self.peer)
        except ConnectionResetError:
            log.info("connection reset by %s", self.peer)
        finally:
            self.writer.close()
            self.server.metrics.observe("requests_per_connection", self.requests)

    def dispatch(self, frame: Frame) -> bytes:
        """Apply one request frame to the cache and return the encoded reply."""
        started = time.perf_counter()
        cache = self.server.cache
        metrics = self.server.metrics
        if frame.opcode == Opcode.GET:
            value = cache.get(frame.key)
            if value is None:
                metrics.increment("get_miss")
                reply = encode_frame(Opcode.REPLY_MISSING, frame.key)
            else:
                metrics.increment("get_hit")
                reply = encode_frame(Opcode.REPLY_OK, frame.key, value)
        elif frame.opcode == Opcode.SET:
            if len(frame.value) > self.server.config.max_value_bytes:
                metrics.increment("set_too_large")
                reply = encode_frame(Opcode.REPLY_ERROR, frame.key, b"value too large")
            else:
                cache.put(frame.key, frame.value)
                metrics.increment("set")
                reply = encode_frame(Opcode.REPLY_OK, frame.key)
        elif frame.opcode == Opcode.DELETE:
            existed = cache.delete(frame.key)
            metrics.increment("delete")
            reply = encode_frame(Opcode.REPLY_OK if existed else Opcode.REPLY_MISSING, frame.key)
        elif frame.opcode == Opcode.PING:
            reply = encode_frame(Opcode.REPLY_OK, value=b"pong")
        elif frame.opcode == Opcode.STATS:
            reply = encode_frame(Opcode.REPLY_OK, value=self.server.stats_text().encode())
        else:
            reply = encode_frame(Opcode.REPLY_ERROR, value=b"unsupported opcode")
        metrics.observe("dispatch_seconds", time.perf_counter() - started)
        return reply


class KVServer:
    """Owns the cache, the metrics and the listening socket."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.cache: LRUCache = LRUCache(max_entries=config.max_entries,
                                        max_bytes=config.max_bytes)
        self.metrics = Metrics()
        self._server: Optional[asyncio.AbstractServer] = None
        self._handlers: Dict[int, ConnectionHandler] = {}

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.config.host, self.config.port)
        sockets = self._server.sockets or []
        for sock in sockets:
            log.info("listening on %s", sock.getsockname())

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._handlers) >= self.config.max_connections:
            writer.write(encode_frame(Opcode.REPLY_ERROR, value=b"too many connections"))
            writer.close()
            self.metrics.increment("rejected_connections")
            return
        handler = ConnectionHandler(self, reader, writer)
        self._handlers[id(handler)] = handler
        try:
            await handler.run()
        finally:
            self._handlers.pop(id(handler), None)

    def stats_text(self) -> str:
        stats = self.cache.stats
        lines = [
            f"entries {len(self.cache)}",
            f"bytes {self.cache.total_bytes}",
            f"hit_rate {stats.hit_rate:.4f}",
            f"evictions {stats.evictions}",
            f"connections {len(self._handlers)}",
        ]
        lines.extend(self.metrics.lines())
        return "\n".join(lines)

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
