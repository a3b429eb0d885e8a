//! What a loaded driver is: one immutable version (its code compiled and linked, its
//! description) and the limits every call of it runs under.

use std::time::Duration;

use super::capability::HostState;
use super::capability::bindings::{Description, DriverPre, v0_1};
use crate::clock::Timestamp;

/// One immutable driver version, ready to instantiate.
pub struct LoadedDriver {
    pub description: Description,
    /// sha256 of the component's bytes, hex.
    pub hash: String,
    /// This version: the code and its limits (see [`version_id`]). Flows pin it.
    pub id: String,
    pub size: usize,
    pub loaded_at: Timestamp,
    pub limits: Limits,
    pub(crate) pre: Pre,
}

/// A driver's code, linked and type-checked against the line of the world it was built
/// for: the same engine runs both, through one linker.
#[derive(Clone)]
pub(crate) enum Pre {
    /// `deployd:driver@0.2`.
    Now(DriverPre<HostState>),
    /// `deployd:driver@0.1`, adapted by [`super::capability::v0_1`].
    V0_1(v0_1::DriverPre<HostState>),
}

impl Pre {
    /// Type-checks `pre`'s exports against `line`, the line its imports name
    /// ([`super::imports::driver_line`]). The exports of both lines have the same shapes
    /// today, and wasmtime checks shapes, so the imports are what tells them apart.
    pub fn new(
        pre: wasmtime::component::InstancePre<HostState>,
        line: &str,
    ) -> wasmtime::Result<Pre> {
        match line {
            "0.1" => v0_1::DriverPre::new(pre).map(Pre::V0_1),
            _ => DriverPre::new(pre).map(Pre::Now),
        }
    }

    pub fn engine(&self) -> &wasmtime::Engine {
        match self {
            Pre::Now(pre) => pre.engine(),
            Pre::V0_1(pre) => pre.engine(),
        }
    }
}

impl LoadedDriver {
    /// The line of the driver world the driver was built for: "0.2" or "0.1".
    pub fn world(&self) -> &'static str {
        match self.pre {
            Pre::Now(_) => "0.2",
            Pre::V0_1(_) => "0.1",
        }
    }
}

/// A version's id: the content hash alone under the default limits (so pins written
/// before limits were part of it still resolve), else the hash and the limits.
pub fn version_id(hash: &str, limits: &Limits) -> String {
    if *limits == Limits::default() {
        hash.to_owned()
    } else {
        format!(
            "{hash}+{}b+{}ms+{}e",
            limits.memory_bytes,
            limits.deadline.as_millis(),
            limits.stderr_bytes
        )
    }
}

/// What one call of a driver may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Linear memory, in bytes.
    pub memory_bytes: usize,
    /// Wall-clock time for the call, host calls included.
    #[serde(rename = "deadline_ms", with = "millis")]
    pub deadline: Duration,
    /// Captured stderr, in bytes (the rest is dropped).
    pub stderr_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 64 << 20,
            deadline: Duration::from_secs(30),
            stderr_bytes: 16 << 10,
        }
    }
}

/// The longest deadline an operator may give a driver call.
pub const MAX_DEADLINE: Duration = Duration::from_secs(600);

impl Limits {
    /// Limits an operator asked for (MiB and ms; `None` keeps the default), each checked
    /// against what the engine can give, without overflow.
    pub fn checked(memory_mib: Option<u64>, deadline_ms: Option<u64>) -> Result<Limits, String> {
        let mut limits = Limits::default();
        if let Some(mib) = memory_mib {
            let max = super::runtime::MAX_MEMORY >> 20;
            if mib == 0 || mib > max as u64 {
                return Err(format!("memory_mib must be from 1 to {max}, not {mib}"));
            }
            limits.memory_bytes = (mib as usize) << 20;
        }
        if let Some(ms) = deadline_ms {
            let max = MAX_DEADLINE.as_millis();
            if ms == 0 || u128::from(ms) > max {
                return Err(format!("deadline_ms must be from 1 to {max}, not {ms}"));
            }
            limits.deadline = Duration::from_millis(ms);
        }
        Ok(limits)
    }
}

impl std::fmt::Debug for LoadedDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedDriver")
            .field("name", &self.description.name)
            .field("version", &self.description.version)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}
