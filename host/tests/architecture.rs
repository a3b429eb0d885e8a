//! The engine's modules depend on each other in one direction only: no module reaches,
//! directly or through others, back into a module that uses it. Checked on the sources:
//! a `crate::x` (or, inside a folder module, `super::x`) names a dependency on `x`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The code of a file without its comments (doc links are not dependencies).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|l| l.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names that follow `prefix::` in `code`, and those of `prefix::{a, b::c}`.
fn named_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let word = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
            .collect()
    };
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices(&format!("{prefix}::")) {
        let rest = &code[at + prefix.len() + 2..];
        if let Some(list) = rest.strip_prefix('{') {
            let list = &list[..list.find('}').unwrap_or(list.len())];
            out.extend(list.split(',').map(|item| word(item.trim())));
        } else {
            out.insert(word(rest));
        }
    }
    out.retain(|name| !name.is_empty());
    out
}

/// The graph of the modules directly in `dir`: a file `x.rs` or a folder `x/` is module x.
fn graph(dir: &Path, prefix: &str) -> Graph {
    let mut edges = Graph::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if ["lib", "mod", "tests"].contains(&name.as_str()) {
            continue;
        }
        let files = if path.is_dir() {
            rust_files(&path)
        } else {
            vec![path]
        };
        let used = edges.entry(name.clone()).or_default();
        for file in files {
            used.extend(named_after(&code(&file), prefix));
        }
        used.remove(&name);
    }
    edges
}

/// Modules on a cycle, each with the members of its cycle it uses.
fn cycles(edges: &Graph) -> Vec<String> {
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(m) = todo.pop() {
            for next in edges.get(&m).into_iter().flatten() {
                if next == to {
                    return true;
                }
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        false
    };
    edges
        .iter()
        .filter(|(m, _)| reaches(m, m))
        .map(|(m, used)| {
            let back: Vec<_> = used.iter().filter(|u| reaches(u, m)).collect();
            format!("{m} → {back:?}")
        })
        .collect()
}

#[test]
fn no_module_of_the_engine_depends_on_itself_through_others() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = cycles(&graph(&src, "crate"));
    for folder in ["api", "store", "plugin", "capability"] {
        found.extend(cycles(&graph(&src.join(folder), "super")));
    }
    assert!(found.is_empty(), "import cycles: {found:#?}");
}

#[test]
fn the_check_finds_a_cycle() {
    let mut edges = Graph::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("a".into());
    edges.entry("c".into()).or_default().insert("a".into());
    assert_eq!(cycles(&edges), ["a → [\"b\"]", "b → [\"a\"]"]);
    let code = "use crate::{store, node::Node};\nlet x = crate::clock::now();";
    assert_eq!(
        named_after(code, "crate"),
        ["clock", "node", "store"].map(String::from).into()
    );
}
