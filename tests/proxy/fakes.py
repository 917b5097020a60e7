"""In-process TEST DOUBLES of vLLM backends for the proxy's unit tests. They answer like a
vLLM OpenAI server closely enough to check what the proxy sends and relays, and can misbehave
on purpose (``misbehave``) the ways real backends and the gateways in front of them do; the
proxy is also tested against real vLLM engines (tests/integration)."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from dataclasses import dataclass, field
from typing import Any, Literal

import msgpack
import zmq
import zmq.asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer

# What a misbehaving backend does with a generation request:
#   hang          never answers (records that the proxy gave up on it in ``cancelled``)
#   stall         streams one event, then nothing (a hung decoder mid-stream)
#   flood         streams 64 KiB events as fast as the proxy takes them
#   html          200 with an HTML page (a gateway or a wrong port)
#   html_500      500 with an HTML page that names its own address
#   json_400      vLLM's 400 error body, its message naming its own URL
#   garbage_sse   200 event stream whose first event's data is not JSON
#   garbage_late  200 event stream: one completion event, then one whose data is not JSON
#   html_sse      200 event stream whose first event is an HTML page (no data field at all)
#   cut_sse       200 event stream that ends inside its first event (no blank line, no [DONE])
#   reset         resets the connection (RST) before answering (a backend killed mid-request)
#   crawl         streams 10 events 0.2 s apart, its token counter moving with each (slow, alive)
Misbehaviour = Literal[
    "hang",
    "stall",
    "flood",
    "html",
    "html_500",
    "json_400",
    "garbage_sse",
    "garbage_late",
    "html_sse",
    "cut_sse",
    "json_list",
    "json_cut",
    "reset",
    "crawl",
]


@dataclass
class FakeBackend:
    name: str
    seen: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)  # lower-cased names
    break_stream_after: int | None = None  # chunks sent before the connection is cut
    notify_to: str | None = None  # lmcache-pd prefiller: PUSH a ProxyNotif here per request
    notify_ranks: int = 1
    misbehave: Misbehaviour | None = None
    # Refuses (400, as vLLM does) a request whose token-id prompt plus max_tokens exceeds this.
    max_model_len: int | None = None
    answer_padding_bytes: int = 0  # makes each non-streamed answer this much larger
    # What /tokenize counts for any prompt: 3, as many as the stand-in prefiller's prompt ids
    # (None: no /tokenize, 404, as an engine without one).
    tokenize_count: int | None = 3
    tokenized: list[dict[str, Any]] = field(default_factory=list)
    cancelled: int = 0  # requests whose connection the proxy closed before they ended
    in_flight: int = 0
    healthy: bool = True  # False: /health answers 503 (an engine failing its checks)
    # vLLM's token counters on /metrics: they move as answers are made ("hang" never moves
    # them: with /health passing, that is a wedged engine).
    tokens: int = 0
    # Where it listens: several stand-ins may share a port on different loopback addresses
    # (127.0.0.2, ...), as a scaled StatefulSet's pods do (tests/proxy/test_discovery.py).
    host: str = "127.0.0.1"
    port: int | None = None
    server: TestServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("")).rstrip("/")

    async def start(self) -> FakeBackend:
        # Cancelled handlers are how this double sees the proxy close a connection.
        app = web.Application(
            handler_args={"handler_cancellation": True}, client_max_size=64 * 2**20
        )
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/v1/completions", self.generate)
        app.router.add_post("/v1/chat/completions", self.generate)
        app.router.add_post("/tokenize", self.tokenize)
        self.server = TestServer(app, host=self.host, port=self.port)
        await self.server.start_server()
        return self

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({}, status=200 if self.healthy else 503)

    async def metrics(self, _: web.Request) -> web.Response:
        labels = '{engine="0",model_name="m"}'
        page = (
            "# TYPE vllm:prompt_tokens_total counter\n"
            f"vllm:prompt_tokens_total{labels} 0.0\n"
            "# TYPE vllm:generation_tokens_total counter\n"
            f"vllm:generation_tokens_total{labels} {float(self.tokens)}\n"
        )
        return web.Response(text=page, content_type="text/plain")

    async def tokenize(self, request: web.Request) -> web.Response:
        if self.tokenize_count is None:
            raise web.HTTPNotFound
        self.tokenized.append(await request.json())
        count = self.tokenize_count
        return web.json_response({"count": count, "tokens": list(range(count))})

    async def models(self, _: web.Request) -> web.Response:
        card: dict[str, Any] = {"id": "m"}
        if self.max_model_len is not None:  # as vLLM's model card says it
            card["max_model_len"] = self.max_model_len
        return web.json_response({"data": [card]})

    async def generate(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        try:
            if self.misbehave is not None:
                return await self._misbehave(request, self.misbehave)
            return await self._generate(request)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1

    async def _misbehave(self, request: web.Request, how: Misbehaviour) -> web.StreamResponse:
        async for _ in request.content.iter_any():
            pass  # neither parsed nor kept: tests measure the proxy's memory, not ours
        page = f"<html><body>bad gateway at {self.url}</body></html>"
        if how == "hang":
            await asyncio.sleep(3600)
        if how == "reset":
            transport = request.transport
            assert transport is not None
            sock = transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.close()  # with a zero linger: RST, as from a process that died
            await asyncio.sleep(3600)
        if how == "html":
            return web.Response(text=page, content_type="text/html")
        if how == "html_500":
            return web.Response(text=page, status=500, content_type="text/html")
        if how == "json_400":
            error = {"message": f"context too long at {self.url}", "type": "BadRequestError"}
            return web.json_response({"error": error | {"code": 400}}, status=400)
        if how == "json_list":
            return web.json_response(["not", "a", "completion"])
        if how == "json_cut":  # a decoder dying halfway through a non-streamed answer
            cut = web.StreamResponse(headers={"Content-Type": "application/json"})
            await cut.prepare(request)
            await cut.write(b'{"id": "cmpl-cut", "choices": [{"text": "' + b"x" * 65536)
            assert request.transport is not None
            request.transport.close()
            return cut
        return await self._misbehaving_stream(request, how)

    async def _misbehaving_stream(
        self, request: web.Request, how: Misbehaviour
    ) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        if how == "cut_sse":  # the answer ends properly (chunked), its event does not
            await out.write(b'data: {"choices": [{"text": "0"')
            return out
        await self._misbehave_in_stream(out, how)
        await out.write(b"data: [DONE]\n\n")
        return out

    async def _misbehave_in_stream(self, out: web.StreamResponse, how: Misbehaviour) -> None:
        if how == "garbage_sse":
            await out.write(b"data: <html>not json</html>\n\n")
        elif how == "garbage_late":
            await out.write(b'data: {"choices": [{"text": "0"}]}\n\n')
            await asyncio.sleep(0.1)  # read apart: the client's stream has begun by then
            await out.write(b"data: <html>not json</html>\n\n")
        elif how == "html_sse":
            await out.write(f"<html><body>bad gateway at {self.url}</body></html>\n\n".encode())
        elif how == "crawl":
            for index in range(10):
                await asyncio.sleep(0.2)
                self.tokens += 1
                await out.write(f'data: {{"choices": [{{"text": "{index}"}}]}}\n\n'.encode())
        elif how == "flood":
            event = b"data: " + b"x" * 65536 + b"\n\n"
            while True:
                await out.write(event)
        else:  # stall
            await out.write(b'data: {"choices": [{"text": "0"}]}\n\n')
            await asyncio.sleep(3600)

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(body)
        self.headers.append({key.lower(): value for key, value in request.headers.items()})
        params = body.get("kv_transfer_params") or {}
        if self._too_long(body):
            error = {"message": "max_tokens is too large", "type": "BadRequestError"}
            return web.json_response({"error": error | {"code": 400}}, status=400)
        if self.notify_to and "disagg_spec" in params:
            await self._notify(params["disagg_spec"]["req_id"])
        if params.get("ret_first_tok"):  # an LMCache P/D prefiller: the first token and ids
            return web.json_response(
                self._first_token(chat=request.path.endswith("/chat/completions"))
            )
        if not body.get("stream"):
            returned = None
            if params.get("do_remote_decode"):
                returned = {"remote_engine_id": self.name, "remote_block_ids": [1, 2]}
            self.tokens += 3
            choices = [{"text": self.name, "finish_reason": "length"}]
            usage = {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
            answer = {"id": f"cmpl-{self.name}", "choices": choices, "usage": usage}
            if self.answer_padding_bytes:
                answer["padding"] = "x" * self.answer_padding_bytes
            return web.json_response(answer | {"kv_transfer_params": returned})
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for index in range(3):
            if self.break_stream_after is not None and index == self.break_stream_after:
                assert request.transport is not None
                request.transport.close()  # a decoder dying mid-stream
                return out
            self.tokens += 1
            await out.write(f"data: {json.dumps({'choices': [{'text': str(index)}]})}\n\n".encode())
        await out.write(b"data: [DONE]\n\n")
        await out.write_eof()
        return out

    def _too_long(self, body: dict[str, Any]) -> bool:
        prompt = body.get("prompt")
        if self.max_model_len is None or not isinstance(prompt, list):
            return False
        return len(prompt) + int(body.get("max_tokens") or 0) > self.max_model_len

    @staticmethod
    def _first_token(chat: bool) -> dict[str, Any]:
        """vLLM puts prompt_token_ids in each choice of a completion, at the top of a chat."""
        top: dict[str, Any] = {"id": "p", "model": "m", "kv_transfer_params": {"first_tok": 7}}
        if chat:
            message = {"role": "assistant", "content": "F"}
            chat_choice = {"message": message, "finish_reason": "length"}
            return top | {"choices": [chat_choice], "prompt_token_ids": [1, 2, 3]}
        choice: dict[str, Any] = {
            "text": "F",
            "finish_reason": "length",
            "prompt_token_ids": [1, 2, 3],
        }
        return top | {"choices": [choice]}

    async def _notify(self, request_id: str) -> None:
        socket = zmq.asyncio.Context.instance().socket(zmq.PUSH)
        socket.connect(self.notify_to or "")
        for _ in range(self.notify_ranks):
            await socket.send(msgpack.packb({"type": "ProxyNotif", "req_id": request_id}))
        await asyncio.sleep(0.05)
        socket.close(linger=1000)

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()


async def _serve_forever(name: str, port: int) -> None:
    await FakeBackend(name, host="0.0.0.0", port=port).start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    # A stand-in engine in a container of its own (tests/integration/test_proxy_discovery.py):
    # python3 -m tests.proxy.fakes NAME PORT; its answers' text is NAME.
    import sys

    asyncio.run(_serve_forever(sys.argv[1], int(sys.argv[2])))
