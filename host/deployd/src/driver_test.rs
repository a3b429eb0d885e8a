//! `deployd driver test my.wasm`: a driver against one simulated machine, with nothing
//! but this binary. In a temporary directory: an engine on sled, a lab machine behind a
//! Redfish BMC whose network boot starts a real `deployd agent`, and an image of random
//! bytes. The driver is loaded as an operator loads one, and a node on it goes through
//! manage, provide (cleaning through the driver), deploy and undeploy; each step's result
//! is printed, the disk is checked against the image after the deploy, and the node's
//! timeline is printed at the end (or where a step went wrong).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use deployd_engine::clock::Clock;
use deployd_engine::config::Config;
use deployd_engine::engine::Engine;
use deployd_lab::operator::Operator;
use deployd_lab::{AgentMode, Lab, LabArgs};
use deployd_wire::state_machine::ProvisionState;
use deployd_wire::targets::ProvisionTarget;

#[derive(clap::Args, Clone, Debug)]
pub struct DriverTestArgs {
    /// The driver component (`cargo build --release --target wasm32-wasip2`).
    pub file: PathBuf,
    /// Image size in MiB (random bytes).
    #[arg(long, default_value_t = 8)]
    pub image_mb: u64,
    /// The longest one step may take, in seconds.
    #[arg(long, default_value_t = 60)]
    pub step_timeout: u64,
}

pub async fn run(args: DriverTestArgs) -> anyhow::Result<()> {
    let component =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let dir = tempfile::Builder::new()
        .prefix("deployd-driver-test-")
        .tempdir()?;
    let dir = dir.path();
    let image = dir.join("image.raw");
    let sha256 = deployd_lab::random_image(&image, args.image_mb << 20).await?;

    let mut config = Config {
        data_dir: dir.join("engine"),
        listen: "127.0.0.1:0".parse()?,
        ..Config::default()
    };
    // Only the driver under test: it may share a bundled driver's name.
    config.plugins.bundled = false;
    config.conductor.check_provision_state_interval = 1;
    config.conductor.deploy_callback_timeout = args.step_timeout;
    config.conductor.clean_callback_timeout = args.step_timeout;
    config.api.file_url_allowed_paths = vec![dir.to_path_buf()];
    config.api.ramdisk_heartbeat_timeout = 2;
    let engine = Engine::start(&config, Clock::new()).await?;
    let api_url = format!("http://{}", engine.addr);
    let lab = Lab::start(
        &LabArgs {
            machines: 1,
            dir: dir.join("lab"),
            listen: "127.0.0.1:0".parse()?,
            api_url: api_url.clone(),
            throttle: None,
            heartbeat_interval: None,
            agent_tasks: true,
            agent_tls: deployd_agent::TlsMode::Auto,
            ipmi_python: None,
            vm: deployd_lab::VmArgs::default(),
        },
        AgentMode::Task,
    )
    .await?;
    let op = Operator::new(&api_url);

    let loaded = op
        .load_driver(&component)
        .await
        .context("loading the driver")?;
    let name = loaded["name"].as_str().unwrap_or_default().to_owned();
    let info = &loaded["deployd"];
    let (family, power) = (
        info["family"].as_str().unwrap_or_default(),
        info["power"].as_str().unwrap_or_default(),
    );
    println!(
        "loaded {name} {} ({family} family, {power} power, {} bytes)",
        info["version"].as_str().unwrap_or_default(),
        info["size"]
    );
    if !matches!(power, "redfish" | "fake") {
        bail!("the lab's machine has a Redfish BMC: a driver with {power} power cannot drive it");
    }
    let machine = lab.enrollments().remove(0);
    let node = op.enroll(&machine, &name, &image, &sha256).await?;
    println!("enrolled {} as node {node}, with its port", machine.name);

    let limit = Duration::from_secs(args.step_timeout + 10);
    let steps = [
        (ProvisionTarget::Manage, ProvisionState::Manageable),
        (ProvisionTarget::Provide, ProvisionState::Available),
        (ProvisionTarget::Active, ProvisionState::Active),
        (ProvisionTarget::Deleted, ProvisionState::Available),
    ];
    let mut outcome = Ok(());
    for (target, expected) in steps {
        let started = tokio::time::Instant::now();
        op.provision(&node, target).await?;
        let n = op.settled(&node, limit).await?;
        let state = n.provision_state.map_or("?", |s| s.as_str());
        println!(
            "{:>9} → {state} in {:.1} s{}",
            target.as_str(),
            started.elapsed().as_secs_f64(),
            n.last_error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
        if n.provision_state != Some(expected) {
            outcome = Err(anyhow::anyhow!(
                "{target} ended in {state}, not {expected}: {}",
                n.last_error.as_deref().unwrap_or("no last_error")
            ));
            break;
        }
        if target == ProvisionTarget::Active && family != "fake" {
            let disk = deployd_lab::disk_sha256(&machine.disk)?;
            if disk != sha256 {
                outcome = Err(anyhow::anyhow!(
                    "the node is active but its disk does not hold the image"
                ));
                break;
            }
            println!(
                "          the disk holds the image (sha256 {})",
                &sha256[..16]
            );
        }
    }
    println!("\ntimeline:");
    for line in deployd_client::timeline::lines(&op.history(&node).await?) {
        println!("  {line}");
    }
    lab.stop();
    engine.shutdown().await?;
    outcome
}
