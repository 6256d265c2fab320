// Drives a running durable-mcp "everything" server with the official TypeScript SDK v2
// client (`@modelcontextprotocol/client`), pinned to protocol 2026-07-28 (the modern era:
// `server/discover`, no session, per-request `_meta`), through the SDK's own Client and
// StreamableHTTPClientTransport only (no raw HTTP).
//
//   node tests/typescript/client_v2.mjs --url URL --bin PATH --work DIR [--label NAME] [-k SUBSTRING]
//
// Run by scripts/typescript-client-test.sh. Covers `server/discover`, tools, prompts,
// resources, SEP-2322 multi round-trip requests (`input_required` results answered by the
// SDK's driver through the registered elicitation / sampling / roots handlers, and by hand
// with `allowInputRequired`, echoing `requestState`), durable questions asked through the
// durable context, per-request log levels, progress, `subscriptions/listen`, SEP-2243
// `Mcp-Param-*` headers, and what a client without the Tasks extension gets from
// task-supporting and task-required tools.
//
// What this client version does not speak (so is not tested here): tasks. 2.4.0 has no
// tasks runtime: `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel` and
// `notifications/tasks/status` are excluded from its typed request surface, it cannot
// declare the `io.modelcontextprotocol/tasks` extension through an API, and it rejects a
// `resultType: "task"` result as a result kind it cannot consume.

import {
    Client,
    LOG_LEVEL_META_KEY,
    ProtocolError,
    SdkError,
    StreamableHTTPClientTransport
} from '@modelcontextprotocol/client';

import { ROOTS, check, formContent, onlyText, run, test, waitFor } from './harness.mjs';

const MODERN_VERSION = '2026-07-28';
const SAMPLING_REPLY = 'Paris, from the TypeScript SDK v2';

/** What the clients declare unless a test says otherwise. */
const CAPABILITIES = { elicitation: { form: {} }, sampling: {}, roots: { listChanged: true } };

/** A modern-era client with the three input handlers registered; `calls` records them. */
function newClient(options = {}) {
    const calls = { elicitation: [], sampling: [], roots: 0 };
    const client = new Client(
        { name: 'durable-mcp-ts-client-v2-test', version: '1.0.0' },
        {
            capabilities: CAPABILITIES,
            versionNegotiation: { mode: { pin: MODERN_VERSION } },
            ...options
        }
    );
    const declared = options.capabilities ?? CAPABILITIES;
    if (declared.elicitation) {
        client.setRequestHandler('elicitation/create', async request => {
            calls.elicitation.push(request.params);
            return { action: 'accept', content: formContent(request.params.requestedSchema) };
        });
    }
    if (declared.sampling) {
        client.setRequestHandler('sampling/createMessage', async request => {
            calls.sampling.push(request.params);
            return { role: 'assistant', content: { type: 'text', text: SAMPLING_REPLY }, model: 'ts-client-v2-model', stopReason: 'endTurn' };
        });
    }
    if (declared.roots) {
        client.setRequestHandler('roots/list', async () => {
            calls.roots++;
            return { roots: ROOTS };
        });
    }
    return { client, calls };
}

/** Runs `fn(client, calls)` on a fresh connection (`server/discover` at connect), then closes it. */
async function withClient(url, fn, options) {
    const { client, calls } = newClient(options);
    await client.connect(new StreamableHTTPClientTransport(url));
    try {
        return await fn(client, calls);
    } finally {
        await client.close();
    }
}

/** Calls a tool and returns the error it must fail with. */
async function callFails(client, params, options) {
    try {
        const result = await client.callTool(params, options);
        throw new Error(`${params.name} did not fail: ${JSON.stringify(result)}`);
    } catch (error) {
        if (error instanceof ProtocolError || error instanceof SdkError) return error;
        throw error;
    }
}

// --------------------------------------------------------------- discover, tools --

test('discover', async ({ url }) => {
    await withClient(url, async client => {
        check(client.getProtocolEra() === 'modern', `era ${client.getProtocolEra()}`);
        check(client.getNegotiatedProtocolVersion() === MODERN_VERSION, `version ${client.getNegotiatedProtocolVersion()}`);
        const discovered = client.getDiscoverResult();
        check(discovered?.supportedVersions?.includes(MODERN_VERSION), `server/discover ${JSON.stringify(discovered)}`);
        check(client.getServerVersion()?.name, `serverInfo ${JSON.stringify(client.getServerVersion())}`);
        const caps = client.getServerCapabilities();
        check(caps?.tools && caps?.prompts && caps?.resources, `capabilities ${JSON.stringify(caps)}`);
    });
});

test('tools_list_and_call', async ({ url }) => {
    await withClient(url, async client => {
        const { tools } = await client.listTools();
        const names = tools.map(t => t.name);
        for (const expected of ['test_simple_text', 'test_input_required_result_elicitation', 'consult', 'ask', 'test_custom_header']) {
            check(names.includes(expected), `tools/list lacks ${expected}: ${names.join(' ')}`);
        }
        check(new Set(names).size === names.length, `duplicate tool names: ${names.join(' ')}`);
        const simple = await client.callTool({ name: 'test_simple_text', arguments: {} });
        check(onlyText(simple) === 'This is a simple text response for testing.', `result ${JSON.stringify(simple)}`);
        const failing = await client.callTool({ name: 'test_error_handling', arguments: {} });
        check(failing.isError === true, `test_error_handling ${JSON.stringify(failing)}`);
        const unknown = await callFails(client, { name: 'no_such_tool', arguments: {} });
        check(unknown.code !== undefined, `unknown tool error ${unknown}`);
    });
});

test('sep2243_param_header', async ({ url }) => {
    await withClient(url, async client => {
        await client.listTools(); // the SDK mirrors x-mcp-header arguments from the cached tool list
        for (const value of ['plain', 'héllo wörld', ' padded ', 'line\nbreak']) {
            const result = await client.callTool({ name: 'test_custom_header', arguments: { value } });
            check(onlyText(result) === value, `echo of ${JSON.stringify(value)}: ${JSON.stringify(result)}`);
        }
    });
});

test('progress_and_log_level', async ({ url }) => {
    await withClient(url, async client => {
        const progress = [];
        const result = await client.callTool({ name: 'test_tool_with_progress', arguments: {} }, { onprogress: p => progress.push(p.progress) });
        check(onlyText(result) === 'Progress test completed', `result ${JSON.stringify(result)}`);
        check(JSON.stringify(progress) === '[0,50,100]', `progress ${JSON.stringify(progress)}`);
        const logs = [];
        client.setNotificationHandler('notifications/message', n => logs.push(n.params));
        await client.callTool({ name: 'test_logging_tool', arguments: {} });
        check(logs.length === 0, `a log message without a requested level: ${JSON.stringify(logs)}`);
        await client.callTool({ name: 'test_logging_tool', arguments: {}, _meta: { [LOG_LEVEL_META_KEY]: 'info' } });
        check(logs.length === 1 && logs[0].data === 'test_logging_tool executed', `logs at level info: ${JSON.stringify(logs)}`);
    });
});

// ------------------------------------------------------------ SEP-2322 input rounds --

test('mrtr_elicitation_through_the_driver', async ({ url }) => {
    await withClient(url, async (client, calls) => {
        const result = await client.callTool({ name: 'test_input_required_result_elicitation', arguments: {} });
        check(calls.elicitation.length === 1, `elicitation handler called ${calls.elicitation.length} times`);
        check(onlyText(result) === 'Hello, Ada!', `result ${JSON.stringify(result)}`);
    });
});

test('mrtr_multi_round', async ({ url }) => {
    await withClient(url, async (client, calls) => {
        const result = await client.callTool({ name: 'test_input_required_result_multi_round', arguments: {} });
        check(calls.elicitation.length === 2, `elicitation handler called ${calls.elicitation.length} times`);
        const text = onlyText(result);
        check(text.includes('Ada') && text.includes('teal'), `result ${text}`);
    });
});

test('mrtr_sampling_and_roots', async ({ url }) => {
    await withClient(url, async (client, calls) => {
        const sampled = await client.callTool({ name: 'test_input_required_result_sampling', arguments: {} });
        check(calls.sampling.length === 1 && onlyText(sampled).includes(SAMPLING_REPLY), `sampling ${JSON.stringify(sampled)}`);
        const roots = await client.callTool({ name: 'test_input_required_result_list_roots', arguments: {} });
        check(calls.roots === 1 && onlyText(roots).includes('file:///work/project-a'), `roots ${JSON.stringify(roots)}`);
        const both = await client.callTool({ name: 'test_input_required_result_multiple_inputs', arguments: {} });
        check(!both.isError, `multiple inputs ${JSON.stringify(both)}`);
    });
});

test('d12_request_state_echoed_by_hand_tampered_rejected', async ({ url }) => {
    await withClient(url, async (client, calls) => {
        const params = { name: 'test_input_required_result_request_state', arguments: {} };
        const first = await client.callTool(params, { allowInputRequired: true });
        check(first.resultType === 'input_required', `first round ${JSON.stringify(first)}`);
        check(typeof first.requestState === 'string' && first.requestState.length > 0, `no requestState: ${JSON.stringify(first)}`);
        const [key, request] = Object.entries(first.inputRequests ?? {})[0] ?? [];
        check(key && request?.method === 'elicitation/create', `inputRequests ${JSON.stringify(first.inputRequests)}`);
        const inputResponses = { [key]: { action: 'accept', content: formContent(request.params.requestedSchema) } };
        const second = await client.callTool({ ...params, inputResponses, requestState: first.requestState }, { allowInputRequired: true });
        check(onlyText(second).endsWith('state-ok'), `second round ${JSON.stringify(second)}`);
        // D12: a changed requestState is rejected, not trusted.
        const forged = first.requestState.slice(0, -4) + (first.requestState.endsWith('AAAA') ? 'BBBB' : 'AAAA');
        const rejected = await callFails(client, { ...params, inputResponses, requestState: forged }, { allowInputRequired: true });
        check(rejected.code === -32602, `tampered requestState: ${rejected.code} ${rejected.message}`);
        check(calls.elicitation.length === 0, 'the driver answered although the test did');
    });
});

test('mrtr_missing_capability', async ({ url }) => {
    const { client } = newClient({ capabilities: { elicitation: { form: {} } } });
    await client.connect(new StreamableHTTPClientTransport(url));
    try {
        const error = await callFails(client, { name: 'test_missing_capability', arguments: {} });
        check(error.code === -32021, `without sampling: ${error.code} ${error.message}`);
    } finally {
        await client.close();
    }
});

test('d9_durable_questions_as_input_rounds', async ({ url }) => {
    await withClient(url, async (client, calls) => {
        const consulted = await client.callTool({ name: 'consult', arguments: { prompt: 'Which project?' } });
        check(calls.roots === 1 && calls.sampling.length === 1, `roots ${calls.roots}, sampling ${calls.sampling.length}`);
        const value = JSON.parse(onlyText(consulted));
        check(value.roots === ROOTS.length && value.model === 'ts-client-v2-model' && value.text === SAMPLING_REPLY, `consult ${JSON.stringify(value)}`);
        const asked = await client.callTool({ name: 'ask', arguments: { question: 'The answer?' } });
        check(calls.elicitation.length === 1 && onlyText(asked) === 'forty-two', `ask ${JSON.stringify(asked)}`);
    });
});

// ------------------------------------------------------------ prompts, resources --

test('prompts_and_resources', async ({ url }) => {
    await withClient(url, async client => {
        const { prompts } = await client.listPrompts();
        check(prompts.some(p => p.name === 'test_prompt_with_arguments'), `prompts ${prompts.map(p => p.name)}`);
        const prompt = await client.getPrompt({ name: 'test_prompt_with_arguments', arguments: { arg1: 'one', arg2: 'two' } });
        check(prompt.messages[0]?.content?.text?.includes("arg1='one'"), `prompt ${JSON.stringify(prompt)}`);
        const { resources } = await client.listResources();
        check(resources.some(r => r.uri === 'test://static-text'), `resources ${resources.map(r => r.uri)}`);
        const read = await client.readResource({ uri: 'test://template/7/data' });
        check(read.contents[0]?.text?.includes('7'), `read ${JSON.stringify(read)}`);
        const { resourceTemplates } = await client.listResourceTemplates();
        check(resourceTemplates.some(t => t.uriTemplate === 'test://template/{id}/data'), `templates ${JSON.stringify(resourceTemplates)}`);
    });
});

test('subscriptions_listen', async ({ url }) => {
    await withClient(url, async client => {
        const seen = { tools: 0, updated: [] };
        client.setNotificationHandler('notifications/tools/list_changed', () => seen.tools++);
        client.setNotificationHandler('notifications/resources/updated', n => seen.updated.push(n.params.uri));
        const subscription = await client.listen({ toolsListChanged: true, resourceSubscriptions: ['test://watched-resource'] });
        try {
            check(subscription.honoredFilter.toolsListChanged === true, `honored ${JSON.stringify(subscription.honoredFilter)}`);
            await client.callTool({ name: 'test_trigger_tool_change', arguments: {} });
            await waitFor('notifications/tools/list_changed on the listen stream', () => seen.tools >= 1);
            await client.callTool({ name: 'test_trigger_tool_change', arguments: {} });
            await waitFor('the second tools/list_changed', () => seen.tools >= 2);
            await client.callTool({ name: 'trigger_resource_update', arguments: {} });
            await waitFor('notifications/resources/updated on the listen stream', () => seen.updated.length >= 1);
            check(seen.updated[0] === 'test://watched-resource', `updated ${JSON.stringify(seen.updated)}`);
        } finally {
            await subscription.close();
        }
        check((await subscription.closed) === 'local', 'the subscription did not close locally');
    });
});

// ----------------------------------------------------------- tasks (not spoken) --

test('task_tools_without_the_tasks_extension', async ({ url }) => {
    await withClient(url, async client => {
        // Task support "optional": run synchronously for a client that cannot use tasks.
        const result = await client.callTool({ name: 'slow_compute', arguments: { seconds: 1 } });
        check(onlyText(result).includes('finished'), `slow_compute ${JSON.stringify(result)}`);
        // Task support "required": refused with the capability the client lacks.
        const error = await callFails(client, { name: 'failing_job', arguments: {} });
        check(JSON.stringify(error.data ?? {}).includes('io.modelcontextprotocol/tasks'), `failing_job: ${error.code} ${error.message} ${JSON.stringify(error.data)}`);
    });
});

await run();
