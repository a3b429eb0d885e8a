//! The deploy flows of the `agent_*` and `pxe_*` drivers, shared so that a driver crate is
//! only its name and power backend.
//!
//! Both boot the machine into its ramdisk agent and wait for its heartbeats. They differ in
//! who writes the image:
//! - agent family: the agent, told by `standby.prepare_image` (Ironic's classic agent
//!   deploy, reference §5.3);
//! - pxe family: the engine, after the agent exposed its disk (`deployd.expose_disk`).
//!
//! Progress is kept in the driver's scratch key `deploy_step`, so every heartbeat resumes
//! where the last one left off, across engine restarts too.
//!
//! Cleaning (provide, undeploy, manual) boots the ramdisk again (tear-down answers `wait`);
//! in `clean wait` the agent's heartbeats run the clean steps (the operator's, else
//! `erase_devices_metadata`) through `clean.get_clean_steps` and `clean.execute_clean_step`
//! (as Ironic does), then the machine is powered off and the node goes on to available
//! (or back to manageable).

use deployd_driver_sdk::agent::ErrorText;
use deployd_driver_sdk::bmc::{self, BootDevice, PowerState};
use deployd_driver_sdk::image::{self, WriteProgress as Progress};
use deployd_driver_sdk::node::{self, Node};
use deployd_driver_sdk::{Description, Family, Outcome, agent, log, scratch};
use serde_json::json;

const STEP: &str = "deploy_step";

/// The description of a driver of this family, at the driver crate's `version`.
pub fn description(name: &str, family: Family, power: &str, version: &str) -> Description {
    let summary = match family {
        Family::Agent => format!("The ramdisk agent writes the image; power by {power}"),
        Family::Pxe => {
            format!("The engine writes the image over the agent's disk; power by {power}")
        }
        Family::Fake => format!("No hardware; power by {power}"),
    };
    deployd_driver_sdk::describe_version(name, family, power, &summary, version)
}

/// The image and its checksum, as the engine prepared it (or, from an engine that does
/// not prepare images, as instance_info gives them).
struct Image {
    url: String,
    id: String,
    algo: String,
    hash: String,
    /// What `url` serves, when known (ironic-python-agent guesses from the content
    /// otherwise, so an unknown format is not sent as "raw").
    disk_format: Option<String>,
    /// The config drive's url, for the agent to write after the image.
    configdrive: Option<String>,
}

fn image(node: &Node) -> Result<Image, String> {
    let source = node
        .instance("image_source")
        .ok_or("instance_info.image_source is required")?;
    let id = source.rsplit('/').next().unwrap_or(source).to_owned();
    if let Some(prepared) = &node.image {
        return Ok(Image {
            url: prepared.url.clone(),
            id,
            algo: prepared.os_hash_algo.clone(),
            hash: prepared.os_hash_value.clone(),
            disk_format: Some(prepared.disk_format.clone()),
            configdrive: prepared.configdrive.clone(),
        });
    }
    let url = node.instance("image_url").unwrap_or(source).to_owned();
    let (algo, hash) = match (
        node.instance("image_os_hash_algo"),
        node.instance("image_os_hash_value"),
    ) {
        (Some(a), Some(h)) => (a.to_owned(), h.to_owned()),
        _ => {
            let sum = node.instance("image_checksum").ok_or(
                "instance_info needs image_os_hash_algo and image_os_hash_value, or image_checksum",
            )?;
            let algo = match sum.len() {
                64 => "sha256",
                128 => "sha512",
                _ => {
                    return Err(format!(
                        "image_checksum {sum:?} is neither a sha256 nor a sha512 digest"
                    ));
                }
            };
            (algo.to_owned(), sum.to_owned())
        }
    };
    if !matches!(algo.as_str(), "sha256" | "sha512") {
        return Err(format!(
            "unsupported image_os_hash_algo {algo:?}: use sha256 or sha512"
        ));
    }
    Ok(Image {
        url,
        id,
        algo,
        hash,
        disk_format: node.instance("image_disk_format").map(str::to_owned),
        configdrive: None,
    })
}

fn require(node: &Node, keys: &[&str]) -> Result<(), String> {
    let missing: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| !node.driver_info.contains_key(*k))
        .collect();
    match missing.as_slice() {
        [] => Ok(()),
        m => Err(format!("driver_info lacks {}", m.join(", "))),
    }
}

pub fn validate(power: &str) -> Result<(), String> {
    let node = node::get();
    match power {
        "ipmitool" => require(&node, &["ipmi_address"])?,
        "redfish" => require(&node, &["redfish_address", "redfish_system_id"])?,
        _ => {}
    }
    // The engine reads the checksum itself when it prepares the image (a digest, or a
    // checksum file's url): here only that the deploy has what it needs.
    if node.image.is_some() {
        return image(&node).map(|_| ());
    }
    node.instance("image_source")
        .ok_or("instance_info.image_source is required")?;
    let pair = node.instance("image_os_hash_algo").is_some()
        && node.instance("image_os_hash_value").is_some();
    if !pair && node.instance("image_checksum").is_none() {
        return Err(
            "instance_info needs image_os_hash_algo and image_os_hash_value, or image_checksum"
                .into(),
        );
    }
    Ok(())
}

/// Boot the machine into its ramdisk, then wait for the agent.
pub fn deploy() -> Outcome {
    let boot = scratch::remove(STEP)
        .and_then(|()| bmc::set_boot_device(BootDevice::Pxe, false))
        .and_then(|()| bmc::set_power(PowerState::Off))
        .and_then(|()| bmc::set_power(PowerState::On));
    match boot {
        Ok(()) => Outcome::Wait,
        Err(e) => Outcome::Fail(format!("could not boot the node into its ramdisk: {e}")),
    }
}

/// The agent family's heartbeat: start the write, follow it, then boot the instance.
pub fn agent_heartbeat() -> Outcome {
    if cleaning() {
        return into_outcome(clean_step());
    }
    into_outcome(agent_step())
}

fn cleaning() -> bool {
    node::get().provision_state == "clean wait"
}

/// Scratch key: the index of the clean step the agent runs (`clean.execute_clean_step`).
const CLEANING: &str = "clean_step";

/// The clean step an automated cleaning runs, as both agents name it.
const DEFAULT_STEP: (&str, &str) = ("deploy", "erase_devices_metadata");

/// The steps of this cleaning: the operator's (a manual cleaning), else the default.
fn clean_steps(node: &Node) -> Vec<(String, String, serde_json::Value)> {
    let given = node.clean_steps.iter().map(|s| {
        let text = |k: &str| s.get(k).and_then(serde_json::Value::as_str).unwrap_or("");
        let args = s.get("args").cloned().unwrap_or_else(|| json!({}));
        (text("interface").to_owned(), text("step").to_owned(), args)
    });
    let mut steps: Vec<_> = given.collect();
    if steps.is_empty() {
        steps.push((DEFAULT_STEP.0.into(), DEFAULT_STEP.1.into(), json!({})));
    }
    steps
}

/// In `clean wait`, as Ironic's `agent_base` cleans: for each step in turn, ask the agent
/// for its clean steps (`clean.get_clean_steps`), start the step with the agent's own step
/// document (the operator's args over its own) and hardware manager versions
/// (`clean.execute_clean_step`), follow it on the next heartbeats (`GET /v1/commands`);
/// after the last, power the machine off. Only clean-step commands are used, so
/// ironic-python-agent and deployd's agent are driven alike.
fn clean_step() -> Result<Outcome, String> {
    let node = node::get();
    let steps = clean_steps(&node);
    let Some(index) = scratch::get::<usize>(CLEANING) else {
        return start_clean_step(&node, &steps, 0);
    };
    let name = steps.get(index).map_or("?", |s| s.1.as_str()).to_owned();
    let last = match agent::last("execute_clean_step") {
        Ok(last) => last,
        Err(e) => return Ok(read_failed(e)),
    };
    match last {
        Some(c) if c.is_running() => Ok(Outcome::Wait),
        Some(c) if c.succeeded() => start_clean_step(&node, &steps, index + 1),
        Some(c) => {
            scratch::remove(CLEANING)?;
            Ok(Outcome::Fail(format!(
                "the agent's clean step {name} failed: {}",
                c.error_text()
            )))
        }
        None => {
            log::warn("the agent has no execute_clean_step command; starting the step again");
            start_clean_step(&node, &steps, index)
        }
    }
}

/// Starts step `index` (or ends the cleaning after the last one).
fn start_clean_step(
    node: &Node,
    steps: &[(String, String, serde_json::Value)],
    index: usize,
) -> Result<Outcome, String> {
    let Some((interface, name, args)) = steps.get(index) else {
        return clean_done();
    };
    let about = json!({
        "uuid": node.uuid,
        "properties": node.properties,
        "instance_info": node.instance_info,
        "driver_internal_info": {},
        "target_raid_config": node.target_raid_config.clone().unwrap_or_else(|| json!({})),
    });
    let listed = agent::run(
        "clean.get_clean_steps",
        &json!({"node": about, "ports": []}),
        true,
    )?;
    let result = match &listed.command_result {
        Some(r) if listed.succeeded() => r.clone(),
        _ => {
            return Ok(Outcome::Fail(format!(
                "the agent could not list its clean steps: {}",
                listed.error_text()
            )));
        }
    };
    let offered = result
        .get("clean_steps")
        .and_then(serde_json::Value::as_object)
        .into_iter()
        .flat_map(|managers| managers.values())
        .filter_map(serde_json::Value::as_array)
        .flatten();
    let mut wanted = offered
        .filter(|s| {
            s.get("interface").and_then(serde_json::Value::as_str) == Some(interface)
                && s.get("step").and_then(serde_json::Value::as_str) == Some(name)
        })
        .cloned();
    let Some(mut step) = wanted.next() else {
        // Ironic's words, which clients match on.
        return Ok(Outcome::Fail(format!(
            "Cannot clean node {}: node does not support this clean step: {{'interface': '{interface}', 'step': '{name}'}}",
            node.uuid
        )));
    };
    if args.as_object().is_some_and(|a| !a.is_empty()) {
        step["args"] = args.clone();
    }
    let params = json!({
        "step": step,
        "node": about,
        "ports": [],
        "clean_version": result.get("hardware_manager_version").cloned().unwrap_or(json!({})),
    });
    let started = agent::run("clean.execute_clean_step", &params, false)?;
    if started.succeeded() {
        return start_clean_step(node, steps, index + 1);
    }
    if !started.is_running() {
        scratch::remove(CLEANING)?;
        return Ok(Outcome::Fail(format!(
            "the agent refused the clean step {name}: {}",
            started.error_text()
        )));
    }
    scratch::set(CLEANING, &index)?;
    log::info(&format!(
        "the agent is running clean step {} of {}: {interface}.{name}",
        index + 1,
        steps.len()
    ));
    Ok(Outcome::Wait)
}

/// The last clean step succeeded: the machine goes off and cleaning ends.
fn clean_done() -> Result<Outcome, String> {
    scratch::remove(CLEANING)?;
    log::info("the clean steps are done");
    power_off()?;
    Ok(Outcome::Done)
}

/// driver_info key: seconds the machine may take to power itself off once its agent was
/// asked to, before the BMC forces it (default [`SOFT_POWER_OFF_WAIT`], at most
/// [`MAX_SOFT_POWER_OFF_WAIT`], so the step stays within the driver's deadline).
pub const SOFT_POWER_OFF_TIMEOUT: &str = "soft_power_off_timeout";
const SOFT_POWER_OFF_WAIT: u64 = 10;
const MAX_SOFT_POWER_OFF_WAIT: u64 = 20;

/// Powers the machine off without losing what its agent wrote, as Ironic's
/// `tear_down_agent` does: the agent flushes the disk (`standby.sync`: ironic-python-agent
/// writes images without an fsync), then powers the machine off itself; only a machine
/// still on after [`SOFT_POWER_OFF_TIMEOUT`] is forced off by the BMC.
fn power_off() -> Result<(), String> {
    match agent::run("standby.sync", &json!({}), true) {
        Ok(c) if c.succeeded() => {}
        Ok(c) => log::warn(&format!(
            "the agent could not sync its disk: {}",
            c.error_text()
        )),
        Err(e) => log::warn(&format!("the agent could not sync its disk: {e}")),
    }
    match agent::run("standby.power_off", &json!({}), false) {
        Ok(_) => {
            if !wait_until_off(soft_power_off_wait()) {
                log::warn("the machine did not power itself off in time; forcing it off");
            }
        }
        Err(e) => log::warn(&format!(
            "soft power-off through the agent failed ({e}); using the BMC"
        )),
    }
    // Records the power state; forces the machine off only if it is still on.
    Ok(bmc::set_power(PowerState::Off)?)
}

fn soft_power_off_wait() -> u64 {
    let node = node::get();
    let given = node.driver_info.get(SOFT_POWER_OFF_TIMEOUT).and_then(|v| {
        v.as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
    });
    given
        .unwrap_or(SOFT_POWER_OFF_WAIT)
        .min(MAX_SOFT_POWER_OFF_WAIT)
}

/// Polls the BMC until the machine is off or `seconds` pass; whether it went off.
fn wait_until_off(seconds: u64) -> bool {
    let polls = seconds * 4;
    for poll in 0..=polls {
        if matches!(bmc::get_power(), Ok(PowerState::Off)) {
            return true;
        }
        if poll < polls {
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    }
    false
}

fn agent_step() -> Result<Outcome, String> {
    let node = node::get();
    let step: Option<String> = scratch::get(STEP);
    if step.as_deref() == Some("writing") {
        let last = match agent::last("prepare_image") {
            Ok(last) => last,
            Err(e) => return Ok(read_failed(e)),
        };
        match last {
            Some(c) if c.is_running() => return Ok(Outcome::Wait),
            Some(c) if c.succeeded() => {
                // "… written to device /dev/sdb …", in both agents' words.
                let result = c.command_result.as_ref().and_then(|r| r.get("result"));
                let device = result
                    .and_then(serde_json::Value::as_str)
                    .and_then(|r| r.split("written to device ").nth(1))
                    .and_then(|rest| rest.split_whitespace().next());
                record_root_device(device);
                return boot_instance();
            }
            Some(c) => {
                return Ok(Outcome::Fail(format!(
                    "the agent failed to write the image: {}",
                    c.error_text()
                )));
            }
            // The agent restarted and forgot the command: write again.
            None => log::warn("the agent has no prepare_image command; starting the write again"),
        }
    }
    let image = image(&node)?;
    let mut info = json!({
        "id": image.id,
        "urls": [image.url],
        "os_hash_algo": image.algo,
        "os_hash_value": image.hash,
        "container_format": "bare",
        "stream_raw_images": true,
        "node_uuid": node.uuid,
    });
    if let Some(format) = &image.disk_format {
        info["disk_format"] = json!(format);
    }
    // As Ironic: the config drive goes with the image, and the agent writes it to a
    // partition at the end of the disk once the image is on it.
    let mut params = json!({ "image_info": info });
    if let Some(url) = &image.configdrive {
        params["configdrive"] = json!(url);
    }
    let command = agent::run("standby.prepare_image", &params, false)?;
    if !command.is_running() && !command.succeeded() {
        return Ok(Outcome::Fail(format!(
            "the agent refused to write the image: {}",
            command.error_text()
        )));
    }
    scratch::set(STEP, &"writing")?;
    log::info(&format!("the agent is writing image {}", image.id));
    Ok(Outcome::Wait)
}

/// The pxe family's heartbeat: expose the disk, let the engine write, then boot.
pub fn pxe_heartbeat() -> Outcome {
    if cleaning() {
        return into_outcome(clean_step());
    }
    into_outcome(pxe_step())
}

fn pxe_step() -> Result<Outcome, String> {
    if scratch::get::<String>(STEP).as_deref() == Some("writing") {
        match image::progress() {
            Progress::Running(_) => return Ok(Outcome::Wait),
            Progress::Done(bytes) => {
                log::info(&format!("the engine wrote {bytes} bytes"));
                return boot_instance();
            }
            Progress::Failed(e) => {
                return Ok(Outcome::Fail(format!("writing the image failed: {e}")));
            }
            Progress::None => log::warn("no image write is known for this node; starting it again"),
        }
    }
    let node = node::get();
    let image = image(&node)?;
    let exposed = agent::run("deployd.expose_disk", &json!({}), true)?;
    let device = exposed
        .command_result
        .as_ref()
        .and_then(|r| r.get("device"));
    record_root_device(device.and_then(serde_json::Value::as_str));
    let target = exposed
        .command_result
        .as_ref()
        .and_then(|r| r.get("url"))
        .and_then(|u| u.as_str())
        .ok_or_else(|| {
            format!(
                "the agent did not expose its disk: {}",
                exposed.error_text()
            )
        })?
        .to_owned();
    image::start_write(&image.url, &image.algo, &image.hash, &target)?;
    scratch::set(STEP, &"writing")?;
    Ok(Outcome::Wait)
}

/// Scratch key (`driver_internal_info.scratch.root_device`): the disk the agent chose for
/// the image (by the node's root device hints, or its default), for operators to see.
const ROOT_DEVICE: &str = "root_device";

fn record_root_device(device: Option<&str>) {
    let Some(device) = device else {
        return;
    };
    log::info(&format!("the image goes to {device}"));
    if let Err(e) = scratch::set(ROOT_DEVICE, &json!({ "name": device })) {
        log::warn(&format!("could not record the root device: {e}"));
    }
}

/// The image is on the disk: boot from it.
fn boot_instance() -> Result<Outcome, String> {
    power_off()?;
    bmc::set_boot_device(BootDevice::Disk, true)?;
    bmc::set_power(PowerState::On)?;
    scratch::remove(STEP)?;
    Ok(Outcome::Done)
}

/// Reading the agent's commands failed (it reset the connection, say): not the flow's
/// failure. The node waits for the agent's next heartbeat, which reads again; an agent
/// that died sends none, and the engine's callback timeout fails the node, as it must.
fn read_failed(e: deployd_driver_sdk::Error) -> Outcome {
    log::warn(&format!(
        "could not read the agent's commands ({}); waiting for its next heartbeat",
        e.message()
    ));
    Outcome::Wait
}

fn into_outcome(step: Result<Outcome, String>) -> Outcome {
    step.unwrap_or_else(Outcome::Fail)
}

/// Undeploy or manual cleaning: power the instance off and boot the ramdisk, whose agent
/// erases the disk when it heartbeats (see [`clean_step`]).
pub fn tear_down() -> Outcome {
    let boot = scratch::remove(STEP)
        .and_then(|()| scratch::remove(CLEANING))
        .and_then(|()| bmc::set_power(PowerState::Off))
        .and_then(|()| bmc::set_boot_device(BootDevice::Pxe, false))
        .and_then(|()| bmc::set_power(PowerState::On));
    match boot {
        Ok(()) => Outcome::Wait,
        Err(e) => Outcome::Fail(format!(
            "could not boot the node into its ramdisk to clean it: {e}"
        )),
    }
}

pub fn clean_up(reason: String) {
    log::warn(&format!("cleaning up after: {reason}"));
    let _ = scratch::remove(STEP);
    let _ = scratch::remove(CLEANING);
    if let Err(e) = bmc::set_power(PowerState::Off) {
        log::error(&format!("could not power the node off: {e}"));
    }
}

/// Defines a driver type of a family with a power backend.
#[macro_export]
macro_rules! family_driver {
    ($ty:ident, $name:literal, $family:ident, $power:literal, $heartbeat:path) => {
        struct $ty;

        impl deployd_driver_sdk::Driver for $ty {
            fn describe() -> deployd_driver_sdk::Description {
                $crate::description(
                    $name,
                    deployd_driver_sdk::Family::$family,
                    $power,
                    env!("CARGO_PKG_VERSION"),
                )
            }
            fn validate() -> Result<(), String> {
                $crate::validate($power)
            }
            fn deploy() -> deployd_driver_sdk::Outcome {
                $crate::deploy()
            }
            fn heartbeat() -> deployd_driver_sdk::Outcome {
                $heartbeat()
            }
            fn tear_down() -> deployd_driver_sdk::Outcome {
                $crate::tear_down()
            }
            fn clean_up(reason: String) {
                $crate::clean_up(reason)
            }
        }

        deployd_driver_sdk::export_driver!($ty);
    };
}
