//! `cargo bench -p durable-mcp-bench`: a short run of what `durable-mcp-bench` measures
//! (store appends and replays; `tools/call` over HTTP against the baselines, each server
//! and load generator in its own process; memory with idle sessions), printed as
//! markdown. Extra stores: `DURABLE_MCP_BENCH_STORES=postgres://...,redis://...`. The
//! durable-mcp servers are the `durable-mcp` binary's, beside `durable-mcp-bench` in the
//! target directory: `cargo build --release -p durable-mcp-cli` first.

use std::path::PathBuf;

use durable_mcp_bench::{BenchConfig, Executables, run};

fn main() {
    let mut config = BenchConfig::quick(Executables::beside(PathBuf::from(env!(
        "CARGO_BIN_EXE_durable-mcp-bench"
    ))));
    config.command_line = Some("cargo bench -p durable-mcp-bench".to_owned());
    if let Ok(stores) = std::env::var("DURABLE_MCP_BENCH_STORES") {
        config.stores = stores
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start the runtime: {error}");
            std::process::exit(1);
        }
    };
    match runtime.block_on(run(&config, |step| eprintln!("bench: {step}"))) {
        Ok(report) => {
            println!("{}", report.to_markdown());
            if !report.failures.is_empty() {
                std::process::exit(1);
            }
        }
        Err(error) => {
            eprintln!("benchmark failed: {error}");
            std::process::exit(1);
        }
    }
}
