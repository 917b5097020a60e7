"""A backend's stream, cut into events and checked (events.py): what passes is exactly what
came, however it was chunked; anything that is not a completion event is refused, by the plain
relay's checker and lmcache-pd's converter alike."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generator.proxy.events import EventBuffer, EventChecker, EventRelay, completion_event
from generator.proxy.lmcache_pd import FirstToken, StreamConverter

TEXT = st.text(max_size=12)
CHOICES = st.lists(st.fixed_dictionaries({"text": TEXT}), min_size=1, max_size=2)
EVENTS = st.lists(
    st.fixed_dictionaries({"choices": CHOICES})
    | st.fixed_dictionaries({"error": st.fixed_dictionaries({"message": TEXT})}),
    max_size=5,
).map(lambda events: [f"data: {json.dumps(event)}\n\n".encode() for event in events])
GARBAGE = [
    b"data: <html>not json</html>\n\n",  # what test_fuzz found relayed on nixl
    b"<html><body>bad gateway</body></html>\n\n",  # no data field at all
    b"data: [1, 2]\n\n",  # JSON, not an object
    b'event: error\ndata: {"choices": []}\n\n',  # a field vLLM never sends
    b'data: {"choices": []}\ndata: {"choices": []}\n\n',  # two data lines
    b"data: \n\n",
]


def _cuts(data: bytes) -> st.SearchStrategy[list[bytes]]:
    """``data`` in chunks cut anywhere."""
    return st.lists(st.integers(0, len(data)), max_size=6).map(
        lambda points: [
            data[start:end]
            for start, end in zip([0, *sorted(points)], [*sorted(points), len(data)], strict=True)
            if end > start
        ]
    )


def _converter() -> StreamConverter:
    first = FirstToken(token_id=7, text="F", prompt_ids=[1, 2], finish_reason=None, model="m")
    return StreamConverter(first, chat=False, request_id="r")


def _relay(relay: EventRelay, chunks: list[bytes]) -> bytes:
    out = b"".join(relay.feed(chunk) for chunk in chunks)
    relay.end()
    return out


def _until_refused(relay: EventRelay, chunks: list[bytes]) -> tuple[bytes, ValueError | None]:
    """What ``relay`` passed on, and how it refused the stream (None: it did not)."""
    passed = b""
    try:
        for chunk in chunks:
            passed += relay.feed(chunk)
        relay.end()
    except ValueError as exc:
        return passed, exc
    return passed, None


@given(st.data())
def test_a_good_stream_passes_as_it_came_however_it_is_chunked(data: st.DataObject) -> None:
    stream = b"".join(data.draw(EVENTS)) + b"data: [DONE]\n\n"
    chunks = data.draw(_cuts(stream))
    assert _relay(EventChecker(), chunks) == stream


@given(st.data())
def test_the_converter_takes_every_good_stream(data: st.DataObject) -> None:
    stream = b"".join(data.draw(EVENTS)) + b"data: [DONE]\n\n"
    converted = _relay(_converter(), data.draw(_cuts(stream)))
    assert converted == b"" or converted.endswith(b"\n\n")
    for event in converted.split(b"\n\n")[:-1]:
        assert isinstance(json.loads(event.removeprefix(b"data: ")), dict)


@pytest.mark.parametrize("make", [EventChecker, _converter], ids=["checker", "converter"])
@pytest.mark.parametrize("garbage", GARBAGE)
@given(data=st.data())
def test_an_event_that_is_not_a_completion_is_refused_wherever_it_comes(
    make: Callable[[], EventRelay], garbage: bytes, data: st.DataObject
) -> None:
    good = data.draw(EVENTS)
    at = data.draw(st.integers(0, len(good)))
    stream = b"".join([*good[:at], garbage, *good[at:]]) + b"data: [DONE]\n\n"
    passed, refused = _until_refused(make(), data.draw(_cuts(stream)))
    assert refused is not None
    assert garbage not in passed


@pytest.mark.parametrize("make", [EventChecker, _converter], ids=["checker", "converter"])
def test_a_stream_that_ends_inside_an_event_is_refused(make: Callable[[], EventRelay]) -> None:
    relay = make()
    relay.feed(b'data: {"choices": [{"text": "0"}]}\n\ndata: {"choices": [')
    with pytest.raises(ValueError, match="ended inside an event"):
        relay.end()


def test_an_event_that_never_ends_is_refused_past_4_mib() -> None:
    events = EventBuffer()
    events.cut(b"data: " + b"x" * (4 * 2**20 - 6))  # 4 MiB: still an event, maybe
    with pytest.raises(ValueError, match="without an event end"):
        events.cut(b"x")


def test_blank_lines_between_events_are_no_events() -> None:
    assert EventBuffer().cut(b'\n\ndata: {"a": 1}\n\n\n\n\ndata: [DONE]\n\n') == [
        b'data: {"a": 1}',
        b"data: [DONE]",
    ]
    assert completion_event(b"data: [DONE]") is None
    assert completion_event(b'data: {"a": 1}') == {"a": 1}
