// Both official TypeScript SDK clients through `durable-mcp proxy` in front of the official
// `@modelcontextprotocol/server-everything` (stdio): `@modelcontextprotocol/sdk` (v1, the
// legacy era, 2025-11-25, a session and its own upstream process) and
// `@modelcontextprotocol/client` (v2, 2026-07-28, the proxy's pool): tools/list, a call, a
// long-running call's progress; v1 also resumes a call with its `resumptionToken` after the
// proxy is SIGKILLed and restarted on the same SQLite file.
//
//   PROXY_UPSTREAM='["node", ".../server-everything/dist/index.js", "stdio"]' \
//   node tests/typescript/proxy_clients.mjs --url URL --bin PATH --work DIR [--label NAME] [-k SUBSTRING]
//
// URL is a running proxy in front of that upstream; PROXY_UPSTREAM is the upstream's
// command line, for the test that starts proxies of its own. Run by
// scripts/typescript-client-test.sh.

import path from 'node:path';

import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, ProgressNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';

import { check, freePort, onlyText, run, startServer, test, waitFor } from './harness.mjs';

const LONG = 'trigger-long-running-operation';

/** server-everything's tools every client must find through the proxy. */
function checkTools(tools) {
    const names = tools.map(t => t.name);
    for (const expected of ['echo', 'get-sum', LONG]) {
        check(names.includes(expected), `tools/list lacks ${expected}: ${names.join(' ')}`);
    }
    const long = tools.find(t => t.name === LONG);
    check(long.annotations?.readOnlyHint === true, `the upstream's annotations: ${JSON.stringify(long)}`);
}

/** The checks of a long-running call's result and progress (`steps` steps). */
function checkLong(result, progress, steps) {
    check(onlyText(result).startsWith('Long running operation completed'), `result ${JSON.stringify(result)}`);
    const expected = Array.from({ length: steps }, (_, i) => i + 1);
    check(JSON.stringify(progress) === JSON.stringify(expected), `progress ${JSON.stringify(progress)}`);
}

async function withV1(url, fn) {
    const client = new ClientV1({ name: 'durable-mcp-proxy-ts-v1', version: '1.0.0' }, { capabilities: {} });
    const transport = new TransportV1(url);
    await client.connect(transport);
    try {
        return await fn(client, transport);
    } finally {
        await client.close();
    }
}

test('v1_tools_call_and_progress_through_the_proxy', async ({ url }) => {
    await withV1(url, async (client, transport) => {
        check(transport.sessionId, 'no Mcp-Session-Id after initialize');
        checkTools((await client.listTools()).tools);
        const echoed = await client.callTool({ name: 'echo', arguments: { message: 'through the proxy' } });
        check(onlyText(echoed).includes('through the proxy'), `echo ${JSON.stringify(echoed)}`);
        const progress = [];
        const result = await client.callTool({ name: LONG, arguments: { duration: 1, steps: 3 } }, CallToolResultSchema, {
            onprogress: p => progress.push(p.progress)
        });
        checkLong(result, progress, 3);
    });
});

test('v2_tools_call_and_progress_through_the_proxy', async ({ url }) => {
    const client = new ClientV2({ name: 'durable-mcp-proxy-ts-v2', version: '1.0.0' }, { capabilities: {}, versionNegotiation: { mode: { pin: '2026-07-28' } } });
    await client.connect(new TransportV2(url));
    try {
        check(client.getProtocolEra() === 'modern', `era ${client.getProtocolEra()}`);
        checkTools((await client.listTools()).tools);
        const sum = await client.callTool({ name: 'get-sum', arguments: { a: 2, b: 3 } });
        check(onlyText(sum).includes('5'), `get-sum ${JSON.stringify(sum)}`);
        const progress = [];
        const result = await client.callTool({ name: LONG, arguments: { duration: 1, steps: 3 } }, { onprogress: p => progress.push(p.progress) });
        checkLong(result, progress, 3);
    } finally {
        await client.close();
    }
});

/**
 * D1, D3, D7 through the proxy: the proxy is SIGKILLed during a long-running (read-only)
 * call and restarted on the same SQLite file; it sends the call again to a fresh upstream
 * process, and the client's new transport on the same session resumes the call's stream
 * with the SDK's `resumptionToken`: it gets the progress it missed, each step once, and
 * the one result.
 */
test('v1_resume_with_resumption_token_after_the_proxy_is_sigkilled', async ({ bin, work }) => {
    const upstream = JSON.parse(process.env.PROXY_UPSTREAM ?? 'null');
    check(Array.isArray(upstream), 'PROXY_UPSTREAM (the upstream command line as a JSON array) is not set');
    const dir = path.join(work, 'proxy-resume');
    const store = `sqlite:${path.join(dir, 'proxy.db')}`;
    const port = await freePort();
    const STEPS = 6;
    const call = { method: 'tools/call', params: { name: LONG, arguments: { duration: 3, steps: STEPS } } };
    let server = await startServer({ bin, work: dir, name: 'proxy-1', port, store, upstream });
    let second;
    try {
        const first = new ClientV1({ name: 'durable-mcp-proxy-ts-v1', version: '1.0.0' }, { capabilities: {} });
        const transport = new TransportV1(server.url);
        await first.connect(transport);
        const sessionId = transport.sessionId;
        let token;
        const before = [];
        const pending = first
            .request(call, CallToolResultSchema, { onprogress: p => before.push(p.progress), onresumptiontoken: t => (token = t), timeout: 120_000 })
            .then(
                result => ({ result }),
                error => ({ error })
            );
        await waitFor('progress of step 2 before the kill', () => before.length >= 2, 20_000);
        await server.stop('SIGKILL');
        await transport.close();
        const outcome = await pending;
        check(outcome.error, `the call completed although the proxy was killed: ${JSON.stringify(outcome.result)}`);
        check(token, 'onresumptiontoken never reported an event id');

        server = await startServer({ bin, work: dir, name: 'proxy-2', port, store, upstream });
        second = new ClientV1({ name: 'durable-mcp-proxy-ts-v1', version: '1.0.0' }, { capabilities: {} });
        const after = [];
        second.setNotificationHandler(ProgressNotificationSchema, n => after.push(n.params.progress));
        const resumed = new TransportV1(server.url, { sessionId });
        await second.connect(resumed);
        resumed.setProtocolVersion('2025-11-25');
        const result = await second.request(call, CallToolResultSchema, { resumptionToken: token, timeout: 60_000 });
        checkLong(result, [...before, ...after], STEPS);
    } finally {
        await second?.close().catch(() => {});
        await server.stop('SIGTERM');
    }
});

await run();
