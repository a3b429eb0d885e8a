//! A component's imports, read before it is compiled. One that needs an interface this
//! host does not link is refused in milliseconds, naming what it lacks, instead of after a
//! compile that takes seconds (minutes for a large component, such as a Python runtime).

use std::collections::BTreeSet;

use wasmparser::{ComponentTypeRef, Encoding, Parser, Payload};

use super::capability::{DRIVER_INTERFACES, DRIVER_LINES, LINKED_WASI};
use super::error::LoadError;

/// The interfaces `bytes` imports at its top level (`wasi:io/streams@0.2.6`), or why it is
/// not a component.
pub fn imports(bytes: &[u8]) -> Result<BTreeSet<String>, LoadError> {
    if !bytes.starts_with(b"\0asm") {
        return Err(LoadError::NotAComponent(
            "not a WebAssembly file (it does not begin with \\0asm)".into(),
        ));
    }
    let broken = |e: wasmparser::BinaryReaderError| LoadError::NotAComponent(e.to_string());
    let mut names = BTreeSet::new();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(broken)? {
            Payload::Version { encoding, .. } => {
                depth += 1;
                if depth == 1 && encoding == Encoding::Module {
                    return Err(LoadError::NotAComponent(
                        "a core WebAssembly module; build a component (cargo build --target wasm32-wasip2)".into(),
                    ));
                }
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(reader) if depth == 1 => {
                for import in reader {
                    let import = import.map_err(broken)?;
                    // Types a world uses (`use types.{outcome}`) are named too; they need
                    // nothing from the host.
                    if !matches!(import.ty, ComponentTypeRef::Type(_)) {
                        names.insert(import.name.name.to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    Ok(names)
}

/// Whether `version` (`0.2.6`) is of `line` (`0.2`).
fn on_line(version: &str, line: &str) -> bool {
    version == line
        || version
            .strip_prefix(line)
            .is_some_and(|v| v.starts_with('.'))
}

/// Whether the host links `import` (`package:name/interface@version`): its interface is
/// linked, at a version of the same major (and minor, for 0.x) line.
fn linked(import: &str) -> bool {
    let (interface, version) = import.split_once('@').unwrap_or((import, ""));
    match interface.strip_prefix("deployd:driver/") {
        Some(name) => {
            DRIVER_INTERFACES.contains(&name)
                && DRIVER_LINES.iter().any(|line| on_line(version, line))
        }
        None => LINKED_WASI.contains(&interface) && on_line(version, "0.2"),
    }
}

/// The line of the driver world a component was built for, from its imports: the line
/// of its `deployd:driver` imports (the newest, if it names none).
pub fn driver_line(imports: &BTreeSet<String>) -> &'static str {
    let named = |line: &&str| {
        imports.iter().any(|i| {
            i.strip_prefix("deployd:driver/")
                .and_then(|i| i.split_once('@'))
                .is_some_and(|(_, version)| on_line(version, line))
        })
    };
    DRIVER_LINES
        .iter()
        .copied()
        .find(named)
        .unwrap_or(DRIVER_LINES[0])
}

/// Refuses a component that imports what this host does not provide; else its imports.
pub fn check(bytes: &[u8]) -> Result<BTreeSet<String>, LoadError> {
    let imports = imports(bytes)?;
    let missing: Vec<&str> = imports
        .iter()
        .filter(|i| !linked(i))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        return Ok(imports);
    }
    Err(LoadError::Import(format!(
        "it imports {}, which deployd does not link (drivers get the deployd:driver@0.2 and @0.1 interfaces, and WASI 0.2 with wasi:http, without ambient capabilities)",
        missing.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_match_by_their_line() {
        assert!(linked("wasi:io/streams@0.2.6"));
        assert!(linked("wasi:io/streams@0.2.0"));
        assert!(!linked("wasi:io/streams@0.3.0"));
        assert!(linked("deployd:driver/node@0.1.0"));
        assert!(linked("deployd:driver/node@0.2.0"));
        assert!(!linked("deployd:driver/node@0.3.0"));
        // What Python and JavaScript runtimes import, linked without capability.
        assert!(linked("wasi:filesystem/types@0.2.9"));
        assert!(linked("wasi:sockets/tcp@0.2.9"));
        assert!(linked("wasi:http/outgoing-handler@0.2.10"));
        assert!(!linked("wasi:keyvalue/store@0.2.0"));
        assert!(!linked("wasi:io/streams"));
        assert!(!linked("deployd:driver/nodes@0.2.0"));
        assert!(!linked("wasi:io/streams@0.20.0"));
    }

    #[test]
    fn a_component_is_of_the_line_its_driver_imports_name() {
        let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        let old = set(&["wasi:io/streams@0.2.6", "deployd:driver/types@0.1.0"]);
        assert_eq!(driver_line(&old), "0.1");
        let now = set(&["deployd:driver/node@0.2.0", "deployd:driver/types@0.2.0"]);
        assert_eq!(driver_line(&now), "0.2");
        assert_eq!(driver_line(&set(&[])), "0.2");
    }

    #[test]
    fn garbage_and_core_modules_are_not_components() {
        assert!(matches!(
            imports(b"hello"),
            Err(LoadError::NotAComponent(_))
        ));
        let core = imports(b"\0asm\x01\0\0\0").unwrap_err();
        assert!(
            core.to_string().contains("core WebAssembly module"),
            "{core}"
        );
    }
}
