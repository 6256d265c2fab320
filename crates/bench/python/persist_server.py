"""The Python baseline of `durable-mcp-bench`.

The official Python MCP SDK's `MCPServer` with one tool, `test_simple_text` (the same
constant text as durable-mcp's `everything` example), served over Streamable HTTP by
mcp-persist's `with_persistence` with its SQLite event store and durable sessions, on
uvicorn (one process, the SDK's own dependencies, no extras).

    python persist_server.py --listen 127.0.0.1:0 --db /tmp/x.db
    python persist_server.py --check

It binds first and prints `LISTENING <host>:<port>` on stdout, then serves until its
stdin ends (the bench closed it, or died), SIGINT or SIGTERM. `--check` only builds the
app (the setup script's smoke test). The bench embeds this file and writes it into its
scratch directory; scripts/setup-bench.sh installs the venv that runs it.
"""

import argparse
import asyncio
import logging
import socket
import sys
import threading

TEXT = "This is a simple text response for testing."


def build_app(db: str):
    from mcp.server.mcpserver import MCPServer
    from mcp_persist import with_persistence

    mcp = MCPServer(name="durable-mcp-bench-python", log_level="WARNING")

    @mcp.tool(description="A simple text response", structured_output=False)
    def test_simple_text() -> str:
        return TEXT

    # ttl: streams expire after an hour, as durable-mcp's default `max_stream_age`.
    return with_persistence(mcp, backend="sqlite", url=db, ttl=3600, durable_sessions=True, warn_on_bypass=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: any free port)")
    parser.add_argument("--db", default="persist-bench.db", help="the SQLite file of the event store")
    parser.add_argument("--check", action="store_true", help="build the app and exit")
    args = parser.parse_args()

    app = build_app(args.db)
    if args.check:
        print("ok", file=sys.stderr)
        return 0

    import uvicorn

    logging.basicConfig(level=logging.WARNING)
    host, _, port = args.listen.rpartition(":")
    # IPPROTO_TCP explicitly, as uvicorn's own bind gets it from getaddrinfo: asyncio sets
    # TCP_NODELAY only on accepted sockets whose protocol says TCP (with 0 it does not, and
    # Nagle's algorithm with delayed ACKs adds ~40 ms to every keep-alive round trip).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host or "127.0.0.1", int(port)))
    sock.listen(1024)
    bound_host, bound_port = sock.getsockname()[:2]

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))

    def stop_when_stdin_ends() -> None:
        try:
            while sys.stdin.buffer.read(64):
                pass
        finally:
            server.should_exit = True

    threading.Thread(target=stop_when_stdin_ends, daemon=True).start()
    print(f"LISTENING {bound_host}:{bound_port}", flush=True)
    asyncio.run(server.serve(sockets=[sock]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
