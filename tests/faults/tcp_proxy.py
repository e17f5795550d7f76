"""A loopback TCP proxy that can lose answers on purpose.

It forwards bytes both ways between clients and one upstream server. Two faults:
- `lose_answers_after(marker)`: once a client sends bytes containing `marker`, every byte the
  server sends back on any connection is dropped. The request reaches the server and takes
  effect; its answer never arrives, exactly like a response lost in a network timeout.
- `cut()`: closes every open connection at once, like a dropped link. New connections work.
"""

from __future__ import annotations

import asyncio
import contextlib


class LossyProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._marker: bytes | None = None
        self.losing = False
        self.answers_lost = asyncio.Event()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        await self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def lose_answers_after(self, marker: bytes) -> None:
        self._marker = marker

    async def heal(self) -> None:
        """Stop losing answers, and cut the connections whose byte streams lost data."""
        self._marker = None
        self.losing = False
        self.answers_lost.clear()
        await self.cut()

    async def cut(self) -> None:
        writers, self._writers = self._writers, set()
        for writer in writers:
            writer.close()
        for writer in writers:
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.close()
            return
        self._writers |= {client_writer, server_writer}
        await asyncio.gather(
            self._pipe(client_reader, server_writer, upstream=True),
            self._pipe(server_reader, client_writer, upstream=False),
            return_exceptions=True,
        )
        for writer in (client_writer, server_writer):
            self._writers.discard(writer)
            writer.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool
    ) -> None:
        # The tail of the previous read, so a marker split across two reads is still seen.
        carry = b""
        try:
            while data := await reader.read(65536):
                if upstream and self._marker is not None and self._marker in carry + data:
                    self.losing = True
                    self.answers_lost.set()
                carry = data[-256:]
                if not upstream and self.losing:
                    continue
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()
