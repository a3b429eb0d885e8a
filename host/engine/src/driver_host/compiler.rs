//! Where a driver is compiled: in a child process, so its memory goes back when it ends.
//!
//! Compiling a component with Cranelift takes memory in proportion to its code: an 18 MB
//! Python driver took 380 MiB, and the allocator kept it after the compile was done. A
//! hostile component can ask for more. `deployd serve` therefore compiles each driver in
//! `deployd compile-driver` ([`child_main`]): the component goes in on stdin, the compiled
//! artifact comes out in a file the engine then maps (file-backed pages, not heap). The
//! child runs under an address-space limit and a deadline, so a compile that would grow
//! without bound is stopped and reported, and the engine's own memory never sees it.
//!
//! Tests and embedders that are not the `deployd` binary compile in process
//! ([`Compiler::InProcess`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasmtime::component::Component;

use super::error::LoadError;
use super::runtime;

/// How long one compile may take (a Python driver takes about 20 s on 2 cores).
pub const COMPILE_DEADLINE: Duration = Duration::from_secs(600);

/// The child's default address-space limit (`[plugins] compile_memory_mib`).
pub const DEFAULT_COMPILE_MEMORY_MIB: u64 = 4096;

/// The child's exit code for a component Cranelift refused (the component's fault).
const REFUSED: i32 = 2;
/// The child's exit code for an engine whose settings differ from the parent's.
const INCOMPATIBLE: i32 = 3;

/// How much of the child's stderr is kept for the error message.
const STDERR_KEPT: usize = 16 << 10;

/// How the registry compiles a component.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Compiler {
    /// On a blocking thread of this process.
    #[default]
    InProcess,
    /// In a child process.
    Child(ChildCompiler),
}

/// `program args… --compat KEY --memory-mib N --out FILE`, fed the component on stdin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildCompiler {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The child's address-space limit.
    pub memory_mib: u64,
}

impl Compiler {
    /// This executable's `compile-driver` subcommand (for the `deployd` binary).
    pub fn this_executable(memory_mib: u64) -> std::io::Result<Compiler> {
        Ok(Compiler::Child(ChildCompiler {
            program: std::env::current_exe()?,
            args: vec!["compile-driver".into()],
            memory_mib,
        }))
    }
}

impl ChildCompiler {
    /// Compiles `bytes` in a child process into `out`, for an engine whose compatibility key
    /// is `compat`. `out` exists, complete and fsynced, only if this returns `Ok`.
    pub async fn compile(&self, compat: &str, bytes: &[u8], out: &Path) -> Result<(), LoadError> {
        let ChildCompiler {
            program,
            args,
            memory_mib,
        } = self;
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .arg("--compat")
            .arg(compat)
            .arg("--memory-mib")
            .arg(memory_mib.to_string())
            .arg("--out")
            .arg(out)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            // mimalloc (deployd's allocator) reserves 1 GiB of address space up front: a
            // smaller reserve lets the limit measure what the compile takes. A panic's
            // message is enough; its backtrace would crowd out the error.
            .env("MIMALLOC_ARENA_RESERVE", "64MiB")
            .env("RUST_BACKTRACE", "0")
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                std::io::Error::new(e.kind(), format!("starting {}: {e}", program.display()))
            })?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let feed = async move {
            // A child that stopped early closes its stdin; its status says why.
            let _ = stdin.write_all(bytes).await;
        };
        let said = async move {
            let (mut kept, mut buf) = (Vec::new(), [0u8; 8192]);
            while let Ok(n @ 1..) = stderr.read(&mut buf).await {
                let room = STDERR_KEPT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
            String::from_utf8_lossy(&kept).trim().to_owned()
        };
        let run = async {
            let ((), said) = tokio::join!(feed, said);
            (child.wait().await, said)
        };
        let Ok((status, said)) = tokio::time::timeout(COMPILE_DEADLINE, run).await else {
            // Dropping the child kills it.
            return Err(LoadError::Compiler(format!(
                "the compile took more than {} s and was stopped",
                COMPILE_DEADLINE.as_secs()
            )));
        };
        outcome(status?, &said, *memory_mib)
    }
}

/// What a child's exit means, with what it said on stderr.
fn outcome(status: std::process::ExitStatus, said: &str, memory_mib: u64) -> Result<(), LoadError> {
    use std::os::unix::process::ExitStatusExt;
    let said_suffix = if said.is_empty() {
        String::new()
    } else {
        format!(": {said}")
    };
    let how = match (status.code(), status.signal()) {
        (Some(0), _) => return Ok(()),
        (Some(REFUSED), _) => return Err(LoadError::NotAComponent(said.to_owned())),
        (Some(INCOMPATIBLE), _) => {
            return Err(LoadError::Compiler(format!(
                "the compiler is not this engine's{said_suffix}"
            )));
        }
        (Some(code), _) => format!("failed with exit status {code}"),
        (None, signal) => format!("was stopped by signal {}", signal.unwrap_or(0)),
    };
    Err(LoadError::Compiler(format!(
        "the compiler {how} (a compile that needs more than its {memory_mib} MiB of address \
         space ends this way: raise [plugins] compile_memory_mib if the driver is trusted){said_suffix}"
    )))
}

/// The component whose code a child just wrote to `path` (for a load the cache does not
/// keep). The file may be removed once this returns: the code stays mapped.
pub fn load_compiled(engine: &wasmtime::Engine, path: &Path) -> Result<Component, LoadError> {
    // SAFETY: `path` is a file this load created and `ChildCompiler::compile` filled with
    // what wasmtime compiled for the component, under this engine's compatibility key
    // (the child checked it); nothing else writes it.
    #[allow(unsafe_code)]
    unsafe { Component::deserialize_file(engine, path) }
        .map_err(|e| LoadError::Compiler(format!("loading the compiled code: {e:#}")))
}

/// `deployd compile-driver`: compiles the component on stdin into `out` under a
/// `memory_mib` address-space limit. Returns the process's exit code.
pub fn child_main(compat: &str, memory_mib: u64, out: &Path) -> i32 {
    let limit = memory_mib.saturating_mul(1 << 20);
    let limit = rustix::process::Rlimit {
        current: Some(limit),
        maximum: Some(limit),
    };
    if let Err(e) = rustix::process::setrlimit(rustix::process::Resource::As, limit) {
        eprintln!("setting the compiler's memory limit: {e}");
        return 1;
    }
    let mut bytes = Vec::new();
    if let Err(e) = std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes) {
        eprintln!("reading the component: {e}");
        return 1;
    }
    let engine = match runtime::compiling_engine() {
        Ok(engine) => engine,
        Err(e) => {
            eprintln!("starting the compiler: {e:#}");
            return 1;
        }
    };
    let key = runtime::compatibility_key(&engine);
    if key != compat {
        eprintln!("this compiler's engine ({key}) differs from the engine's ({compat})");
        return INCOMPATIBLE;
    }
    let code = match engine.precompile_component(&bytes) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{e:#}");
            return REFUSED;
        }
    };
    drop(bytes);
    let written = (|| {
        let mut file = std::fs::File::create(out)?;
        std::io::Write::write_all(&mut file, &code)?;
        file.sync_all()
    })();
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("writing {}: {e}", out.display());
            1
        }
    }
}
