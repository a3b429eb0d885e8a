//! One driver call: a fresh `Store` and instance, limits on both, stderr captured.
//!
//! A call gets a memory cap (`StoreLimits`, trapping on a refused grow so the error says
//! so), a wall-clock deadline (the guest yields to tokio at every 10 ms epoch tick, so a
//! spinning driver is stopped on time without holding a thread), and a bounded stderr pipe whose text goes into the error (a
//! Rust panic message lands there). Whatever happens, the instance is dropped with its
//! store: a trapped instance cannot be re-entered, and a fresh one costs microseconds.

use std::sync::Arc;

use uuid::Uuid;
use wasmtime::{Store, StoreLimitsBuilder, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

use super::capability::bindings::{Description, Outcome};
use super::capability::{HostFailure, HostState, Services, v0_1};
use super::driver::{Limits, LoadedDriver, Pre};
use super::error::PluginError;

/// The exports of the driver world, as a call to make.
#[derive(Clone, Debug)]
pub enum Export {
    Describe,
    Validate,
    Deploy,
    Heartbeat,
    TearDown,
    CleanUp(String),
}

impl Export {
    /// The export's name in the driver world.
    pub fn name(&self) -> &'static str {
        match self {
            Export::Describe => "describe",
            Export::Validate => "validate",
            Export::Deploy => "deploy",
            Export::Heartbeat => "heartbeat",
            Export::TearDown => "tear-down",
            Export::CleanUp(_) => "clean-up",
        }
    }
}

/// What a call returned.
#[derive(Clone, Debug)]
pub enum Reply {
    Description(Description),
    Valid(Result<(), String>),
    Outcome(Outcome),
    Nothing,
}

/// Runs `export` of `driver` for `node` in a fresh instance.
pub async fn call(
    services: &Arc<Services>,
    driver: &LoadedDriver,
    node: Uuid,
    snapshot: Option<crate::node::Node>,
    export: Export,
) -> Result<Reply, PluginError> {
    let limits = driver.limits;
    let name = driver.description.name.clone();
    let _permit = services
        .call_slots
        .acquire()
        .await
        .expect("the call semaphore is never closed");
    let stderr = MemoryOutputPipe::new(limits.stderr_bytes);
    let state = HostState::new(
        node,
        snapshot,
        name.clone(),
        driver.description.power.clone(),
        services.clone(),
        stderr.clone(),
        StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes)
            .trap_on_grow_failure(true)
            .build(),
    );
    let mut store = Store::new(driver.pre.engine(), state);
    store.limiter(|s| &mut s.limits);
    // Yield to tokio at every epoch tick: a spinning driver must not hold a worker thread.
    // The deadline itself is the timeout around the call below.
    store.set_epoch_deadline(1);
    store.epoch_deadline_async_yield_and_update(1);

    let export_name = export.name();
    // The two lines' exports have the same names and shapes, in their own types.
    macro_rules! call {
        ($pre:expr, $description:expr, $outcome:expr) => {{
            let instance = $pre.instantiate_async(&mut store).await?;
            let (description, outcome) = ($description, $outcome);
            match export {
                Export::Describe => {
                    Reply::Description(description(instance.call_describe(&mut store).await?))
                }
                Export::Validate => Reply::Valid(instance.call_validate(&mut store).await?),
                Export::Deploy => Reply::Outcome(outcome(instance.call_deploy(&mut store).await?)),
                Export::Heartbeat => {
                    Reply::Outcome(outcome(instance.call_heartbeat(&mut store).await?))
                }
                Export::TearDown => {
                    Reply::Outcome(outcome(instance.call_tear_down(&mut store).await?))
                }
                Export::CleanUp(reason) => {
                    instance.call_clean_up(&mut store, &reason).await?;
                    Reply::Nothing
                }
            }
        }};
    }
    let result = async {
        let reply = match &driver.pre {
            Pre::Now(pre) => call!(pre, |d| d, |o| o),
            Pre::V0_1(pre) => call!(pre, v0_1::description, v0_1::outcome),
        };
        wasmtime::Result::Ok(reply)
    };
    let started = tokio::time::Instant::now();
    let finished = tokio::time::timeout(limits.deadline, result).await;
    services
        .store
        .metrics()
        .call(&name, export_name, started.elapsed());
    match finished {
        Ok(result) => result.map_err(|e| classify(e, &name, &limits, &stderr)),
        // The call's future (and with it the store and instance) is dropped here.
        Err(_) => Err(PluginError::Timeout {
            driver: name,
            deadline: limits.deadline,
        }),
    }
}

/// Turns a wasmtime error into what the operator needs to know.
fn classify(
    e: wasmtime::Error,
    driver: &str,
    limits: &Limits,
    stderr: &MemoryOutputPipe,
) -> PluginError {
    let driver = driver.to_owned();
    if let Some(HostFailure(message)) = e.downcast_ref::<HostFailure>() {
        return PluginError::Host {
            driver,
            message: message.clone(),
        };
    }
    if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        return PluginError::Timeout {
            driver,
            deadline: limits.deadline,
        };
    }
    let chain = format!("{e:#}");
    if chain.contains("forcing trap when growing memory") {
        return PluginError::OutOfMemory {
            driver,
            limit_mib: limits.memory_bytes >> 20,
        };
    }
    let trap = match e.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => e.root_cause().to_string(),
    };
    let stderr = String::from_utf8_lossy(&stderr.contents()).into_owned();
    PluginError::Trap {
        driver,
        trap,
        stderr,
    }
}
