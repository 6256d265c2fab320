// The shared test harness of the TypeScript SDK clients (sdk_v1.mjs, client_v2.mjs).
//
// No test framework: every check is a named async function registered with `test`; `run`
// executes them in order, each under a timeout, and prints one `PASS name` / `FAIL name`
// line per test (with the reason), then `summary passed=N failed=M`, the same lines as
// tests/python/test_client.py, which scripts/typescript-client-test.sh adds up.
//
// Command line of a client file:
//   node <file> --url URL --bin PATH --work DIR [--label NAME] [-k SUBSTRING]
// --bin and --work are for tests that start servers of their own (kill and restart).
//
// A test may end with `skip(reason)` when it ran into a defect the coordinator has listed as
// being fixed elsewhere: it then prints `SKIP name: reason` and counts as neither passed nor
// failed, unless the environment variable the reason names is set to 1, which makes it fail.

import { spawn } from 'node:child_process';
import { mkdirSync, openSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { parseArgs } from 'node:util';

/** Seconds one test may take before it fails. */
export const TEST_TIMEOUT_MS = 60_000;

/** Answers a form elicitation gets, by schema property name. */
/** The roots both clients answer `roots/list` with. */
export const ROOTS = [
    { uri: 'file:///work/project-a', name: 'project-a' },
    { uri: 'file:///work/project-b', name: 'project-b' }
];

export const FORM_ANSWERS = {
    username: 'ada_lovelace',
    email: 'ada@example.org',
    name: 'Ada',
    user_name: 'Ada',
    color: 'teal',
    answer: 'forty-two',
    ok: true,
    confirm: true
};

const TESTS = [];

/** Registers a test under `name`. */
export function test(name, fn) {
    TESTS.push({ name, fn });
}

/** A failed check. */
export class Check extends Error {}

/** A test that ran into a defect known to be fixed elsewhere (see the file header). */
export class Skip extends Error {
    constructor(reason, flag) {
        super(reason);
        this.flag = flag;
    }
}

/** Fails the test with `message` unless `condition` holds. */
export function check(condition, message) {
    if (!condition) throw new Check(message);
}

/**
 * Ends the test as skipped because of the known defect `reason`; with `flag`=1 in the
 * environment the test fails instead (how the coordinator re-enables it once fixed).
 */
export function knownDefect(flag, reason) {
    if (process.env[flag] === '1') throw new Check(`${reason} (${flag}=1: not skipped)`);
    throw new Skip(`${reason}; set ${flag}=1 to run it as a failure`, flag);
}

/** Content of a form elicitation answer: FORM_ANSWERS for each property of the schema. */
export function formContent(requestedSchema) {
    const properties = requestedSchema?.properties ?? {};
    return Object.fromEntries(
        Object.entries(properties).map(([key, prop]) => {
            if (key in FORM_ANSWERS) return [key, FORM_ANSWERS[key]];
            return [key, prop?.type === 'boolean' ? true : prop?.type === 'number' || prop?.type === 'integer' ? 1 : `value-for-${key}`];
        })
    );
}

/** The text of the only text block of a tool result (which must not be an error). */
export function onlyText(result) {
    check(!result.isError, `tool returned isError: ${JSON.stringify(result)}`);
    const texts = (result.content ?? []).filter(block => block.type === 'text').map(block => block.text);
    check(texts.length === 1, `expected exactly one text block, got ${JSON.stringify(result.content)}`);
    return texts[0];
}

/** Resolves once `condition()` is true; fails with `what` after `timeoutMs`. */
export async function waitFor(what, condition, timeoutMs = 10_000) {
    const deadline = Date.now() + timeoutMs;
    while (!(await condition())) {
        if (Date.now() > deadline) throw new Check(`timed out after ${timeoutMs} ms waiting for ${what}`);
        await sleep(20);
    }
}

export const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

/** A free TCP port on 127.0.0.1 (the kernel's choice). */
export function freePort() {
    return new Promise((resolve, reject) => {
        const server = net.createServer();
        server.once('error', reject);
        server.listen(0, '127.0.0.1', () => {
            const { port } = server.address();
            server.close(() => resolve(port));
        });
    });
}

function portOpen(port) {
    return new Promise(resolve => {
        const socket = net.connect(port, '127.0.0.1');
        socket.once('connect', () => {
            socket.destroy();
            resolve(true);
        });
        socket.once('error', () => resolve(false));
    });
}

/**
 * A `durable-mcp serve --example everything` process of the test's own, on `port` with
 * `store`, its output appended to `<work>/<name>.log`. Resolves once the port accepts.
 * With `upstream` (a command line), a `durable-mcp proxy` in front of it instead.
 */
export async function startServer({ bin, work, name, port, store, upstream }) {
    mkdirSync(work, { recursive: true });
    const logFile = path.join(work, `${name}.log`);
    const out = openSync(logFile, 'a');
    const served = upstream ? ['proxy'] : ['serve', '--example', 'everything'];
    const after = upstream ? ['--', ...upstream] : [];
    const child = spawn(bin, [...served, '--listen', `127.0.0.1:${port}`, '--store', store, ...after], {
        stdio: ['ignore', out, out],
        env: { ...process.env, NO_COLOR: '1' }
    });
    const exited = new Promise(resolve => child.once('exit', (code, signal) => resolve({ code, signal })));
    let gone = false;
    exited.then(() => (gone = true));
    await waitFor(`the server on port ${port} (log ${logFile})`, async () => {
        check(!gone, `the server exited before it listened on port ${port} (log ${logFile})`);
        return portOpen(port);
    });
    return {
        url: new URL(`http://127.0.0.1:${port}/mcp`),
        logFile,
        /** Sends `signal` and resolves once the process has exited. */
        async stop(signal = 'SIGTERM') {
            if (!gone) child.kill(signal);
            return exited;
        }
    };
}

/** Parses the command line, runs the registered tests, prints the summary, exits. */
export async function run() {
    const { values } = parseArgs({
        options: {
            url: { type: 'string' },
            bin: { type: 'string' },
            work: { type: 'string' },
            label: { type: 'string', default: '' },
            k: { type: 'string', short: 'k' }
        }
    });
    if (!values.url || !values.bin || !values.work) {
        console.error('usage: node <file> --url URL --bin PATH --work DIR [--label NAME] [-k SUBSTRING]');
        process.exit(2);
    }
    const env = { url: new URL(values.url), bin: values.bin, work: values.work };
    const label = values.label ? `[${values.label}] ` : '';
    let passed = 0;
    let failed = 0;
    for (const { name, fn } of TESTS) {
        if (values.k && !name.includes(values.k)) continue;
        const started = Date.now();
        let timer;
        const timeout = new Promise((_, reject) => {
            timer = setTimeout(() => reject(new Check(`timed out after ${TEST_TIMEOUT_MS} ms`)), TEST_TIMEOUT_MS);
        });
        try {
            await Promise.race([fn(env), timeout]);
            passed++;
            console.log(`PASS ${label}${name} (${Date.now() - started} ms)`);
        } catch (error) {
            if (error instanceof Skip) {
                console.log(`SKIP ${label}${name}: ${error.message}`);
            } else {
                failed++;
                const reason = error instanceof Check ? error.message : (error?.stack ?? String(error));
                console.log(`FAIL ${label}${name}: ${reason}`);
            }
        } finally {
            clearTimeout(timer);
        }
    }
    console.log(`summary passed=${passed} failed=${failed}`);
    // Open transports or timers of a failed test must not keep the process alive.
    process.exit(failed === 0 ? 0 : 1);
}
