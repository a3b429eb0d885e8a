//! The engine's architecture, checked on its sources:
//!
//! - its modules depend on each other in one direction only: no module reaches, directly
//!   or through others, back into a module that uses it (a `crate::x`, or inside a folder
//!   module `super::x` or `crate::folder::x`, names a dependency on `x`);
//! - the API writes nothing around the conductor: `api/` calls only the store's reads;
//! - every folder's module map (its `//!` docs) names each of its modules;
//! - the engine holds its nodes through one handle (`store::Store`): no module outside
//!   `store/` names a backend (its type, or its module).

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

/// The graph of the modules directly in `dir`: a file `x.rs` or a folder `x/` is module x,
/// and a module names a sibling after any of `prefixes`.
fn graph(dir: &Path, prefixes: &[&str]) -> Graph {
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
            let code = code(&file);
            for prefix in prefixes {
                used.extend(named_after(&code, prefix));
            }
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

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every folder module of the engine, as a path below `src/`.
fn folders(dir: &Path, below: &str, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            let name = path.file_name().unwrap().to_string_lossy();
            let here = match below {
                "" => name.into_owned(),
                _ => format!("{below}/{name}"),
            };
            folders(&path, &here, out);
            out.push(here);
        }
    }
}

#[test]
fn no_module_of_the_engine_depends_on_itself_through_others() {
    let src = src();
    let mut found = cycles(&graph(&src, &["crate"]));
    let mut all = Vec::new();
    folders(&src, "", &mut all);
    assert!(all.contains(&"api/http".to_owned()), "{all:?}");
    for folder in all {
        let absolute = format!("crate::{}", folder.replace('/', "::"));
        found.extend(cycles(&graph(&src.join(&folder), &["super", &absolute])));
    }
    assert!(found.is_empty(), "import cycles: {found:#?}");
}

/// What `api/` may call on the store: reads. Every public method of the store is either
/// here or in [`STORE_WRITES`], so a new one must be placed.
const STORE_READS: &[&str] = &[
    "export",
    "records_agents",
    "agents_heard",
    "may_act",
    "acting_epoch",
    "takeover_failures",
    "failures",
    "kept_driver",
    "driver_version",
    "drivers_changed",
    "listen_drivers",
    "claims_in_store",
    "claim_of",
    "conductor_name",
    "conductor_group",
    "hostname",
    "engines",
    "backend_name",
    "class",
    "touched_node",
    "deadlines_filed",
    "sleeping",
    "after",
    "len",
    "is_empty",
    "count",
    "docs",
    "history",
    "history_of",
    "history_event",
    "health",
    "is_degraded",
    "degraded",
    "fault",
    "path",
    "config_drive",
    "clock",
    "metrics",
    "timeouts",
    "size_on_disk",
    "node",
    "provision",
    "find_node",
    "list_nodes",
    "nodes_after",
    "node_count",
    "port",
    "port_named",
    "port_with_mac",
    "node_by_macs",
    "ports_of",
    "list_ports",
    "next_deadline",
    "deadline_index",
    "get",
    "find",
    "list",
    "engines",
    "orphaned",
    "current",
    "lease_times",
    "listen_deadlines",
    "next_due",
    "document",
    "find_document",
    "documents_after",
    "documents",
    "keeps_drivers",
    "kept_drivers",
];

/// The store's writes: only the conductor (and the sweeper, the engine) call them.
const STORE_WRITES: &[&str] = &[
    "import",
    "touch_heard",
    "claim_node",
    "intend",
    "refused",
    "put_document",
    "transfer_milestone",
    "release_node",
    "announce_drivers",
    "in_place",
    "set_config_drive",
    "open",
    "flush",
    "checkpoint",
    "create_node",
    "create_nodes",
    "update_node",
    "edit_node",
    "delete_node",
    "delete_node_with",
    "set_initial_available",
    "create_port",
    "insert_port",
    "delete_port",
    "update_port",
    "insert",
    "update",
    "delete",
    "insert_document",
    "keep_driver",
    "forget_driver",
    "update_document",
    "delete_document",
    "milestone",
    "failure",
    "record",
    "forget",
    "touch_provisioning",
    "touch",
    "report_progress",
    "apply_event",
    "apply_event_from",
    "apply_events",
    "fail_expired",
    "fail_expired_describing",
    "fail_expired_at",
    "failed",
    "leave",
    "open_shared",
    "wait_alone",
    "recover",
    "sweep",
    "leave_fault",
    "docs_to_write",
    "register",
    "renew",
    "declare_dead",
    "take_over",
    "claim",
    "release",
];

/// The method each use of the store in `code` calls: after `store()` or `store` (an
/// alias of it) and a `.`, the name, or the one after `docs()?.` or `history()?.`.
fn store_calls(code: &str) -> Vec<String> {
    let code: String = code.split_whitespace().collect();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut calls = Vec::new();
    for (at, _) in code.match_indices("store") {
        if code[..at].ends_with(ident) {
            continue;
        }
        let rest = &code[at + "store".len()..];
        let rest = rest.strip_prefix("()").unwrap_or(rest);
        let Some(rest) = rest.strip_prefix('.') else {
            continue;
        };
        let rest = [
            "docs.",
            "history.",
            "docs()?.",
            "docs_to_write()?.",
            "history()?.",
        ]
        .iter()
        .find_map(|sub| rest.strip_prefix(sub))
        .unwrap_or(rest);
        let name: String = rest.chars().take_while(|&c| ident(c)).collect();
        calls.push(name);
    }
    calls
}

#[test]
fn the_api_writes_only_through_the_conductor() {
    let mut methods = BTreeSet::new();
    for file in rust_files(&src().join("store")) {
        if file.file_name().unwrap() == "tests.rs" {
            continue;
        }
        let text = code(&file).replace("pub async fn ", "pub fn ");
        for (at, _) in text.match_indices("pub fn ") {
            let rest = &text[at + "pub fn ".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // A method: `&self` in its signature, before its body opens.
            let signature = &rest[..rest.find('{').unwrap_or(rest.len())];
            if signature.contains("&self") {
                methods.insert(name);
            }
        }
    }
    assert!(
        methods.contains("touch") && methods.contains("find_node"),
        "{methods:?}"
    );
    let placed: BTreeSet<String> = STORE_READS
        .iter()
        .chain(STORE_WRITES)
        .map(|s| s.to_string())
        .collect();
    let unplaced: Vec<_> = methods.difference(&placed).collect();
    assert!(
        unplaced.is_empty(),
        "store methods neither a read nor a write: {unplaced:?}"
    );

    let mut writes = Vec::new();
    for file in rust_files(&src().join("api")) {
        for call in store_calls(&code(&file)) {
            if !STORE_READS.contains(&call.as_str()) {
                writes.push(format!("{}: store.{call}", file.display()));
            }
        }
    }
    assert!(
        writes.is_empty(),
        "api/ calls the store beyond its reads: {writes:#?}"
    );
}

/// The modules a `mod.rs` or `lib.rs` declares, and whether its `//!` map names each.
fn unmapped(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let docs: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
        })
        .filter(|m| m != "tests" && !docs.contains(&format!("[`{m}`]")))
        .collect()
}

#[test]
fn every_module_map_names_every_module() {
    let src = src();
    let mut missing = Vec::new();
    for map in [
        "lib.rs",
        "api/mod.rs",
        "api/http/mod.rs",
        "driver_host/mod.rs",
    ] {
        for m in unmapped(&src.join(map)) {
            missing.push(format!("{map}: {m}"));
        }
    }
    assert!(
        missing.is_empty(),
        "modules the maps do not name: {missing:#?}"
    );
}

/// What names a backend of the store, outside `store/`.
const BACKENDS: &[&str] = &["SledStore", "SharedStore", "store::sled", "store::postgres"];

#[test]
fn no_module_outside_the_store_names_a_backend() {
    let store = src().join("store");
    let mut named = Vec::new();
    for file in rust_files(&src()) {
        if file.starts_with(&store) {
            continue;
        }
        let code = code(&file);
        for backend in BACKENDS.iter().filter(|b| code.contains(*b)) {
            named.push(format!("{}: {backend}", file.display()));
        }
    }
    assert!(
        named.is_empty(),
        "backends named outside store/: {named:#?}"
    );
    // The check sees a backend where one is named.
    assert!(code(&store.join("handle/mod.rs")).contains("SledStore"));
}

/// The rules both backends apply, each defined once above them (`store/`), and the
/// backends that call each. The shared store's touch is one grouped `UPDATE` on the
/// database's clock, so it states `touched` in SQL; the contract suite holds its answers
/// to the sled store's, deadline for deadline.
const RULES: &[(&str, &[&str])] = &[
    ("advanced", &["sled", "postgres"]),
    ("touched", &["sled"]),
    ("judge", &["sled", "postgres"]),
    ("enrolled", &["sled", "postgres"]),
    ("new_port", &["sled", "postgres"]),
    ("changed", &["sled", "postgres"]),
    ("edited", &["sled", "postgres"]),
    ("deletable", &["sled", "postgres"]),
    ("initially_available", &["sled", "postgres"]),
    ("shown", &["sled", "postgres"]),
    ("progressed", &["sled", "postgres"]),
    ("unique_values", &["sled", "postgres"]),
    ("check_document_sizes", &["sled", "postgres"]),
    ("rederived", &["sled", "postgres"]),
    ("restarted", &["sled", "postgres"]),
];

#[test]
fn every_rule_of_the_store_is_written_once_and_called_by_its_backends() {
    let store = src().join("store");
    for (rule, callers) in RULES {
        let defined: Vec<_> = rust_files(&src())
            .into_iter()
            .filter(|f| {
                let code = code(f);
                code.contains(&format!("fn {rule}(")) || code.contains(&format!("fn {rule}<"))
            })
            .collect();
        assert_eq!(defined.len(), 1, "{rule} is defined in {defined:?}");
        assert_eq!(
            defined[0].parent(),
            Some(store.as_path()),
            "{rule}: {defined:?}"
        );
        for backend in *callers {
            let calls = rust_files(&store.join(backend))
                .iter()
                .any(|f| code(f).contains(&format!("{rule}(")));
            assert!(calls, "the {backend} store does not call {rule}");
        }
    }
}

#[test]
fn the_check_finds_a_cycle() {
    let mut edges = Graph::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("a".into());
    edges.entry("c".into()).or_default().insert("a".into());
    assert_eq!(cycles(&edges), ["a → [\"b\"]", "b → [\"a\"]"]);
    let calls = store_calls(
        "app.conductor.store()\n  .find_node(x); let store = &s; store.docs.delete(k); restore.x()",
    );
    assert_eq!(calls, ["find_node", "delete"]);
    let code = "use crate::{store, node::Node};\nlet x = crate::clock::now();";
    assert_eq!(
        named_after(code, "crate"),
        ["clock", "node", "store"].map(String::from).into()
    );
}
