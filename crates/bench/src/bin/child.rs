//! `durable-mcp-bench-child bench-server ...` and `durable-mcp-bench-child bench-load ...`:
//! the child processes of this crate's own tests and of `cargo bench -p durable-mcp-bench`
//! (`durable-mcp bench` runs the same subcommands of the `durable-mcp` binary).

use clap::Parser;
use durable_mcp_bench::child::{self, LoadArgs, ServerArgs};

/// A child process of a benchmark run.
#[derive(Debug, Parser)]
#[command(version, about)]
enum Child {
    /// A server under test: prints `LISTENING <addr>`, serves until stdin ends.
    BenchServer(ServerArgs),
    /// A closed-loop tools/call load: prints its result as JSON.
    BenchLoad(LoadArgs),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let outcome = match Child::parse() {
        Child::BenchServer(args) => child::serve(args).await,
        Child::BenchLoad(args) => child::load(&args).await.map(|line| println!("{line}")),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{error}");
            std::process::ExitCode::FAILURE
        }
    }
}
