# Sourced by the package tests (deb-test.sh, npm-test.sh, wheel-test.sh): a free loopback
# port, waiting for /readyz, and one legacy-era tools/call over curl.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_ready PORT LOG: until GET /readyz answers 200 (15 s at most); on failure LOG is shown.
wait_ready() {
    for _ in $(seq 150); do curl -sf "http://127.0.0.1:$1/readyz" >/dev/null && return 0; sleep 0.1; done
    cat "$2" >&2
    return 1
}

# call_tool PORT TOOL ARGUMENTS_JSON: initialize a 2025-11-25 session, then call TOOL in
# it; prints the call's response body.
call_tool() {
    local url="http://127.0.0.1:$1/mcp" headers session
    headers=$(mktemp)
    local post=(curl -sS -H 'content-type: application/json' -H 'accept: application/json, text/event-stream')
    "${post[@]}" -D "$headers" --data '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"package-test","version":"1"}}}' "$url" >/dev/null
    session=$(sed -n 's/^mcp-session-id: *\(.*\)\r$/\1/Ip' "$headers")
    rm -f "$headers"
    [ -n "$session" ] || { echo "call_tool: initialize gave no session" >&2; return 1; }
    "${post[@]}" -H "mcp-session-id: $session" --data '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$url" >/dev/null
    "${post[@]}" -H "mcp-session-id: $session" --data "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"$2\",\"arguments\":$3}}" "$url"
}
