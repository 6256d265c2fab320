//! `durable-mcp generate`: shell completions and man pages, both drawn from the same clap
//! definition as `--help`, so that neither can drift from the flags. The Debian package
//! installs them (scripts/package-deb.sh).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Command;
use clap_complete::Shell;

#[derive(clap::Parser, Debug)]
pub struct GenerateArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// Print the completion script of SHELL to stdout (bash: save it as
    /// /usr/share/bash-completion/completions/durable-mcp, or `source` it).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: Shell,
    },
    /// Write the man pages into DIR: durable-mcp.1, and durable-mcp-COMMAND.1 for each
    /// command.
    Man {
        /// The folder to write them into (created if missing).
        dir: PathBuf,
    },
}

/// Run `generate` for the command line `command` (the whole `durable-mcp` definition).
pub fn generate(args: GenerateArgs, mut command: Command) -> anyhow::Result<()> {
    match args.what {
        What::Completions { shell } => {
            let name = command.get_name().to_owned();
            clap_complete::generate(shell, &mut command, name, &mut std::io::stdout().lock());
            Ok(())
        }
        What::Man { dir } => {
            let written = man_pages(command, &dir)?;
            for path in written {
                println!("{}", path.display());
            }
            Ok(())
        }
    }
}

/// Write the page of `command` and one per visible subcommand into `dir`; the paths written.
fn man_pages(command: Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // Subcommands' pages are named `durable-mcp-serve` and so on, as git's are.
    let command = command.disable_help_subcommand(true);
    let name = command.get_name().to_owned();
    let mut written = vec![write_page(&command, dir, &name)?];
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        let page_name = format!("{name}-{}", sub.get_name());
        let sub = sub
            .clone()
            .name(page_name.clone())
            .version(command.get_version().unwrap_or_default().to_owned());
        written.push(write_page(&sub, dir, &page_name)?);
    }
    Ok(written)
}

fn write_page(command: &Command, dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("{name}.1"));
    let mut page = Vec::new();
    clap_mangen::Man::new(command.clone())
        .render(&mut page)
        .with_context(|| format!("rendering the page of {name}"))?;
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn man_pages_cover_every_visible_command_and_its_flags() {
        let dir = std::env::temp_dir().join(format!("durable-mcp-man-{}", std::process::id()));
        let written = man_pages(crate::Cli::command(), &dir).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(names.contains(&"durable-mcp.1".to_owned()), "{names:?}");
        assert!(
            names.contains(&"durable-mcp-serve.1".to_owned()),
            "{names:?}"
        );
        assert!(
            !names.iter().any(|n| n.contains("bench-server")),
            "a hidden command has no page: {names:?}"
        );
        let serve = std::fs::read_to_string(dir.join("durable-mcp-serve.1")).unwrap();
        // A flag as roff renders it (`\-\-store`), with its environment variable.
        assert!(serve.contains(r"\-\-store"), "{serve}");
        assert!(serve.contains("DURABLE_MCP_STORE"), "{serve}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bash_completion_names_the_commands() {
        let mut out = Vec::new();
        let mut command = crate::Cli::command();
        clap_complete::generate(Shell::Bash, &mut command, "durable-mcp", &mut out);
        let script = String::from_utf8(out).unwrap();
        assert!(
            script.contains(" durable-mcp\n"),
            "the script completes the command: {script}"
        );
        assert!(script.contains("serve"), "{script}");
        assert!(script.contains("--store"), "{script}");
    }
}
