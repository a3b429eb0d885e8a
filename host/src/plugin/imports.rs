//! A component's imports, read before it is compiled. One that needs an interface this
//! host does not link is refused in milliseconds, naming what it lacks, instead of after a
//! compile that takes seconds (minutes for a large component, such as a Python runtime).

use std::collections::BTreeSet;

use wasmparser::{ComponentTypeRef, Encoding, Parser, Payload};

use super::error::LoadError;
use crate::capability::LINKED_INTERFACES;

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

/// Whether the host links `import` (`package:name/interface@version`): its interface is
/// linked, at a version of the same major (and minor, for 0.x) line.
fn linked(import: &str) -> bool {
    let (interface, version) = import.split_once('@').unwrap_or((import, ""));
    LINKED_INTERFACES.iter().any(|(name, line)| {
        *name == interface && (version == *line || version.starts_with(&format!("{line}.")))
    })
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
