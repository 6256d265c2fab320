//! `serve --config FILE` (or `DURABLE_MCP_CONFIG`): a TOML file with the flags of `serve`,
//! under their long names (`lease-ms = 5000`, `allow-host = ["a", "b"]`). Environment
//! variables override the file and flags override both: a key is taken from the file only
//! where clap found neither. Unknown keys are an error. `durable-mcp config` prints the
//! result, secrets redacted.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;

use anyhow::{Context, bail};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory};

/// The subcommands that take `serve`'s flags (and so its configuration file).
pub const WITH_SERVE_FLAGS: [&str; 4] = ["serve", "proxy", "config", "doctor"];

/// Flags of `serve` that are not configuration.
const NOT_SETTINGS: [&str; 3] = ["help", "config", "json"];

/// The command line with the configuration file's settings appended as flags, and the
/// names of the settings that came from the file. Without a file (or for other commands)
/// the command line is returned as it is.
pub fn with_file(
    cli: clap::Command,
    argv: Vec<OsString>,
) -> anyhow::Result<(Vec<OsString>, BTreeSet<String>)> {
    let matches = cli
        .clone()
        .try_get_matches_from(&argv)
        .unwrap_or_else(|e| e.exit());
    let Some((name, sub)) = matches.subcommand() else {
        return Ok((argv, BTreeSet::new()));
    };
    if !WITH_SERVE_FLAGS.contains(&name) {
        return Ok((argv, BTreeSet::new()));
    }
    let Some(path) = sub.get_one::<std::path::PathBuf>("config") else {
        return Ok((argv, BTreeSet::new()));
    };
    let command = cli.find_subcommand(name).context("the subcommand parsed")?;
    let (extra, from_file) = file_flags(command, sub, path)?;
    let mut argv = argv;
    // Before a `--` (proxy's upstream command line follows it), else at the end.
    let at = argv
        .iter()
        .position(|arg| arg == "--")
        .unwrap_or(argv.len());
    argv.splice(at..at, extra);
    Ok((argv, from_file))
}

/// The flags a configuration file adds to a command line already parsed as `matches`.
fn file_flags(
    command: &clap::Command,
    matches: &ArgMatches,
    path: &Path,
) -> anyhow::Result<(Vec<OsString>, BTreeSet<String>)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the configuration file {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("parsing the configuration file {}", path.display()))?;
    let settings: Vec<&clap::Arg> = command
        .get_arguments()
        .filter(|arg| arg.get_long().is_some_and(|l| !NOT_SETTINGS.contains(&l)))
        .collect();
    let mut extra = Vec::new();
    let mut from_file = BTreeSet::new();
    for (key, value) in &table {
        let long = key.replace('_', "-");
        let Some(arg) = settings
            .iter()
            .find(|arg| arg.get_long() == Some(long.as_str()))
        else {
            let known: Vec<&str> = settings.iter().filter_map(|arg| arg.get_long()).collect();
            bail!(
                "{}: unknown setting {key:?} (known: {})",
                path.display(),
                known.join(", ")
            );
        };
        let id = arg.get_id().as_str();
        if matches!(
            matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let flag = format!("--{long}");
        match (arg.get_action(), value) {
            (ArgAction::SetTrue, toml::Value::Boolean(true)) => extra.push(OsString::from(&flag)),
            (ArgAction::SetTrue, toml::Value::Boolean(false)) => {}
            (ArgAction::SetTrue, other) => bail!(
                "{}: {key} is a switch: true or false, not a {}",
                path.display(),
                other.type_str()
            ),
            (_, toml::Value::Array(items)) => {
                for item in items {
                    extra.push(OsString::from(format!(
                        "{flag}={}",
                        scalar(path, key, item)?
                    )));
                }
            }
            (_, value) => extra.push(OsString::from(format!(
                "{flag}={}",
                scalar(path, key, value)?
            ))),
        }
        from_file.insert(id.to_owned());
    }
    Ok((extra, from_file))
}

fn scalar(path: &Path, key: &str, value: &toml::Value) -> anyhow::Result<String> {
    Ok(match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        other => bail!(
            "{}: {key} must be a string, number or boolean, not a {}",
            path.display(),
            other.type_str()
        ),
    })
}

/// One effective setting of `serve`: its value (secrets redacted) and where it came from.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Effective {
    /// The flag's long name, as in the file.
    pub name: String,
    /// Its values (several for repeated flags); empty when unset.
    pub values: Vec<String>,
    /// `flag`, `env`, `file` or `default`; `unset` when it has no value.
    pub source: &'static str,
    /// Whether the value is a number or a switch (printed bare in TOML).
    #[serde(skip)]
    pub bare: bool,
    /// Whether it takes several values.
    #[serde(skip)]
    pub many: bool,
}

/// The effective settings of `command` as parsed into `matches`.
pub fn effective(
    command: &clap::Command,
    matches: &ArgMatches,
    from_file: &BTreeSet<String>,
) -> Vec<Effective> {
    let mut out = Vec::new();
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if NOT_SETTINGS.contains(&long) || arg.is_hide_set() {
            continue;
        }
        let id = arg.get_id().as_str();
        let values: Vec<String> = matches
            .get_raw(id)
            .map(|raw| raw.map(|v| redact(long, &v.to_string_lossy())).collect())
            .unwrap_or_default();
        let source = match matches.value_source(id) {
            _ if values.is_empty() => "unset",
            _ if from_file.contains(id) => "file",
            Some(ValueSource::CommandLine) => "flag",
            Some(ValueSource::EnvVariable) => "env",
            _ => "default",
        };
        let bare = matches!(arg.get_action(), ArgAction::SetTrue)
            || values
                .iter()
                .all(|v| v.parse::<f64>().is_ok() && !v.is_empty());
        let many = matches!(arg.get_action(), ArgAction::Append);
        out.push(Effective {
            name: long.to_owned(),
            values,
            source,
            bare,
            many,
        });
    }
    out
}

/// The settings as a TOML configuration file (unset ones as comments), each with its
/// source. Strings are written as JSON strings, whose escapes TOML's basic strings share.
pub fn to_toml(settings: &[Effective]) -> String {
    let mut out = String::new();
    for s in settings {
        let quote = |v: &String| {
            if s.bare {
                v.clone()
            } else {
                serde_json::Value::String(v.clone()).to_string()
            }
        };
        let value = if s.many {
            format!(
                "[{}]",
                s.values.iter().map(quote).collect::<Vec<_>>().join(", ")
            )
        } else {
            s.values.first().map(quote).unwrap_or_default()
        };
        if s.values.is_empty() {
            out.push_str(&format!("# {} (unset)\n", s.name));
        } else {
            out.push_str(&format!("{} = {value}  # {}\n", s.name, s.source));
        }
    }
    out
}

use durable_mcp_store::is_secret_name as is_secret;
/// Names of settings that hold secrets.
pub use durable_mcp_store::redact_url;

/// `value` of the setting `name` with its secrets replaced by `<redacted>`: secret
/// settings entirely, and passwords in URLs (`scheme://user:password@host`,
/// `?password=...`, `password=...` in a key=value string).
pub fn redact(name: &str, value: &str) -> String {
    if is_secret(name) {
        return "<redacted>".into();
    }
    redact_url(value)
}

/// The parsed command line of `argv` (after [`with_file`]), for [`effective`].
pub fn matches_of(argv: &[OsString]) -> anyhow::Result<ArgMatches> {
    Ok(crate::Cli::command().try_get_matches_from(argv)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_store_urls_and_secret_settings_are_redacted() {
        assert_eq!(
            redact("store", "postgres://app:hunter2@db:5432/prod?schema=a"),
            "postgres://app:<redacted>@db:5432/prod?schema=a"
        );
        assert_eq!(
            redact("store", "redis://:s3cret@cache:6379/0"),
            "redis://:<redacted>@cache:6379/0"
        );
        assert_eq!(
            redact("store", "postgres://db/prod?user=a&password=x"),
            "postgres://db/prod?user=a&password=<redacted>"
        );
        assert_eq!(
            redact("store", "sqlite:./durable-mcp.db?synchronous=full"),
            "sqlite:./durable-mcp.db?synchronous=full"
        );
        assert_eq!(
            redact("state-key", "0123456789abcdef0123456789abcdef"),
            "<redacted>"
        );
    }
}
