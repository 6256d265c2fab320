//! `durable-mcp --version` names the git commit it was built from: `DURABLE_MCP_COMMIT`,
//! from `git` when the source is a checkout, else from the environment (a release build
//! from a tarball sets it), else "unknown".

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=DURABLE_MCP_COMMIT");
    let commit = std::env::var("DURABLE_MCP_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            // Rebuilt when HEAD moves: a checkout changes HEAD, a commit the branch's ref.
            let dir = git(&["rev-parse", "--path-format=absolute", "--git-dir"]);
            let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]);
            let reference = git(&["symbolic-ref", "-q", "HEAD"]);
            let watched = [
                dir.map(|d| format!("{d}/HEAD")),
                common.as_ref().map(|c| format!("{c}/packed-refs")),
                common.zip(reference).map(|(c, r)| format!("{c}/{r}")),
            ];
            // Only files that exist: cargo runs a script again every time for one that does not.
            for path in watched
                .into_iter()
                .flatten()
                .filter(|p| std::path::Path::new(p).exists())
            {
                println!("cargo:rerun-if-changed={path}");
            }
            git(&["rev-parse", "--short=10", "HEAD"])
        });
    println!(
        "cargo:rustc-env=DURABLE_MCP_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
}
