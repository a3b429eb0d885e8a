//! `deployd demo`: the whole story on one machine, in about a minute.
//!
//! In a temporary directory: the engine on sled with the bundled drivers, a lab of
//! machines behind a Redfish BMC (each power-on boots a real `deployd agent` process), and
//! a raw image of random bytes. The machines are enrolled through the HTTP API with
//! `agent_redfish` and `pxe_redfish`, and deployed with a `deploy_callback_timeout` a few
//! times shorter than the write takes: heartbeats keep them alive. Midway, one agent is
//! killed; its node times out with a `last_error` saying so. At the end every disk is
//! checked against the image's sha256 and a summary is printed. Ctrl-C stops everything.
//!
//! - [`screen`]: the live progress table and the summary.

mod screen;

use deployd_wire::state_machine::ProvisionState;
use deployd_wire::targets::ProvisionTarget;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;

use deployd_engine::clock::Clock;
use deployd_engine::config::Config;
use deployd_engine::engine::Engine;
use deployd_lab::operator::Operator;
use deployd_lab::{AgentMode, Lab, LabArgs};
use screen::{Row, Screen};

#[derive(clap::Args, Clone, Debug)]
pub struct DemoArgs {
    /// Simulated machines (3–5 tell the story; more work too).
    #[arg(long, default_value_t = 4)]
    pub machines: usize,
    /// Image size in MiB (random bytes).
    #[arg(long, default_value_t = 256)]
    pub image_mb: u64,
    /// Each agent's write rate (suffixes K, M, G).
    #[arg(long, default_value = "16M", value_parser = deployd_agent::runner::parse_rate)]
    pub throttle: u64,
    /// deploy_callback_timeout in seconds: far shorter than a write takes.
    #[arg(long, default_value_t = 3)]
    pub timeout: u64,
    /// Do not kill an agent midway.
    #[arg(long)]
    pub no_kill: bool,
    /// Keep the temporary directory (engine data, disks, logs) and say where it is.
    #[arg(long)]
    pub keep: bool,
}

/// Runs the demo; Ctrl-C or SIGTERM stops it and leaves nothing running.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.machines >= 1, "--machines must be at least 1");
    anyhow::ensure!(args.timeout >= 1, "--timeout must be at least 1 s");
    let dir = tempfile::Builder::new().prefix("deployd-demo-").tempdir()?;
    let outcome = tokio::select! {
        r = story(&args, dir.path()) => r,
        _ = deployd_agent::signal::shutdown() => {
            // Dropping the story stopped the lab (every agent killed) and the engine.
            anyhow::bail!("interrupted: the agents and the engine are stopped");
        }
    };
    if args.keep {
        let kept = dir.keep();
        println!("kept {}", kept.display());
    }
    match outcome? {
        true => Ok(()),
        false => anyhow::bail!("the demo did not end as expected (see above)"),
    }
}

/// The story; true when it ended as told. Dropping it stops lab and engine.
async fn story(args: &DemoArgs, dir: &Path) -> anyhow::Result<bool> {
    let image = dir.join("image.raw");
    print!("writing a {} MiB image of random bytes… ", args.image_mb);
    let sha256 = deployd_lab::random_image(&image, args.image_mb << 20).await?;
    println!("sha256 {}", &sha256[..16]);

    let mut config = Config {
        data_dir: dir.join("engine"),
        listen: "127.0.0.1:0".parse()?,
        ..Config::default()
    };
    config.conductor.deploy_callback_timeout = args.timeout;
    config.conductor.clean_callback_timeout = args.timeout;
    config.conductor.check_provision_state_interval = 1;
    config.api.file_url_allowed_paths = vec![dir.to_path_buf()];
    // AgentSessions heartbeat every 30–60 % of this: well inside the timeout.
    config.api.ramdisk_heartbeat_timeout = args.timeout.max(2) - 1;
    let engine = Engine::start(&config, Clock::new()).await?;
    let api_url = format!("http://{}", engine.addr);
    let lab = Lab::start(
        &LabArgs {
            machines: args.machines,
            dir: dir.join("lab"),
            listen: "127.0.0.1:0".parse()?,
            api_url: api_url.clone(),
            throttle: Some(args.throttle),
            heartbeat_interval: None,
            agent_tasks: false,
            // The agents' command APIs are HTTPS, pinned to each boot's certificate.
            agent_tls: deployd_agent::TlsMode::On,
            vm: deployd_lab::VmArgs::default(),
        },
        AgentMode::Process(std::env::current_exe().context("finding this executable")?),
    )
    .await?;
    let write_secs = (args.image_mb << 20) as f64 / args.throttle as f64;
    println!(
        "engine {api_url} (sled in {}), lab BMC http://{} with {} machines",
        config.data_dir.display(),
        lab.addr,
        args.machines
    );
    println!(
        "each write takes ~{write_secs:.0} s at {} MiB/s; deploy_callback_timeout is {} s\n",
        args.throttle >> 20,
        args.timeout
    );

    let op = Operator::new(&api_url);
    let mut rows = Vec::new();
    for (i, machine) in lab.enrollments().into_iter().enumerate() {
        let driver = if i % 2 == 0 {
            "agent_redfish"
        } else {
            "pxe_redfish"
        };
        let uuid = op.enroll(&machine, driver, &image, &sha256).await?;
        rows.push(Row::new(machine, driver, uuid));
    }
    for row in &rows {
        op.walk(
            &row.uuid,
            ProvisionTarget::Manage,
            ProvisionState::Manageable,
        )
        .await?;
        op.walk(
            &row.uuid,
            ProvisionTarget::Provide,
            ProvisionState::Available,
        )
        .await?;
    }
    let started = Instant::now();
    for row in &rows {
        op.provision(&row.uuid, ProvisionTarget::Active).await?;
    }
    // The victim: an agent-family machine, whose agent writes the image itself.
    let victim = if args.no_kill {
        None
    } else {
        rows.iter().rposition(|r| r.driver.starts_with("agent"))
    };
    let mut screen = Screen::new(rows, args.image_mb << 20, started);
    let mut killed = false;
    loop {
        let nodes = op.nodes().await?;
        screen.update(&nodes);
        if let Some(v) = victim
            && !killed
            && screen.fraction(v) >= 0.4
        {
            lab.machines[&screen.rows[v].machine.name].kill_agent();
            killed = true;
            screen.note(format!(
                "killed the agent of {} mid-write: its heartbeats stop",
                screen.rows[v].machine.name
            ));
        }
        screen.draw();
        if screen.all_settled() {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs_f64(write_secs * 4.0 + 60.0),
            "the deploys did not finish in time"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let ok = screen.summary(&sha256, victim, args.timeout)?;
    // One deploy, phase by phase: the first node of the agent family that ended active.
    if let Some(row) = screen
        .rows
        .iter()
        .find(|r| r.driver.starts_with("agent") && r.state == "active")
    {
        println!("\ntimeline of {} ({}):", row.machine.name, row.driver);
        for line in deployd_client::timeline::lines(&op.history(&row.uuid).await?) {
            println!("  {line}");
        }
    }
    lab.stop();
    engine.shutdown().await?;
    Ok(ok)
}
