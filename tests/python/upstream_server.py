"""A small stdio MCP server on the official Python SDK (`mcp`, MCPServer, formerly FastMCP):
the upstream that crates/cli/tests/proxy.rs puts behind `durable-mcp proxy`.

Tools:
  lookup(key, delay_ms, marker)   read-only: "value of KEY" (after delay_ms)
  append(path, line, delay_ms, marker)
                                  not idempotent: appends LINE to the file PATH (the test's
                                  ledger of effects), then answers "appended"
  slow(steps, interval_ms)        read-only: one progress notification per step, then "done STEPS"
  slow_append(path, steps, interval_ms)
                                  not idempotent: appends "start" to PATH, then as slow
  count()                         not idempotent: this process's own call counter (state that
                                  lives in one child process: a session's child keeps it)
  client()                        read-only: "NAME VERSION", the client name and protocol
                                  version this process was initialized with
  confirm(key, marker, delay_ms)  read-only: asks the client (elicitation/create) "Look KEY
                                  up?" with a `note` field, then (after marker and delay_ms)
                                  answers "confirmed KEY: NOTE" or "declined KEY"

  change_tools()                  sends notifications/tools/list_changed (a list change this
                                  process reports while it serves the call), answers its pid
  watch(path)                     from now on, until it exits, this process reports
                                  notifications/tools/list_changed each time the content of
                                  the file PATH changes (a change of state shared by every
                                  process: each one that watches reports it); answers its pid

`marker`: when given, the tool first writes this process's pid to that file (so a test
can SIGKILL the child while the call runs). Run with `python upstream_server.py`.
"""

import asyncio
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel

server = MCPServer("proxy-upstream")
calls = 0

READ_ONLY = ToolAnnotations(readOnlyHint=True)
EFFECT = ToolAnnotations(readOnlyHint=False, idempotentHint=False, destructiveHint=False)


def mark(marker: str) -> None:
    if marker:
        tmp = marker + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(os.getpid()))
        os.replace(tmp, marker)


@server.tool(annotations=READ_ONLY)
async def lookup(key: str, delay_ms: int = 0, marker: str = "") -> str:
    """Look a key up (read-only)."""
    mark(marker)
    await asyncio.sleep(delay_ms / 1000)
    return f"value of {key}"


@server.tool(annotations=EFFECT)
async def append(path: str, line: str, delay_ms: int = 0, marker: str = "") -> str:
    """Append a line to a file (an effect: not idempotent)."""
    with open(path, "a") as f:
        f.write(line + "\n")
    mark(marker)
    await asyncio.sleep(delay_ms / 1000)
    return "appended"


@server.tool(annotations=READ_ONLY)
async def slow(steps: int, interval_ms: int, ctx: Context) -> str:
    """Report progress steps/steps, one per interval (read-only)."""
    for step in range(1, steps + 1):
        await asyncio.sleep(interval_ms / 1000)
        await ctx.report_progress(step, steps)
    return f"done {steps}"


@server.tool(annotations=EFFECT)
async def slow_append(path: str, steps: int, interval_ms: int, ctx: Context) -> str:
    """Append "start" to a file, then report progress as `slow` (not idempotent)."""
    with open(path, "a") as f:
        f.write("start\n")
    for step in range(1, steps + 1):
        await asyncio.sleep(interval_ms / 1000)
        await ctx.report_progress(step, steps)
    return f"done {steps}"


@server.tool(annotations=EFFECT)
def count() -> str:
    """This process's call counter."""
    global calls
    calls += 1
    return f"{calls} in {os.getpid()}"


@server.tool(annotations=READ_ONLY)
async def client(ctx: Context) -> str:
    """The client info and protocol version this process was initialized with."""
    params = ctx.session.client_params
    return f"{params.client_info.name} {params.protocol_version}"


class Confirmation(BaseModel):
    note: str


@server.tool(annotations=READ_ONLY)
async def confirm(key: str, ctx: Context, marker: str = "", delay_ms: int = 0) -> str:
    """Ask the client to confirm a lookup, then answer with its note (read-only)."""
    answer = await ctx.elicit(f"Look {key} up?", Confirmation)
    mark(marker)
    await asyncio.sleep(delay_ms / 1000)
    if answer.action == "accept":
        return f"confirmed {key}: {answer.data.note}"
    return f"{answer.action} {key}"


@server.tool(annotations=EFFECT)
async def change_tools(ctx: Context) -> str:
    """Report that the tool list changed."""
    await ctx.session.send_tool_list_changed()
    return str(os.getpid())


watching: set[str] = set()


async def watch_file(path: str, session) -> None:
    def content() -> str:
        try:
            with open(path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    seen = content()
    while True:
        await asyncio.sleep(0.05)
        now = content()
        if now != seen:
            seen = now
            await session.send_tool_list_changed()


@server.tool(annotations=EFFECT)
async def watch(path: str, ctx: Context) -> str:
    """Report a tool list change whenever the file PATH changes."""
    if path not in watching:
        watching.add(path)
        asyncio.get_running_loop().create_task(watch_file(path, ctx.session))
    return str(os.getpid())


async def main() -> None:
    # `server.run("stdio")` with `tools.listChanged: true` declared (MCPServer declares it
    # false and has no option for it; the low-level server takes NotificationOptions).
    from mcp.server.lowlevel.server import NotificationOptions
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server
    options = lowlevel.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, options)


if __name__ == "__main__":
    asyncio.run(main())
