//! `deploy/`: the container image (`deploy/Dockerfile`) and the Kubernetes manifests
//! (`deploy/kubernetes/*.yaml`) name only flags, variables, paths and files that exist, and
//! their probes and health check pass against a running server. Neither docker nor a
//! cluster is needed: the files are read as text, line by line.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::*;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A file of the repository; a missing one fails the test, naming it.
fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path))
        .unwrap_or_else(|e| panic!("{path}: {e} (the deployment files must be there)"))
}

/// The `--flags` a `durable-mcp <subcommand> --help` lists.
fn flags_of(subcommand: &str) -> BTreeSet<String> {
    run(&[subcommand, "--help"])
        .lines()
        .map(str::trim_start)
        .filter(|line| line.starts_with('-'))
        .filter_map(|line| {
            line.find("--")
                .and_then(|at| line[at..].split([' ', ',']).next())
        })
        .map(str::to_owned)
        .collect()
}

/// The environment variables `durable-mcp serve --help` lists (`[env: NAME=]`).
fn serve_env() -> BTreeSet<String> {
    let help = run(&["serve", "--help"]);
    help.split("[env: ")
        .skip(1)
        .map(|rest| rest.split(['=', ']']).next().unwrap().to_owned())
        .collect()
}

/// The default of `serve --shutdown-grace-secs`, from its help.
fn default_shutdown_grace() -> u64 {
    let help = run(&["serve", "--help"]);
    let after = help
        .split_once("--shutdown-grace-secs")
        .expect("serve has --shutdown-grace-secs")
        .1;
    let default = after.split_once("[default: ").expect("with a default").1;
    default.split(']').next().unwrap().parse().unwrap()
}

/// How long a drain may take after the shutdown grace: handing the unfinished runs over
/// (`Engine::drain` waits up to 5 s for them).
const HAND_OVER_SECS: u64 = 5;

/// Every `--flag` of `args` is one that `durable-mcp <subcommand> --help` lists.
fn check_flags(file: &str, args: &[String]) {
    let subcommand = args
        .first()
        .unwrap_or_else(|| panic!("{file}: runs no subcommand"));
    let known = flags_of(subcommand);
    for arg in args.iter().filter(|a| a.starts_with("--")) {
        let flag = arg.split('=').next().unwrap();
        assert!(
            known.contains(flag),
            "{file}: `durable-mcp {subcommand}` has no {flag} (it has {known:?})"
        );
    }
}

/// Every `DURABLE_MCP_*` variable is one of `serve`'s.
fn check_env(file: &str, names: impl IntoIterator<Item = String>) {
    let known = serve_env();
    for name in names {
        assert!(
            known.contains(&name),
            "{file}: {name} is not a variable of `durable-mcp serve --help`"
        );
    }
}

/// One instruction of a Dockerfile: its keyword and the rest, continuation lines joined.
struct Instruction {
    keyword: String,
    rest: String,
}

/// The instructions of each stage (`FROM` starts one), comments left out.
fn dockerfile_stages() -> Vec<Vec<Instruction>> {
    let text = read("deploy/Dockerfile");
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        match line.strip_suffix('\\') {
            Some(start) => {
                current.push_str(start);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                if !current.trim().is_empty() {
                    logical.push(std::mem::take(&mut current));
                }
                current.clear();
            }
        }
    }
    let mut stages: Vec<Vec<Instruction>> = Vec::new();
    for line in logical {
        let (keyword, rest) = line
            .trim()
            .split_once(char::is_whitespace)
            .unwrap_or((line.trim(), ""));
        let instruction = Instruction {
            keyword: keyword.to_uppercase(),
            rest: rest.trim().to_owned(),
        };
        if instruction.keyword == "FROM" {
            stages.push(Vec::new());
        }
        stages
            .last_mut()
            .expect("deploy/Dockerfile starts with FROM")
            .push(instruction);
    }
    assert_eq!(
        stages.len(),
        2,
        "deploy/Dockerfile: a build stage and a runtime stage"
    );
    stages
}

/// The rest of the stage's one `keyword` instruction.
fn one<'a>(stage: &'a [Instruction], keyword: &str) -> &'a str {
    let found: Vec<&Instruction> = stage.iter().filter(|i| i.keyword == keyword).collect();
    assert_eq!(
        found.len(),
        1,
        "deploy/Dockerfile: one {keyword} in the stage"
    );
    &found[0].rest
}

/// An exec-form command (`["a", "b"]`).
fn exec_form(text: &str) -> Vec<String> {
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("deploy/Dockerfile: {text:?} is not an exec-form array: {e}"))
}

/// The `NAME=value` pairs of the stage's `ENV` instructions.
fn env_of(stage: &[Instruction]) -> Vec<(String, String)> {
    stage
        .iter()
        .filter(|i| i.keyword == "ENV")
        .flat_map(|i| {
            i.rest
                .split_whitespace()
                .map(|pair| pair.split_once('=').expect("ENV NAME=value"))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect()
}

fn port_of(addr: &str) -> &str {
    addr.rsplit_once(':')
        .unwrap_or_else(|| panic!("{addr}: no port"))
        .1
}

/// The runtime stage's `ENV`, `ENTRYPOINT` + `CMD`, and the `HEALTHCHECK` command.
struct Image {
    env: Vec<(String, String)>,
    binary: String,
    serve: Vec<String>,
    healthcheck: Vec<String>,
}

fn image() -> Image {
    let stages = dockerfile_stages();
    let runtime = &stages[1];
    let entrypoint = exec_form(one(runtime, "ENTRYPOINT"));
    let healthcheck = one(runtime, "HEALTHCHECK");
    let command = exec_form(
        healthcheck
            .split_once(" CMD ")
            .unwrap_or_else(|| panic!("deploy/Dockerfile: HEALTHCHECK without CMD: {healthcheck}"))
            .1,
    );
    assert_eq!(
        command[0], entrypoint[0],
        "the health check runs the image's binary"
    );
    Image {
        env: env_of(runtime),
        binary: entrypoint[0].clone(),
        serve: exec_form(one(runtime, "CMD")),
        healthcheck: command[1..].to_vec(),
    }
}

#[test]
fn the_dockerfile_names_only_what_exists() {
    let stages = dockerfile_stages();
    let (build, runtime) = (&stages[0], &stages[1]);

    // The build stage: a Rust toolchain the workspace accepts, the same cargo command as
    // scripts/container-build.sh, the package and binary of this crate.
    let from = one(build, "FROM");
    let version = from
        .strip_prefix("rust:")
        .and_then(|r| r.strip_suffix("-bookworm AS build"))
        .unwrap_or_else(|| panic!("build stage FROM {from}"));
    let workspace = read("Cargo.toml");
    let minimum = workspace
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("the workspace's rust-version")
        .trim_matches('"');
    let numbers = |v: &str| {
        v.split('.')
            .map(|n| n.parse::<u32>().unwrap())
            .collect::<Vec<_>>()
    };
    assert!(
        numbers(version) >= numbers(minimum),
        "rust {version} in the image, the workspace needs {minimum}"
    );
    let run_line = one(build, "RUN");
    let cargo = run_line
        .split(" && ")
        .map(str::trim)
        .find_map(|part| part.find("cargo ").map(|at| &part[at..]))
        .expect("the build stage runs cargo");
    assert_eq!(cargo, "cargo build --release --locked -p durable-mcp-cli");
    assert!(
        read("scripts/container-build.sh")
            .lines()
            .any(|l| l.trim() == cargo),
        "scripts/container-build.sh runs `{cargo}`"
    );
    let manifest = read("crates/cli/Cargo.toml");
    assert!(
        manifest.contains("name = \"durable-mcp-cli\"")
            && manifest.contains("name = \"durable-mcp\""),
        "the package and its binary"
    );
    assert!(
        run_line.contains("target/release/durable-mcp "),
        "the build stage installs the binary cargo builds"
    );
    // The commit for `--version`: the variable build.rs reads.
    assert!(
        build
            .iter()
            .any(|i| i.keyword == "ARG" && i.rest.starts_with("DURABLE_MCP_COMMIT"))
    );
    assert!(read("crates/cli/build.rs").contains("std::env::var(\"DURABLE_MCP_COMMIT\")"));
    // The build context (the repository) keeps what cargo needs.
    let ignored = read("deploy/Dockerfile.dockerignore");
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "crates",
        "examples",
        "tests",
        "*",
        ".",
    ] {
        assert!(
            !ignored.lines().any(|l| l.trim() == needed),
            "deploy/Dockerfile.dockerignore leaves out {needed}"
        );
    }

    // The runtime stage copies what the build stage made.
    let copies: Vec<&Instruction> = runtime.iter().filter(|i| i.keyword == "COPY").collect();
    for copy in &copies {
        let words: Vec<&str> = copy.rest.split_whitespace().collect();
        assert!(words.contains(&"--from=build"), "COPY {}", copy.rest);
        let source = words[words.len() - 2];
        assert!(
            run_line.contains(source),
            "COPY {source}: the build stage makes no such path"
        );
    }
    let image = image();
    let destination = |copy: &Instruction| copy.rest.split_whitespace().last().unwrap().to_owned();
    assert!(
        copies.iter().any(|c| destination(c) == image.binary),
        "ENTRYPOINT {}: copied from the build stage",
        image.binary
    );

    // A non-root user owns the store's volume.
    let user = one(runtime, "USER");
    let uid = user.split(':').next().unwrap();
    assert!(
        uid.parse::<u32>().is_ok_and(|uid| uid != 0),
        "USER {user}: a non-root uid, by number"
    );
    let volume = one(runtime, "VOLUME");
    assert!(
        copies
            .iter()
            .any(|c| c.rest.contains(&format!("--chown={user}")) && destination(c) == volume),
        "the volume {volume} belongs to {user}"
    );
    let store = image
        .env
        .iter()
        .find(|(k, _)| k == "DURABLE_MCP_STORE")
        .expect("ENV DURABLE_MCP_STORE")
        .1
        .clone();
    let db = store
        .strip_prefix("sqlite:")
        .unwrap_or_else(|| panic!("DURABLE_MCP_STORE={store}: SQLite in the volume"));
    assert_eq!(
        Path::new(db).parent(),
        Some(Path::new(volume)),
        "the SQLite store is in the volume"
    );

    check_env(
        "deploy/Dockerfile",
        image
            .env
            .iter()
            .map(|(k, _)| k.clone())
            .filter(|k| k.starts_with("DURABLE_MCP_")),
    );
    let listen = &image
        .env
        .iter()
        .find(|(k, _)| k == "DURABLE_MCP_LISTEN")
        .expect("ENV DURABLE_MCP_LISTEN")
        .1;
    assert!(
        listen.starts_with("0.0.0.0:"),
        "the container listens on every address: {listen}"
    );
    assert_eq!(
        one(runtime, "EXPOSE"),
        port_of(listen),
        "EXPOSE the listen port"
    );
    assert_eq!(
        one(runtime, "STOPSIGNAL"),
        "SIGTERM",
        "the server drains on SIGTERM"
    );
    assert_eq!(image.serve.first().map(String::as_str), Some("serve"));
    check_flags("deploy/Dockerfile CMD", &image.serve);
    check_flags("deploy/Dockerfile HEALTHCHECK", &image.healthcheck);
}

/// The Kubernetes manifests, each as its non-comment lines.
fn manifests() -> Vec<(String, Vec<String>)> {
    let dir = root().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let files: Vec<(String, Vec<String>)> = files
        .iter()
        .map(|path| {
            let name = format!(
                "deploy/kubernetes/{}",
                path.file_name().unwrap().to_string_lossy()
            );
            let lines = read(&name)
                .lines()
                .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
                .map(str::to_owned)
                .collect();
            (name, lines)
        })
        .collect();
    let kinds: BTreeSet<String> = files
        .iter()
        .flat_map(|(_, lines)| {
            lines
                .iter()
                .filter_map(|l| l.strip_prefix("kind: ").map(str::to_owned))
        })
        .collect();
    for kind in ["Deployment", "Service", "PodDisruptionBudget", "Secret"] {
        assert!(
            kinds.contains(kind),
            "deploy/kubernetes/ has no {kind} (it has {kinds:?})"
        );
    }
    files
}

/// The `key: value` of a line (list dash and quotes off), if it has one.
fn key_value(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.trim().trim_start_matches("- ").split_once(':')?;
    Some((key.trim(), value.trim().trim_matches('"')))
}

/// The value of the first `key:` in `lines`, at or after `from`.
fn first<'a>(lines: &'a [String], from: usize, key: &str) -> Option<(usize, &'a str)> {
    lines.iter().enumerate().skip(from).find_map(|(at, l)| {
        key_value(l)
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| (at, v))
    })
}

/// The manifest of `kind`.
fn of_kind<'a>(files: &'a [(String, Vec<String>)], kind: &str) -> &'a (String, Vec<String>) {
    files
        .iter()
        .find(|(_, lines)| lines.iter().any(|l| l == &format!("kind: {kind}")))
        .unwrap()
}

/// The worker container's environment: names, and values where they are literal.
fn container_env(lines: &[String]) -> Vec<(String, Option<String>)> {
    let mut env = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        if let Some(("- name", name)) = line.trim().split_once(':').map(|(k, v)| (k, v.trim()))
            && name.starts_with("DURABLE_MCP_")
        {
            let value = lines
                .get(at + 1)
                .and_then(|l| key_value(l))
                .filter(|(k, _)| *k == "value")
                .map(|(_, v)| v.to_owned());
            env.push((name.to_owned(), value));
        }
    }
    env
}

/// The number of `key:` in `lines`.
fn number(file: &str, lines: &[String], key: &str) -> u64 {
    let (_, value) = first(lines, 0, key).unwrap_or_else(|| panic!("{file}: no {key}"));
    value
        .parse()
        .unwrap_or_else(|e| panic!("{file}: {key}: {value}: {e}"))
}

#[test]
fn the_kubernetes_manifests_name_only_what_exists() {
    let files = manifests();
    let (file, deployment) = of_kind(&files, "Deployment");
    // The Deployment's `args`, then flags anywhere in any manifest, are the subcommand's.
    let mut flags: Vec<String> = exec_form(
        first(deployment, 0, "args")
            .unwrap_or_else(|| panic!("{file}: no args"))
            .1,
    );
    for (_, lines) in &files {
        flags.extend(lines.iter().flat_map(|l| {
            l.split(|c: char| c.is_whitespace() || c == '"' || c == ',')
                .filter(|w| w.starts_with("--"))
                .map(str::to_owned)
        }));
    }
    check_flags("deploy/kubernetes", &flags);
    let env = container_env(deployment);
    check_env(file, env.iter().map(|(name, _)| name.clone()));
    assert!(
        deployment
            .iter()
            .any(|l| l.trim() == "value: \"0.0.0.0:8080\"" || l.trim() == "value: 0.0.0.0:8080"),
        "{file}: listens on 0.0.0.0:8080"
    );

    let replicas = number(file, deployment, "replicas");
    assert!(replicas >= 2, "{file}: several workers");
    let grace = env
        .iter()
        .find(|(name, _)| name == "DURABLE_MCP_SHUTDOWN_GRACE_SECS")
        .and_then(|(_, v)| v.as_deref())
        .map_or_else(default_shutdown_grace, |v| v.parse().unwrap());
    let termination = number(file, deployment, "terminationGracePeriodSeconds");
    assert!(
        termination > grace + HAND_OVER_SECS,
        "{file}: terminationGracePeriodSeconds {termination} must exceed the drain ({grace} s + {HAND_OVER_SECS} s)"
    );

    // Probes: readiness on /readyz, liveness on /healthz.
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let (at, _) = first(deployment, 0, probe).unwrap_or_else(|| panic!("{file}: no {probe}"));
        assert_eq!(
            first(deployment, at, "path").map(|(_, p)| p),
            Some(path),
            "{file}: {probe}"
        );
    }
    // Non-root, read-only, as the image's user.
    let image_user = image_user();
    assert_eq!(
        first(deployment, 0, "runAsNonRoot").map(|(_, v)| v),
        Some("true"),
        "{file}"
    );
    assert_eq!(
        first(deployment, 0, "runAsUser").map(|(_, v)| v),
        Some(image_user.as_str()),
        "{file}: the image's user"
    );
    assert_eq!(
        first(deployment, 0, "readOnlyRootFilesystem").map(|(_, v)| v),
        Some("true"),
        "{file}"
    );

    // The store URL comes from the Secret, under a key it has.
    let (at, _) = first(deployment, 0, "secretKeyRef")
        .unwrap_or_else(|| panic!("{file}: the store URL from a Secret"));
    let (secret_name, secret_key) = (
        first(deployment, at, "name").unwrap().1,
        first(deployment, at, "key").unwrap().1,
    );
    assert!(
        deployment[at - 2].contains("DURABLE_MCP_STORE"),
        "{file}: the Secret holds DURABLE_MCP_STORE"
    );
    let (secret_file, secret) = of_kind(&files, "Secret");
    assert_eq!(
        first(secret, 0, "name").map(|(_, v)| v),
        Some(secret_name),
        "{secret_file}: the Secret the Deployment names"
    );
    let (data, _) =
        first(secret, 0, "stringData").unwrap_or_else(|| panic!("{secret_file}: no stringData"));
    let url = secret[data + 1..]
        .iter()
        .find_map(|l| key_value(l).filter(|(k, _)| *k == secret_key))
        .map(|(_, v)| v);
    assert!(
        url.is_some_and(|u| u.starts_with("postgres://")),
        "{secret_file}: {secret_key} is a PostgreSQL URL"
    );

    // A node drain leaves workers serving; the Service reaches the container's port.
    let (pdb_file, pdb) = of_kind(&files, "PodDisruptionBudget");
    assert!(
        number(pdb_file, pdb, "minAvailable") < replicas,
        "{pdb_file}: minAvailable below the replicas, or a drain never ends"
    );
    let (service_file, service) = of_kind(&files, "Service");
    let target = first(service, 0, "targetPort").unwrap().1;
    assert!(
        deployment
            .iter()
            .any(|l| l.trim() == format!("- name: {target}")),
        "{service_file}: targetPort {target} is a container port"
    );
    assert_eq!(
        number(file, deployment, "containerPort").to_string(),
        port_of(
            &image()
                .env
                .iter()
                .find(|(k, _)| k == "DURABLE_MCP_LISTEN")
                .unwrap()
                .1
        )
    );
}

/// The uid of the Dockerfile's `USER`.
fn image_user() -> String {
    one(&dockerfile_stages()[1], "USER")
        .split(':')
        .next()
        .unwrap()
        .to_owned()
}

/// A server run as the Deployment runs it (its literal environment, a memory store, a
/// loopback port) answers every probe path of the manifests 200; the image's HEALTHCHECK,
/// run with the image's environment, exits 0 against it and 1 once it is gone.
#[test]
fn probes_and_the_health_check_pass_against_a_running_server() {
    let files = manifests();
    let (_, deployment) = of_kind(&files, "Deployment");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut command = Command::new(env!("CARGO_BIN_EXE_durable-mcp"));
    command.arg("serve");
    for (name, value) in container_env(deployment) {
        if let Some(value) = value {
            command.env(name, value);
        }
    }
    command
        .env("DURABLE_MCP_STORE", "memory:")
        .env("DURABLE_MCP_LISTEN", &addr)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    let mut server = Server::launch(command, addr.parse().unwrap());

    let paths: BTreeSet<&str> = files
        .iter()
        .flat_map(|(_, lines)| {
            lines
                .iter()
                .filter_map(|l| key_value(l).filter(|(k, _)| *k == "path").map(|(_, v)| v))
        })
        .collect();
    assert!(
        paths.contains("/readyz") && paths.contains("/healthz"),
        "{paths:?}"
    );
    for path in paths {
        let response = request_at(server.addr, "GET", path, &[], None);
        let status = response.status;
        assert_eq!(status, 200, "GET {path}: {}", response.body());
    }

    let image = image();
    let healthcheck = |listen: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_durable-mcp"));
        command
            .args(&image.healthcheck)
            .env_clear()
            .envs(image.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("DURABLE_MCP_LISTEN", listen);
        command.output().unwrap()
    };
    // The image's listen address, on this test's port.
    let image_listen = &image
        .env
        .iter()
        .find(|(k, _)| k == "DURABLE_MCP_LISTEN")
        .unwrap()
        .1;
    let listen = format!("{}:{port}", image_listen.rsplit_once(':').unwrap().0);
    let passed = healthcheck(&listen);
    assert!(
        passed.status.success(),
        "HEALTHCHECK {:?}: {}",
        image.healthcheck,
        String::from_utf8_lossy(&passed.stderr)
    );
    server.kill();
    let failed = healthcheck(&listen);
    assert_eq!(
        failed.status.code(),
        Some(1),
        "HEALTHCHECK with no server: {}",
        String::from_utf8_lossy(&failed.stdout)
    );
}
