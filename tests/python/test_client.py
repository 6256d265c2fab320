#!/usr/bin/env python3
"""Drives a running durable-mcp "everything" server with the official Python MCP SDK.

    python tests/python/test_client.py --url http://127.0.0.1:PORT/mcp [--label NAME] [-k SUBSTRING]
    python tests/python/test_client.py --stdio-command BIN --stdio-store STORE_URL [...]

Run by scripts/python-client-test.sh, which installs the SDK (`mcp` 2.x) into a
git-ignored venv and starts the server. Uses only the SDK's own client stack
(`streamable_http_client`, `ClientSession`, `Client`); no raw HTTP.

Legacy era (2025-11-25, `initialize` + Mcp-Session-Id): initialize, list tools, call a
tool, answer server-to-client `elicitation/create` through the SDK's elicitation
callback, progress notifications.

Modern era (2026-07-28, stateless, per-request `_meta`): `server/discover`, list tools,
call a tool, and SEP-2322 `input_required` results, both driven by hand
(`ClientSession.call_tool(..., allow_input_required=True)` then a retry carrying
`inputResponses` and the echoed `requestState`) and automatically by `Client`
through its elicitation / sampling / roots callbacks.

With `--token TOKEN` (a server started with `--auth-api-keys`), every HTTP test runs with
`Authorization: Bearer TOKEN` through the SDK's own HTTP client, and the authorization
tests check that the server refuses a client without a token, or with a wrong one (401
with a `WWW-Authenticate: Bearer` challenge, and the SDK's session fails).

stdio (`--stdio-command`, the `durable-mcp` binary, started by the SDK's `stdio_client`
as `BIN serve --stdio --store STORE_URL`): list changes and resource updates, which the
server routes to the session's standalone stream, reach the client.

Every check is a named test function. Prints one `PASS name` / `FAIL name` line per
test, then `summary passed=N failed=M`. Exits 1 if any test failed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.client import Client, ClientRequestContext, ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

LEGACY_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
SIMPLE_TEXT = "This is a simple text response for testing."
TEST_TIMEOUT_SECONDS = 30.0

# Answers the elicitation callback gives, by schema property name.
FORM_ANSWERS: dict[str, Any] = {
    "username": "ada_lovelace",
    "email": "ada@example.org",
    "name": "Ada",
    "color": "teal",
    "ok": True,
}

TestFn = Callable[[str], Awaitable[None]]
TESTS: list[tuple[str, TestFn]] = []
AUTH_TESTS: list[tuple[str, TestFn]] = []
# The bearer token every HTTP connection carries (`--token`); None: no Authorization header.
TOKEN: str | None = None
StdioTestFn = Callable[[StdioServerParameters], Awaitable[None]]
STDIO_TESTS: list[tuple[str, StdioTestFn]] = []


def test(fn: TestFn) -> TestFn:
    """Register a test; its name is the function name without the `test_` prefix."""
    TESTS.append((fn.__name__.removeprefix("test_"), fn))
    return fn


def auth_test(fn: TestFn) -> TestFn:
    """Register a test of an authenticating server (run with `--token` only)."""
    AUTH_TESTS.append((fn.__name__.removeprefix("test_"), fn))
    return fn


def connect(url: str, token: str | None = None) -> Any:
    """The SDK's streamable HTTP transport to `url`, with `token` (default: `--token`) as its
    bearer token, set on the SDK's own HTTP client."""
    token = TOKEN if token is None else token
    if not token:
        return streamable_http_client(url)
    return streamable_http_client(url, http_client=create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}))


def stdio_test(fn: StdioTestFn) -> StdioTestFn:
    """Register a test of the stdio transport; it gets the server's launch parameters."""
    STDIO_TESTS.append((fn.__name__.removeprefix("test_"), fn))
    return fn


class Check(AssertionError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise Check(message)


# ----------------------------------------------------------------- helpers --


class ElicitationRecorder:
    """An SDK elicitation callback that fills each form field from FORM_ANSWERS and records the calls."""

    def __init__(self, action: str = "accept") -> None:
        self.action = action
        self.calls: list[types.ElicitRequestParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        self.calls.append(params)
        if self.action != "accept":
            return types.ElicitResult(action=self.action)  # type: ignore[arg-type]
        schema = getattr(params, "requested_schema", None) or {}
        properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
        content = {key: FORM_ANSWERS.get(key, f"value-for-{key}") for key in properties}
        return types.ElicitResult(action="accept", content=content)


class SamplingRecorder:
    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.calls: list[types.CreateMessageRequestParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        self.calls.append(params)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(text=self.reply),
            model="python-sdk-test-model",
            stop_reason="endTurn",
        )


class RootsRecorder:
    def __init__(self, uris: list[str]) -> None:
        self.uris = uris
        self.calls = 0

    async def __call__(self, context: ClientRequestContext) -> types.ListRootsResult | types.ErrorData:
        self.calls += 1
        return types.ListRootsResult(roots=[types.Root(uri=uri, name=uri.rsplit("/", 1)[-1]) for uri in self.uris])


async def unexpected_elicitation(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult | types.ErrorData:
    """Declares the elicitation capability for tests that must answer by hand."""
    raise Check(f"elicitation callback called unexpectedly: {params!r}")


@asynccontextmanager
async def legacy_session(url: str, **callbacks: Any) -> AsyncIterator[tuple[ClientSession, types.InitializeResult]]:
    """A 2025-11-25 session: the SDK's streamable HTTP transport + ClientSession + initialize."""
    async with connect(url) as (read_stream, write_stream):
        async with ClientSession(read_stream, write_stream, **callbacks) as session:
            result = await session.initialize()
            yield session, result


@asynccontextmanager
async def modern_session(url: str, **callbacks: Any) -> AsyncIterator[tuple[ClientSession, types.DiscoverResult]]:
    """A 2026-07-28 connection: the SDK's streamable HTTP transport + ClientSession + server/discover."""
    async with connect(url) as (read_stream, write_stream):
        async with ClientSession(read_stream, write_stream, **callbacks) as session:
            result = await session.discover()
            yield session, result


def texts(result: types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, types.TextContent)]


def only_text(result: types.CallToolResult) -> str:
    check(not result.is_error, f"tool returned isError: {result!r}")
    parts = texts(result)
    check(len(parts) == 1, f"expected exactly one text block, got {result.content!r}")
    return parts[0]


EXPECTED_TOOLS = {
    "test_simple_text",
    "test_elicitation",
    "test_input_required_result_elicitation",
    "test_input_required_result_multi_round",
    "emit_events",
}


async def list_all_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(50):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise Check("tools/list pagination did not end after 50 pages")


def check_tool_list(tools: list[types.Tool]) -> None:
    names = [tool.name for tool in tools]
    missing = EXPECTED_TOOLS - set(names)
    check(not missing, f"tools/list lacks {sorted(missing)}; got {sorted(names)}")
    check(len(names) == len(set(names)), f"duplicate tool names: {names}")
    simple = next(tool for tool in tools if tool.name == "test_simple_text")
    check(simple.input_schema.get("type") == "object", f"bad inputSchema: {simple.input_schema!r}")


# ---------------------------------------------------------- legacy era ----


@test
async def test_legacy_initialize(url: str) -> None:
    async with legacy_session(url) as (session, result):
        check(result.protocol_version == LEGACY_VERSION, f"protocolVersion {result.protocol_version!r}")
        check(session.protocol_version == LEGACY_VERSION, f"session version {session.protocol_version!r}")
        check(bool(result.server_info.name), f"empty serverInfo: {result.server_info!r}")
        check(result.capabilities.tools is not None, f"no tools capability: {result.capabilities!r}")
        await session.send_ping()


@test
async def test_legacy_list_tools(url: str) -> None:
    async with legacy_session(url) as (session, _):
        check_tool_list(await list_all_tools(session))


@test
async def test_legacy_call_simple_text(url: str) -> None:
    async with legacy_session(url) as (session, _):
        result = await session.call_tool("test_simple_text", {})
        text = only_text(result)
        check(text == SIMPLE_TEXT, f"unexpected text {text!r}")


@test
async def test_legacy_elicitation_accept(url: str) -> None:
    recorder = ElicitationRecorder()
    async with legacy_session(url, elicitation_callback=recorder) as (session, _):
        message = "Please provide your user info (python SDK test)"
        result = await session.call_tool("test_elicitation", {"message": message})
        text = only_text(result)
    check(len(recorder.calls) == 1, f"elicitation callback called {len(recorder.calls)} times")
    params = recorder.calls[0]
    check(params.message == message, f"elicitation message {params.message!r}")
    schema = getattr(params, "requested_schema", {}) or {}
    check(
        {"username", "email"} <= set(schema.get("properties", {})),
        f"requestedSchema lacks username/email: {schema!r}",
    )
    check(text.startswith("User response:"), f"unexpected text {text!r}")
    check("action=accept" in text, f"action missing in {text!r}")
    for value in (FORM_ANSWERS["username"], FORM_ANSWERS["email"]):
        check(value in text, f"answer {value!r} not in tool result {text!r}")


@test
async def test_legacy_elicitation_decline(url: str) -> None:
    recorder = ElicitationRecorder(action="decline")
    async with legacy_session(url, elicitation_callback=recorder) as (session, _):
        result = await session.call_tool("test_elicitation", {"message": "Decline me"})
        text = only_text(result)
    check(len(recorder.calls) == 1, f"elicitation callback called {len(recorder.calls)} times")
    check("action=decline" in text, f"decline not reported in {text!r}")


@test
async def test_legacy_input_required_tool_asks_inline(url: str) -> None:
    # In a legacy session the SEP-2322 fixture asks through a real elicitation/create.
    recorder = ElicitationRecorder()
    async with legacy_session(url, elicitation_callback=recorder) as (session, _):
        result = await session.call_tool("test_input_required_result_elicitation", {})
        text = only_text(result)
    check(len(recorder.calls) == 1, f"elicitation callback called {len(recorder.calls)} times")
    check(text == f"Hello, {FORM_ANSWERS['name']}!", f"unexpected text {text!r}")


@test
async def test_legacy_progress(url: str) -> None:
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with legacy_session(url) as (session, _):
        result = await session.call_tool(
            "emit_events", {"count": 3, "interval_ms": 10}, progress_callback=on_progress
        )
        text = only_text(result)
    check(text == "3", f"unexpected text {text!r}")
    check(len(progress) == 3, f"expected 3 progress notifications, got {progress!r}")
    check(progress == sorted(progress), f"progress not non-decreasing: {progress!r}")


# ---------------------------------------------------------- modern era ----


@test
async def test_modern_discover(url: str) -> None:
    async with modern_session(url) as (session, result):
        check(MODERN_VERSION in result.supported_versions, f"supportedVersions {result.supported_versions!r}")
        check(session.protocol_version == MODERN_VERSION, f"negotiated {session.protocol_version!r}")
        check(result.capabilities.tools is not None, f"no tools capability: {result.capabilities!r}")


@test
async def test_modern_auto_negotiation(url: str) -> None:
    # Client(mode="auto") probes server/discover and must pick the modern era here.
    async with Client(connect(url), mode="auto") as client:
        check(client.protocol_version == MODERN_VERSION, f"auto mode negotiated {client.protocol_version!r}")
        text = only_text(await client.call_tool("test_simple_text", {}))
        check(text == SIMPLE_TEXT, f"unexpected text {text!r}")


@test
async def test_modern_list_tools(url: str) -> None:
    async with modern_session(url) as (session, _):
        check_tool_list(await list_all_tools(session))


@test
async def test_modern_call_simple_text(url: str) -> None:
    async with modern_session(url) as (session, _):
        result = await session.call_tool("test_simple_text", {})
        text = only_text(result)
        check(text == SIMPLE_TEXT, f"unexpected text {text!r}")


@test
async def test_modern_input_required_manual_retry(url: str) -> None:
    async with modern_session(url, elicitation_callback=unexpected_elicitation) as (session, _):
        first = await session.call_tool(
            "test_input_required_result_elicitation", {}, allow_input_required=True
        )
        check(isinstance(first, types.InputRequiredResult), f"expected input_required, got {first!r}")
        assert isinstance(first, types.InputRequiredResult)
        requests = first.input_requests or {}
        check("user_name" in requests, f"inputRequests lacks user_name: {requests!r}")
        request = requests["user_name"]
        check(request.method == "elicitation/create", f"user_name is {request.method!r}")
        schema = getattr(request.params, "requested_schema", {}) or {}
        check("name" in schema.get("properties", {}), f"requestedSchema lacks name: {schema!r}")

        # A retry without the answer is asked again (a new InputRequiredResult, not an error).
        again = await session.call_tool(
            "test_input_required_result_elicitation",
            {},
            request_state=first.request_state,
            allow_input_required=True,
        )
        check(isinstance(again, types.InputRequiredResult), f"retry without answer gave {again!r}")

        answer = types.ElicitResult(action="accept", content={"name": "Grace"})
        final = await session.call_tool(
            "test_input_required_result_elicitation",
            {},
            input_responses={"user_name": answer},
            request_state=first.request_state,
            allow_input_required=True,
        )
        check(isinstance(final, types.CallToolResult), f"expected a complete result, got {final!r}")
        assert isinstance(final, types.CallToolResult)
        text = only_text(final)
        check(text == "Hello, Grace!", f"unexpected text {text!r}")


@test
async def test_modern_input_required_via_callback(url: str) -> None:
    recorder = ElicitationRecorder()
    async with Client(connect(url), mode=MODERN_VERSION, elicitation_callback=recorder) as client:
        result = await client.call_tool("test_input_required_result_elicitation", {})
        text = only_text(result)
    check(len(recorder.calls) == 1, f"elicitation callback called {len(recorder.calls)} times")
    check(text == f"Hello, {FORM_ANSWERS['name']}!", f"unexpected text {text!r}")


@test
async def test_modern_elicitation_via_callback(url: str) -> None:
    # test_elicitation returns input_required in 2026-07-28; Client answers through the callback.
    recorder = ElicitationRecorder()
    async with Client(connect(url), mode="auto", elicitation_callback=recorder) as client:
        check(client.protocol_version == MODERN_VERSION, f"negotiated {client.protocol_version!r}")
        message = "Please provide your user info (modern era)"
        text = only_text(await client.call_tool("test_elicitation", {"message": message}))
    check(len(recorder.calls) == 1, f"elicitation callback called {len(recorder.calls)} times")
    check(recorder.calls[0].message == message, f"elicitation message {recorder.calls[0].message!r}")
    check("action=accept" in text, f"action missing in {text!r}")
    for value in (FORM_ANSWERS["username"], FORM_ANSWERS["email"]):
        check(value in text, f"answer {value!r} not in tool result {text!r}")


@test
async def test_modern_multi_round_request_state(url: str) -> None:
    # Two input_required rounds, each with a new sealed requestState, then the result.
    recorder = ElicitationRecorder()
    async with Client(connect(url), mode=MODERN_VERSION, elicitation_callback=recorder) as client:
        text = only_text(await client.call_tool("test_input_required_result_multi_round", {}))
    check(len(recorder.calls) == 2, f"expected 2 elicitation rounds, got {len(recorder.calls)}")
    expected = f"Multi-round flow complete: {FORM_ANSWERS['name']}'s favorite color is {FORM_ANSWERS['color']}"
    check(text == expected, f"unexpected text {text!r}")


@test
async def test_modern_multiple_inputs(url: str) -> None:
    # Elicitation + sampling + roots in one InputRequiredResult, answered by three callbacks.
    elicit = ElicitationRecorder()
    sample = SamplingRecorder("Bonjour from the python SDK")
    roots = RootsRecorder(["file:///tmp/python-sdk-root"])
    async with Client(
        connect(url),
        mode=MODERN_VERSION,
        elicitation_callback=elicit,
        sampling_callback=sample,
        list_roots_callback=roots,
    ) as client:
        text = only_text(await client.call_tool("test_input_required_result_multiple_inputs", {}))
    check(len(elicit.calls) >= 1 and len(sample.calls) >= 1 and roots.calls >= 1, "a callback was not used")
    check(text.startswith("All inputs received:"), f"unexpected text {text!r}")
    for part in (f"name={FORM_ANSWERS['name']}", "Bonjour from the python SDK", "file:///tmp/python-sdk-root"):
        check(part in text, f"{part!r} not in {text!r}")


@test
async def test_modern_progress(url: str) -> None:
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with modern_session(url) as (session, _):
        result = await session.call_tool(
            "emit_events", {"count": 3, "interval_ms": 10}, progress_callback=on_progress
        )
        text = only_text(result)
    check(text == "3", f"unexpected text {text!r}")
    check(len(progress) == 3, f"expected 3 progress notifications, got {progress!r}")


# --------------------------------------------------------------- stdio -----

WATCHED_RESOURCE = "test://watched-resource"


class NotificationRecorder:
    """An SDK message_handler that records server notifications and wakes waiters."""

    def __init__(self) -> None:
        self.received: list[types.ServerNotification] = []
        self._changed = anyio.Event()

    async def __call__(self, message: types.ServerNotification | Exception) -> None:
        if isinstance(message, Exception):
            return
        self.received.append(message)
        self._changed.set()

    async def wait_for(self, what: str, found: Callable[[types.ServerNotification], bool]) -> None:
        with anyio.move_on_after(10):
            while not any(found(n) for n in self.received):
                self._changed = anyio.Event()
                await self._changed.wait()
        check(any(found(n) for n in self.received), f"no {what} within 10 s; got {self.received!r}")


@stdio_test
async def test_stdio_list_changed_and_resource_updated(server: StdioServerParameters) -> None:
    # stdio has no GET stream: the server itself must write what it routes to the
    # session's standalone stream (list changes, updates of subscribed resources).
    recorder = NotificationRecorder()
    async with stdio_client(server) as (read_stream, write_stream):
        async with ClientSession(read_stream, write_stream, message_handler=recorder) as session:
            result = await session.initialize()
            check(result.protocol_version == LEGACY_VERSION, f"protocolVersion {result.protocol_version!r}")
            text = only_text(await session.call_tool("test_trigger_tool_change", {}))
            check("dynamic_tool is now listed" in text, f"unexpected text {text!r}")
            await recorder.wait_for(
                "notifications/tools/list_changed", lambda n: isinstance(n, types.ToolListChangedNotification)
            )
            names = {tool.name for tool in await list_all_tools(session)}
            check("dynamic_tool" in names, f"dynamic_tool not listed after the change: {sorted(names)}")

            await session.subscribe_resource(WATCHED_RESOURCE)
            only_text(await session.call_tool("trigger_resource_update", {}))
            await recorder.wait_for(
                f"notifications/resources/updated for {WATCHED_RESOURCE}",
                lambda n: isinstance(n, types.ResourceUpdatedNotification) and n.params.uri == WATCHED_RESOURCE,
            )


# ----------------------------------------------------------- authorization --


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "auth-test", "version": "1"}},
}


async def challenge_of(url: str, token: str | None) -> tuple[int, str]:
    """The status and WWW-Authenticate of an `initialize` POST with `token` (or none)."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with create_mcp_http_client(headers=headers) as client:
        response = await client.post(url, json=INITIALIZE)
        return response.status_code, response.headers.get("www-authenticate", "")


async def session_fails(url: str, token: str) -> None:
    """The SDK's session with `token` ("" for none) cannot initialize."""
    try:
        async with connect(url, token) as (read_stream, write_stream):
            async with ClientSession(read_stream, write_stream) as session:
                with anyio.fail_after(10):
                    await session.initialize()
    except Exception:  # noqa: BLE001 - any failure to connect is the refusal we expect
        return
    raise Check("the SDK's session initialized without valid credentials")


@auth_test
async def test_auth_refused_without_token(url: str) -> None:
    status, challenge = await challenge_of(url, None)
    check(status == 401, f"expected 401 without a token, got {status}")
    check(challenge.startswith("Bearer"), f"expected a Bearer challenge, got {challenge!r}")
    await session_fails(url, "")


@auth_test
async def test_auth_refused_with_a_wrong_token(url: str) -> None:
    status, challenge = await challenge_of(url, "not-a-key")
    check(status == 401, f"expected 401 with a wrong token, got {status}")
    check('error="invalid_token"' in challenge, f"expected error=invalid_token, got {challenge!r}")
    await session_fails(url, "not-a-key")


@auth_test
async def test_auth_served_with_the_token(url: str) -> None:
    status, _ = await challenge_of(url, TOKEN)
    check(status == 200, f"expected 200 with the token, got {status}")


# ------------------------------------------------------------------ runner --


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups; anyio task groups wrap test failures."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def describe_error(exc: BaseException) -> str:
    return "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves(exc))


async def run(
    url: str | None,
    stdio: StdioServerParameters | None,
    label: str,
    selector: str | None,
    verbose: bool,
    skip: frozenset[str] = frozenset(),
) -> int:
    passed = failed = 0
    prefix = f"[{label}] " if label else ""
    selected: list[tuple[str, Callable[[], Awaitable[None]]]] = []
    if url is not None:
        selected += [(name, lambda fn=fn: fn(url)) for name, fn in TESTS]
        if TOKEN:
            selected += [(name, lambda fn=fn: fn(url)) for name, fn in AUTH_TESTS]
    if stdio is not None:
        selected += [(name, lambda fn=fn: fn(stdio)) for name, fn in STDIO_TESTS]
    for name, call in selected:
        if (selector and selector not in name) or name in skip:
            continue
        started = time.monotonic()
        try:
            with anyio.fail_after(TEST_TIMEOUT_SECONDS):
                await call()
        except Exception as exc:  # noqa: BLE001 - a test failure of any kind is reported, not raised
            failed += 1
            elapsed = time.monotonic() - started
            print(f"FAIL {prefix}{name} ({elapsed:.2f}s): {describe_error(exc)}", flush=True)
            if verbose or not all(isinstance(leaf, Check) for leaf in leaves(exc)):
                traceback.print_exception(exc, file=sys.stdout)
        else:
            passed += 1
            print(f"PASS {prefix}{name} ({time.monotonic() - started:.2f}s)", flush=True)
    print(f"summary passed={passed} failed={failed}", flush=True)
    return 1 if failed or not passed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="the server's MCP endpoint, e.g. http://127.0.0.1:8123/mcp")
    parser.add_argument("--stdio-command", help="the durable-mcp binary, for the stdio tests")
    parser.add_argument("--stdio-store", default="memory:", help="the store of the stdio server (default memory:)")
    parser.add_argument("--label", default="", help="prefix for the test names (e.g. the store)")
    parser.add_argument("-k", dest="selector", help="run only tests whose name contains this")
    parser.add_argument("--token", help="the bearer token of every HTTP connection (a server with --auth-api-keys)")
    parser.add_argument(
        "--skip", action="append", default=[], metavar="NAME",
        help="leave out the test of this exact name (repeatable): a known gap of the server under test",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of check failures too")
    args = parser.parse_args()
    global TOKEN
    TOKEN = args.token
    if args.url is None and args.stdio_command is None:
        parser.error("give --url, --stdio-command, or both")
    stdio = None
    if args.stdio_command is not None:
        stdio = StdioServerParameters(
            command=args.stdio_command,
            args=["serve", "--stdio", "--example", "everything", "--store", args.stdio_store],
            env={"RUST_LOG": "warn", "NO_COLOR": "1"},
        )
    unknown = set(args.skip) - {name for name, _ in [*TESTS, *AUTH_TESTS, *STDIO_TESTS]}
    if unknown:
        parser.error(f"--skip names no test: {', '.join(sorted(unknown))}")
    return asyncio.run(run(args.url, stdio, args.label, args.selector, args.verbose, frozenset(args.skip)))


if __name__ == "__main__":
    sys.exit(main())
