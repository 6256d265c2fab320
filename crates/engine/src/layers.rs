//! The engine's layers (see the crate docs): a module may use its own layer and those
//! below it, never one above. Layers 0 to 3 are the crate `durable-mcp-engine-core`, so
//! the compiler refuses a call from them into this one; these tests read every module's
//! source and check the `crate::` paths in it, inside each crate, and that only the
//! composition (`lib.rs`) implements `Engine`.

/// Every module of the engine, its layer, and its source (each file of it).
const MODULES: &[(&str, u8, &str)] = &[
    (
        "records",
        0,
        include_str!("../../engine-core/src/records/mod.rs"),
    ),
    (
        "records",
        0,
        include_str!("../../engine-core/src/records/alias.rs"),
    ),
    (
        "records",
        0,
        include_str!("../../engine-core/src/records/key.rs"),
    ),
    (
        "records",
        0,
        include_str!("../../engine-core/src/records/run.rs"),
    ),
    (
        "records",
        0,
        include_str!("../../engine-core/src/records/task.rs"),
    ),
    (
        "records",
        0,
        include_str!("../../engine-core/src/records/subscription.rs"),
    ),
    (
        "records",
        0,
        include_str!("../../engine-core/src/records/tests.rs"),
    ),
    ("error", 0, include_str!("../../engine-core/src/error.rs")),
    (
        "metrics",
        0,
        include_str!("../../engine-core/src/metrics/mod.rs"),
    ),
    (
        "metrics",
        0,
        include_str!("../../engine-core/src/metrics/store.rs"),
    ),
    ("traces", 0, include_str!("../../engine-core/src/traces.rs")),
    (
        "semconv",
        0,
        include_str!("../../engine-core/src/semconv.rs"),
    ),
    ("sync", 0, include_str!("../../engine-core/src/sync.rs")),
    ("caller", 1, include_str!("../../engine-core/src/caller.rs")),
    ("state", 1, include_str!("../../engine-core/src/state.rs")),
    ("keys", 1, include_str!("../../engine-core/src/keys.rs")),
    ("rerun", 1, include_str!("../../engine-core/src/rerun.rs")),
    ("limits", 0, include_str!("../../engine-core/src/limits.rs")),
    ("hub", 1, include_str!("../../engine-core/src/hub.rs")),
    ("events", 1, include_str!("../../engine-core/src/events.rs")),
    (
        "journal",
        2,
        include_str!("../../engine-core/src/journal/mod.rs"),
    ),
    // The journal's tests drive recovery (`Engine::recover`), which sits above it.
    ("journal_tests", 4, include_str!("journal_tests.rs")),
    ("tasks", 3, include_str!("../../engine-core/src/tasks.rs")),
    ("registry", 4, include_str!("registry.rs")),
    ("run", 4, include_str!("run.rs")),
    ("pump", 4, include_str!("pump.rs")),
    ("opening", 4, include_str!("opening.rs")),
    ("tail", 4, include_str!("tail.rs")),
    ("durable", 4, include_str!("durable.rs")),
    ("gate", 4, include_str!("gate.rs")),
    ("recovery", 4, include_str!("recovery.rs")),
    ("relay", 4, include_str!("relay.rs")),
    ("inbox", 4, include_str!("inbox.rs")),
    ("notify", 4, include_str!("notify.rs")),
    ("changes", 4, include_str!("changes.rs")),
    ("getstream", 4, include_str!("getstream.rs")),
    ("getstream tests", 4, include_str!("getstream_tests.rs")),
    ("session", 4, include_str!("session.rs")),
    ("subscriptions", 4, include_str!("subscriptions.rs")),
    ("outbox", 4, include_str!("outbox.rs")),
    ("requests", 4, include_str!("requests.rs")),
    ("operate", 4, include_str!("operate.rs")),
    ("operate_tests", 4, include_str!("operate_tests.rs")),
    ("inspect", 4, include_str!("inspect.rs")),
];

/// Names the crate root defines or re-exports, with the module they come from (`None`:
/// the root itself, or another crate, which every layer may use).
const ROOT: &[(&str, Option<&str>)] = &[
    ("Engine", None),
    ("EngineOptions", None),
    ("Inner", None),
    ("RELATED_TASK", None),
    ("TASKS_EXTENSION", None),
    ("EngineError", Some("error")),
    ("RecordError", Some("records")),
    ("Era", Some("records")),
    ("is_credential", Some("records")),
    ("ActionKind", Some("records")),
    ("ActionRecord", Some("records")),
    ("Caller", Some("caller")),
    ("Request", None),
    ("Method", None),
    ("Accepted", Some("opening")),
    ("tail", Some("tail")),
    ("Follow", Some("tail")),
    ("GetStream", Some("getstream")),
    ("GetStreamSettings", Some("getstream")),
];

fn layer(module: &str) -> Option<u8> {
    MODULES
        .iter()
        .find(|(name, _, _)| *name == module)
        .map(|(_, layer, _)| *layer)
}

/// Where the block whose opening `{` was just passed ends in `source`: the index of its
/// closing `}` (the end of `source` if it has none).
fn block_end(source: &str) -> usize {
    let mut depth = 1;
    source
        .char_indices()
        .find(|(_, c)| {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            depth == 0
        })
        .map_or(source.len(), |(i, _)| i)
}

/// The first segment of every `crate::` path in `source` (`crate::{a, b::c}` gives `a`, `b`).
fn crate_paths(source: &str) -> Vec<String> {
    let ident = |s: &str| {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect::<String>()
    };
    let mut found = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = block_end(group);
            let mut item_depth = 0;
            let mut start = 0;
            let inner = &group[..end];
            for (i, c) in inner
                .char_indices()
                .chain(std::iter::once((inner.len(), ',')))
            {
                match c {
                    '{' => item_depth += 1,
                    '}' => item_depth -= 1,
                    ',' if item_depth == 0 => {
                        let name = ident(inner[start..i].trim());
                        if !name.is_empty() {
                            found.push(name);
                        }
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.push(name);
            }
        }
    }
    found
}

/// The upward (or unknown) uses of module `module` at `layer` in `source`.
fn violations(module: &str, layer_of_module: u8, source: &str) -> Vec<String> {
    let mut bad = Vec::new();
    for name in crate_paths(source) {
        let target = match ROOT.iter().find(|(root, _)| *root == name) {
            Some((_, None)) => continue,
            Some((_, Some(target))) => *target,
            None => name.as_str(),
        };
        match layer(target) {
            Some(target_layer) if target_layer <= layer_of_module => {}
            Some(target_layer) => bad.push(format!("{module} (layer {layer_of_module}) uses crate::{name} ({target}, layer {target_layer})")),
            None => bad.push(format!("{module} uses crate::{name}, which the layer table does not know")),
        }
    }
    bad
}

#[test]
fn no_module_uses_a_layer_above_its_own() {
    let bad: Vec<String> = MODULES
        .iter()
        .flat_map(|(module, layer, source)| violations(module, *layer, source))
        .collect();
    assert!(
        bad.is_empty(),
        "arrows must point down:\n{}",
        bad.join("\n")
    );
}

/// The modules `source` imports (its `crate::` paths outside comments, root re-exports
/// mapped to their module), itself and the crate root left out.
fn imports(module: &str, source: &str) -> std::collections::BTreeSet<&'static str> {
    let code: String = source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut targets = std::collections::BTreeSet::new();
    for name in crate_paths(&code) {
        let target = match ROOT.iter().find(|(root, _)| *root == name) {
            Some((_, None)) => continue,
            Some((_, Some(target))) => *target,
            None => name.as_str(),
        };
        if let Some((known, _, _)) = MODULES.iter().find(|(m, _, _)| *m == target)
            && *known != module
        {
            targets.insert(*known);
        }
    }
    targets
}

/// An import circle among `modules`, as the path that closes it, if there is one.
fn import_circle(
    modules: &[(&'static str, std::collections::BTreeSet<&'static str>)],
) -> Option<Vec<&'static str>> {
    fn visit(
        at: &'static str,
        modules: &[(&'static str, std::collections::BTreeSet<&'static str>)],
        path: &mut Vec<&'static str>,
        done: &mut std::collections::BTreeSet<&'static str>,
    ) -> Option<Vec<&'static str>> {
        if let Some(start) = path.iter().position(|m| *m == at) {
            let mut circle = path[start..].to_vec();
            circle.push(at);
            return Some(circle);
        }
        if !done.insert(at) {
            return None;
        }
        path.push(at);
        let targets = modules
            .iter()
            .filter(|(m, _)| *m == at)
            .flat_map(|(_, t)| t.iter().copied())
            .collect::<Vec<_>>();
        for target in targets {
            if let Some(circle) = visit(target, modules, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = std::collections::BTreeSet::new();
    modules
        .iter()
        .find_map(|(m, _)| visit(m, modules, &mut Vec::new(), &mut done))
}

#[test]
fn no_import_circle() {
    // Tests may use what they test from above; only the modules themselves count.
    let modules: Vec<_> = MODULES
        .iter()
        .filter(|(module, _, _)| !module.ends_with(" tests"))
        .map(|(module, _, source)| (*module, imports(module, source)))
        .collect();
    assert_eq!(
        import_circle(&modules),
        None,
        "modules import each other in a circle"
    );
    let circular = vec![
        ("a", ["b"].into_iter().collect()),
        ("b", ["c"].into_iter().collect()),
        ("c", ["a"].into_iter().collect()),
    ];
    assert_eq!(
        import_circle(&circular),
        Some(vec!["a", "b", "c", "a"]),
        "the check finds a circle"
    );
}

/// Whether `source` implements `Engine` (`impl Engine {`, at the start of a line).
fn implements_engine(source: &str) -> bool {
    source.starts_with("impl Engine {") || source.contains("\nimpl Engine {")
}

/// `Engine` is the composition: its methods are written in `lib.rs` only, and every other
/// module is a component with a type and state of its own (`Requests`, `Sessions`, ...).
/// Calls from a lower layer up into the request path are the compiler's to refuse: layers
/// 0 to 3 are another crate.
#[test]
fn only_the_composition_implements_engine() {
    let bad: Vec<&str> = MODULES
        .iter()
        .filter(|(_, _, source)| implements_engine(source))
        .map(|(module, _, _)| *module)
        .collect();
    assert!(bad.is_empty(), "impl Engine outside lib.rs, in: {bad:?}");
    assert!(implements_engine(include_str!("lib.rs")));
}

/// The store writes of `source` that bypass the door out (`Events`, which `Engine::append`
/// and `Engine::commit_batch` call), as `module: line`.
fn bypassing_writes(module: &str, source: &str) -> Vec<String> {
    const WRITES: [&str; 3] = ["store().append(", "store().commit(", "store.append("];
    // A module's unit tests may write behind its back on purpose (as another worker would).
    let code = source
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or(source);
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .filter(|line| WRITES.iter().any(|w| line.contains(w)))
        .map(|line| format!("{module}: {}", line.trim()))
        .collect()
}

/// Every event the engine commits goes through the door out, so that this worker's
/// write-through tails get it from memory: a tail that follows a stream this worker writes
/// waits for the hub, and an event appended behind its back would reach its client only
/// when something else wakes the tail (a question of `ctx.ask` that never arrived did).
#[test]
fn every_stream_write_goes_through_the_door_out() {
    let bad: Vec<String> = MODULES
        .iter()
        // `events` is the door out itself.
        .filter(|(module, _, _)| !matches!(*module, "records" | "layers" | "events"))
        .flat_map(|(module, _, source)| bypassing_writes(module, source))
        .collect();
    assert!(
        bad.is_empty(),
        "write through Engine::append / Engine::commit_batch:\n{}",
        bad.join("\n")
    );
    assert_eq!(
        bypassing_writes(
            "durable",
            "self.engine.store().append(&stream, data, false)"
        ),
        vec!["durable: self.engine.store().append(&stream, data, false)"]
    );
}

#[test]
fn every_module_has_a_layer() {
    let roots = [
        include_str!("lib.rs"),
        include_str!("../../engine-core/src/lib.rs"),
    ];
    for line in roots.iter().flat_map(|root| root.lines()) {
        let line = line.trim();
        let Some(name) = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("mod "))
            .and_then(|m| m.strip_suffix(';'))
        else {
            continue;
        };
        assert!(
            name == "layers" || layer(name).is_some(),
            "module {name} is not in the layer table"
        );
    }
}

#[test]
fn an_upward_use_is_caught() {
    // What `journal.rs` imported before the layers: tasks, a layer above the journal.
    let before = "use crate::rerun::AlreadySent;\nuse crate::tasks::{Flavor, RELATED_TASK, is_terminal};\nuse crate::{Caller, Engine, EngineError, Era};";
    assert_eq!(
        violations("journal", 2, before),
        vec!["journal (layer 2) uses crate::tasks (tasks, layer 3)".to_owned()]
    );
    assert_eq!(
        crate_paths("use crate::{a::{b, c}, d};\nlet x = crate::e::f();"),
        ["a", "d", "e"]
    );
    assert_eq!(
        violations("records", 0, "let run = crate::Accepted { .. };").len(),
        1,
        "a root re-export counts as its module"
    );
    assert_eq!(
        violations("records", 0, "use crate::nowhere::X;").len(),
        1,
        "an unknown module is reported"
    );
    assert!(implements_engine(
        "use x;\nimpl Engine {\n    fn a(&self) {}\n}\n"
    ));
    assert!(!implements_engine(
        "impl Requests {\n}\n// impl Engine { in a comment"
    ));
}
