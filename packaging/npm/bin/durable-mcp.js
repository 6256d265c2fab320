#!/usr/bin/env node
// The `durable-mcp` command of the npm package: runs the native binary shipped beside this
// file with the same arguments, standard streams and exit status, and passes SIGINT and
// SIGTERM on (the server drains on SIGTERM).
"use strict";
const { spawn } = require("node:child_process");
const path = require("node:path");

const binary = path.join(__dirname, "..", "native", "durable-mcp");
const child = spawn(binary, process.argv.slice(2), { stdio: "inherit" });
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => child.kill(signal));
}
child.on("error", (error) => {
  console.error(`durable-mcp: cannot run ${binary}: ${error.message}`);
  process.exit(127);
});
child.on("exit", (code, signal) => {
  if (signal) {
    process.kill(process.pid, signal);
  } else {
    process.exit(code ?? 1);
  }
});
