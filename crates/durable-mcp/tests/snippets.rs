//! Code snippets in the docs come from the example crates, so that they cannot drift: a
//! fenced block preceded by `<!-- snippet: PATH#ANCHOR -->` must be, exactly, the lines
//! between `// ANCHOR: ANCHOR` and `// ANCHOR_END: ANCHOR` of PATH (relative to the
//! workspace root, common indentation removed). The examples themselves are compiled and
//! run by their own tests.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::{Path, PathBuf};

const MARKER: &str = "<!-- snippet: ";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// The lines between the anchor's markers, without their common indentation.
fn region(path: &Path, anchor: &str) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    let find = |marker: String| {
        lines
            .iter()
            .position(|l| l.trim() == marker)
            .unwrap_or_else(|| panic!("{}: no line {marker:?}", path.display()))
    };
    let (start, end) = (
        find(format!("// ANCHOR: {anchor}")),
        find(format!("// ANCHOR_END: {anchor}")),
    );
    let body = &lines[start + 1..end];
    let indent = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    body.iter()
        .map(|l| l.get(indent..).unwrap_or("").trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `(file, line, PATH#ANCHOR, block)` of the markdown files under the root.
fn snippets(root: &Path) -> Vec<(PathBuf, usize, String, String)> {
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let Some(source) = line
                .trim()
                .strip_prefix(MARKER)
                .and_then(|rest| rest.strip_suffix("-->"))
            else {
                continue;
            };
            assert!(
                lines.get(n + 1).is_some_and(|l| l.starts_with("```")),
                "{}:{}: no code block after the marker",
                file.display(),
                n + 1
            );
            let body: Vec<&str> = lines[n + 2..]
                .iter()
                .take_while(|l| !l.starts_with("```"))
                .copied()
                .collect();
            found.push((
                file.clone(),
                n + 1,
                source.trim().to_owned(),
                body.join("\n"),
            ));
        }
    }
    found
}

#[test]
fn doc_snippets_match_the_example_files() {
    let root = workspace_root();
    let snippets = snippets(&root);
    assert!(
        snippets.len() >= 3,
        "the README's snippets were not found: {snippets:?}"
    );
    for (file, line, source, block) in snippets {
        let (path, anchor) = source
            .split_once('#')
            .unwrap_or_else(|| panic!("{}:{line}: {source:?} lacks #ANCHOR", file.display()));
        let expected = region(&root.join(path), anchor);
        assert!(
            block == expected,
            "{}:{line}: the snippet differs from {source}; run scripts/sync-snippets.py.\n--- snippet\n{block}\n--- {source}\n{expected}",
            file.display()
        );
    }
}
