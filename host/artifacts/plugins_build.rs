//! Building `plugins/` for wasm32-wasip2 from a build script, shared by the build scripts
//! of `deployd-artifacts` (the bundled drivers) and `deployd-fixtures` (the test-only
//! ones), as wasmtime's `test-programs/artifacts` builds its guests.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The plugins workspace, and the wit and wire sources its crates read. Prints the
/// rerun-if-changed lines for all of them.
pub fn sources() -> PathBuf {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let host = manifest_dir.join("..");
    let plugins = host.join("../plugins").canonicalize().unwrap();
    for entry in walk(&plugins) {
        println!("cargo:rerun-if-changed={}", entry.display());
    }
    // The SDK shares the agent protocol's types with the engine.
    for dir in [host.join("wire"), host.join("../wit")] {
        println!(
            "cargo:rerun-if-changed={}",
            dir.canonicalize().unwrap().display()
        );
    }
    plugins
}

/// `cargo build --release --target wasm32-wasip2 <packages>` in the plugins workspace, into
/// `target_dir`; returns the directory the components land in.
pub fn build(plugins: &Path, target_dir: &Path, packages: &[&str], features: &[&str]) -> PathBuf {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(plugins)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--locked",
        ])
        .env("CARGO_TARGET_DIR", target_dir)
        // Flags meant for the host build must not leak into the guest build.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_PROFILE_RELEASE_DEBUG");
    for package in packages {
        cmd.args(["-p", package]);
    }
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    let status = cmd.status().expect("running cargo for the plugins");
    assert!(
        status.success(),
        "building plugins/ for wasm32-wasip2 failed; is the target installed? (rustup target add wasm32-wasip2)"
    );
    target_dir.join("wasm32-wasip2/release")
}

/// The path of a built component, checked.
pub fn component(dir: &Path, name: &str) -> String {
    let path = dir.join(format!("{name}.wasm"));
    assert!(path.exists(), "{} was not built", path.display());
    path.display().to_string()
}

/// Installs the wasm32-wasip2 standard library if the toolchain lacks it, so that the
/// README's first command works on a fresh machine: rustup installs the targets of
/// `rust-toolchain.toml` only with a toolchain it installs, not into one already there.
pub fn ensure_wasm_target() {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let installed = sysroot
        .as_deref()
        .is_some_and(|s| Path::new(s).join("lib/rustlib/wasm32-wasip2").exists());
    if installed {
        return;
    }
    println!("cargo:warning=installing the wasm32-wasip2 target (rustup target add wasm32-wasip2)");
    let added = Command::new("rustup")
        .args(["target", "add", "wasm32-wasip2"])
        .status();
    if !added.is_ok_and(|s| s.success()) {
        println!(
            "cargo:warning=could not install wasm32-wasip2; run `rustup target add wasm32-wasip2`"
        );
    }
}

/// Source files of the plugins workspace (not its build output).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.file_name().is_some_and(|n| n == "target") {
            continue;
        }
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
