"""STAND-IN vLLM backend, for measuring router overhead only (tests/benchmarks/bench_proxy.py).

It answers instantly, like a prefiller or decoder that needs no time, so that what the
benchmark measures is the router. It is not vLLM and proves nothing about P/D; the proxy's
real tests run against real vLLM engines. Minimal HTTP/1.1 keep-alive over asyncio.

    python standin_backend.py PORT [PORT ...] [--event-gap-ms N]

--event-gap-ms spaces a stream's events N ms apart (soak_proxy.py: many long-lived streams);
without it every answer goes out at once. --answer-mb N pads every non-streamed decode answer
to about N MB (soak_proxy.py: large answers must not become the proxy's memory).
"""

from __future__ import annotations

import argparse
import asyncio
import json

_TOKENS = 16
_COMPLETION = json.dumps(
    {
        "id": "cmpl-standin",
        "object": "text_completion",
        "model": "m",
        "choices": [{"index": 0, "text": " tok" * _TOKENS, "finish_reason": "length"}],
        "usage": {
            "prompt_tokens": 200,
            "completion_tokens": _TOKENS,
            "total_tokens": 200 + _TOKENS,
        },
    }
).encode()
_PREFILL = json.dumps(
    {
        "id": "cmpl-standin-prefill",
        "choices": [{"index": 0, "text": " tok", "finish_reason": "length"}],
        "kv_transfer_params": {
            "do_remote_prefill": True,
            "remote_engine_id": "standin",
            "remote_block_ids": [1, 2, 3],
            "remote_host": "127.0.0.1",
            "remote_port": 5600,
        },
    }
).encode()
_CHUNK = b'data: {"id":"cmpl-standin","choices":[{"index":0,"text":" tok"}]}\n\n'
_SSE_PARTS = (
    *(b"%x\r\n%s\r\n" % (len(_CHUNK), _CHUNK) for _ in range(_TOKENS)),
    b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n",
)
_SSE = b"".join(_SSE_PARTS)


def _response(status: bytes, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        content_type,
        len(body),
        body,
    )


_HEALTH = _response(b"200 OK", b"{}")
_MODELS = _response(b"200 OK", b'{"object":"list","data":[{"id":"m","object":"model"}]}')
_METRICS = _response(b"200 OK", b"# stand-in\n", b"text/plain")
_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
_SSE_ANSWER = _SSE_HEAD + _SSE


def _padded_completion(megabytes: int) -> bytes:
    answer = json.loads(_COMPLETION)
    answer["choices"][0]["text"] = " tok" * (megabytes * 10**6 // 4)
    return json.dumps(answer).encode()


class StandIn(asyncio.Protocol):
    event_gap_s = 0.0  # set from --event-gap-ms
    completion = _COMPLETION  # replaced by a padded one with --answer-mb

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport
        self.buffer = b""
        self.pending: asyncio.TimerHandle | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.pending is not None:  # a spaced stream whose reader went away
            self.pending.cancel()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            answer = self._answer(head.split(b" ", 2)[1], body)
            if answer is _SSE_ANSWER and self.event_gap_s:
                self.transport.write(_SSE_HEAD)
                self._send_events(list(_SSE_PARTS))
            else:
                self.transport.write(answer)

    def _send_events(self, parts: list[bytes]) -> None:
        """One chunked SSE part now, the rest one gap apart (one keep-alive request at a time,
        as the proxy sends them)."""
        self.pending = None
        if self.transport.is_closing():
            return
        self.transport.write(parts.pop(0))
        if parts:
            loop = asyncio.get_running_loop()
            self.pending = loop.call_later(self.event_gap_s, self._send_events, parts)

    @classmethod
    def _answer(cls, path: bytes, body: bytes) -> bytes:
        if path == b"/health":
            return _HEALTH
        if path == b"/v1/models":
            return _MODELS
        if path == b"/metrics":
            return _METRICS
        if (
            b'"do_remote_decode"' in body
            or b'"max_tokens": 1,' in body
            or b'"max_tokens":1,' in body
        ):
            return _response(b"200 OK", _PREFILL)
        if b'"stream": true' in body or b'"stream":true' in body:
            return _SSE_ANSWER
        return _response(b"200 OK", cls.completion)


async def main(ports: list[int]) -> None:
    loop = asyncio.get_running_loop()
    servers = [await loop.create_server(StandIn, "127.0.0.1", port, backlog=1024) for port in ports]
    print("stand-in backends on", ports, flush=True)
    await asyncio.gather(*(server.serve_forever() for server in servers))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ports", type=int, nargs="+")
    parser.add_argument("--event-gap-ms", type=float, default=0.0)
    parser.add_argument("--answer-mb", type=int, default=0)
    args = parser.parse_args()
    StandIn.event_gap_s = args.event_gap_ms / 1000
    if args.answer_mb:
        StandIn.completion = _padded_completion(args.answer_mb)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main(args.ports))
