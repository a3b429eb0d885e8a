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
//! With `--vm`, the machines are QEMU virtual machines that network-boot a real ramdisk
//! and then boot the deployed OS; the killed "agent" is a VM whose power is cut.
//!
//! With `--engines N`, N engines tell it, sharing a PostgreSQL cluster the demo starts,
//! behind a balancer of the demo's own; one engine is killed midway too, and every node
//! keeps deploying.
//!
//! - [`screen`]: the live progress table and the summary.
//! - [`vms`]: what the VMs need before the story, and how they are enrolled.
//! - [`cluster`]: the engines sharing a store, on a PostgreSQL of the lab's
//!   (`deployd_lab::postgres`).

mod cluster;
mod screen;
mod vms;

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

/// When after the victim's last heartbeat its agent is killed, as a share of the
/// ramdisk heartbeat timeout: agents heartbeat every 30–60 % of it, so this is before the
/// next heartbeat and past the engine's call that follows the last one.
const KILL_AFTER_HEARTBEAT: f64 = 0.2;

#[derive(clap::Args, Clone, Debug)]
pub struct DemoArgs {
    /// Machines (default 4; with --vm 3, each a VM).
    #[arg(long)]
    pub machines: Option<usize>,
    /// Image size in MiB (default 256 MiB of random bytes; with --vm a 64 MiB bootable
    /// disk).
    #[arg(long)]
    pub image_mb: Option<u64>,
    /// Each agent's write rate, suffixes K, M, G (default 16M; with --vm 1536K).
    #[arg(long, value_parser = deployd_agent::runner::parse_rate)]
    pub throttle: Option<u64>,
    /// deploy_callback_timeout in seconds, far shorter than a write takes (default 3;
    /// with --vm 30, since it also covers the ramdisk's boot, as in Ironic).
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Do not kill an agent midway.
    #[arg(long)]
    pub no_kill: bool,
    /// Keep the temporary directory (engine data, disks, logs) and say where it is.
    #[arg(long)]
    pub keep: bool,
    /// Engines telling the story (default 1, on sled); more share a PostgreSQL cluster
    /// the demo starts from Debian's binaries, and one of them is killed midway.
    #[arg(long, default_value_t = 1)]
    pub engines: usize,
    #[command(flatten)]
    pub vm: vms::VmDemoArgs,
}

/// The story's numbers, from the flags and the defaults of its kind of machine.
struct Plan {
    machines: usize,
    image_mb: u64,
    throttle: u64,
    timeout: u64,
}

impl Plan {
    fn new(args: &DemoArgs) -> anyhow::Result<Plan> {
        let vm = args.vm.enabled;
        let plan = Plan {
            machines: args.machines.unwrap_or(if vm { 3 } else { 4 }),
            image_mb: args.image_mb.unwrap_or(if vm { 64 } else { 256 }),
            throttle: args
                .throttle
                .unwrap_or(if vm { 1536 << 10 } else { 16 << 20 }),
            timeout: args.timeout.unwrap_or(if vm { 30 } else { 3 }),
        };
        anyhow::ensure!(plan.machines >= 1, "--machines must be at least 1");
        anyhow::ensure!(plan.timeout >= 1, "--timeout must be at least 1 s");
        anyhow::ensure!(plan.image_mb >= 1, "--image-mb must be at least 1");
        anyhow::ensure!(args.engines >= 1, "--engines must be at least 1");
        anyhow::ensure!(
            args.engines == 1 || !vm,
            "--engines and --vm do not go together (a VM reaches one engine's address)"
        );
        Ok(plan)
    }
}

/// Runs the demo; Ctrl-C or SIGTERM stops it and leaves nothing running.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let plan = Plan::new(&args)?;
    let dir = tempfile::Builder::new().prefix("deployd-demo-").tempdir()?;
    let outcome = tokio::select! {
        r = story(&args, &plan, dir.path()) => r,
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
async fn story(args: &DemoArgs, plan: &Plan, dir: &Path) -> anyhow::Result<bool> {
    let vm = match args.vm.enabled {
        true => Some(vms::prepare(&args.vm, dir, plan.image_mb).await?),
        false => None,
    };
    let (image, sha256) = match &vm {
        Some(vm) => (vm.image.clone(), vm.sha256.clone()),
        None => {
            let image = dir.join("image.raw");
            print!("writing a {} MiB image of random bytes… ", plan.image_mb);
            let sha256 = deployd_lab::random_image(&image, plan.image_mb << 20).await?;
            println!("sha256 {}", &sha256[..16]);
            (image, sha256)
        }
    };

    // A VM reaches the engine at deployd_lab::vm::GUEST_ENGINE on the engine's port: the port must be
    // known before the engine starts, to name it in the public url.
    let port = match vm {
        Some(_) => deployd_lab::machine::free_port(),
        None => 0,
    };
    let mut config = Config {
        data_dir: dir.join("engine"),
        listen: format!("127.0.0.1:{port}").parse()?,
        ..Config::default()
    };
    if vm.is_some() {
        config.api.public_url = Some(format!("http://{}:{port}", deployd_lab::vm::GUEST_ENGINE));
    }
    config.conductor.deploy_callback_timeout = plan.timeout;
    config.conductor.clean_callback_timeout = plan.timeout;
    config.conductor.check_provision_state_interval = 1;
    config.api.file_url_allowed_paths = vec![dir.to_path_buf()];
    // Agents heartbeat every 30–60 % of this: well inside the timeout.
    config.api.ramdisk_heartbeat_timeout = match vm {
        Some(_) => 4,
        None => plan.timeout.max(2) - 1,
    };
    let kill_after = config.api.ramdisk_heartbeat_timeout as f64 * KILL_AFTER_HEARTBEAT;
    let mut engines = match args.engines {
        1 => Engines::One(Engine::start(&config, Clock::new()).await?),
        n => Engines::Shared(cluster::Cluster::start(dir, n, &serve_flags(&config, dir)).await?),
    };
    let api_url = engines.url();
    let exe = std::env::current_exe().context("finding this executable")?;
    let lab_args = LabArgs {
        machines: plan.machines,
        dir: dir.join("lab"),
        listen: "127.0.0.1:0".parse()?,
        api_url: api_url.clone(),
        throttle: Some(plan.throttle),
        heartbeat_interval: None,
        agent_tasks: false,
        // The agents' command APIs are HTTPS, pinned to each boot's certificate.
        agent_tls: deployd_agent::TlsMode::On,
        ipmi_python: None,
        vm: deployd_lab::VmArgs {
            enabled: vm.is_some(),
            disk_size: if vm.is_some() { 4 << 30 } else { 0 },
            ..deployd_lab::VmArgs::default()
        },
    };
    let mode = match &vm {
        Some(vm) => AgentMode::Vm(std::sync::Arc::new(deployd_lab::VmConfig::new(
            &lab_args.vm,
            &api_url,
            exe,
            vm.accel.clone(),
        )?)),
        None => AgentMode::Process(exe),
    };
    let lab = Lab::start(&lab_args, mode).await?;
    let write_secs = (plan.image_mb << 20) as f64 / plan.throttle as f64;
    let serving = match &engines {
        Engines::One(_) => format!("engine {api_url} (sled in {})", config.data_dir.display()),
        Engines::Shared(cluster) => format!(
            "{} engines {:?} on one PostgreSQL database, behind the balancer {api_url}",
            cluster.addrs().len(),
            cluster.addrs()
        ),
    };
    println!(
        "{serving}, lab BMC http://{} with {} {}",
        lab.addr,
        plan.machines,
        if vm.is_some() {
            "QEMU VMs (serial consoles in the lab directory)"
        } else {
            "machines"
        }
    );
    println!("the fleet live in a browser: {api_url}/dashboard");
    println!(
        "each write takes ~{write_secs:.0} s at {} MiB/s; deploy_callback_timeout is {} s\n",
        plan.throttle as f64 / (1 << 20) as f64,
        plan.timeout
    );

    let op = Operator::new(&api_url);
    let mut rows = Vec::new();
    for (i, machine) in lab.enrollments().into_iter().enumerate() {
        // VMs are all of the agent family: the pxe family's engine reads the image from
        // its public url, which in QEMU's user-mode network only guests reach.
        let driver = match (i % 2, &vm) {
            (0, _) | (_, Some(_)) => "agent_redfish",
            _ => "pxe_redfish",
        };
        let uuid = match &vm {
            Some(vm) => {
                let fields = vms::node_fields(vm, &machine, plan.throttle);
                op.enroll_with(&machine, fields, &image, &sha256).await?
            }
            None => op.enroll(&machine, driver, &image, &sha256).await?,
        };
        rows.push(Row::new(machine, driver, uuid));
    }
    for row in &rows {
        op.walk(
            &row.uuid,
            ProvisionTarget::Manage,
            ProvisionState::Manageable,
        )
        .await?;
        op.provision(&row.uuid, ProvisionTarget::Provide).await?;
    }
    // Provide cleans (a VM boots its ramdisk for it): all at once.
    for row in &rows {
        let node = op.settled(&row.uuid, Duration::from_secs(300)).await?;
        anyhow::ensure!(
            node.provision_state == Some(ProvisionState::Available),
            "{} did not become available: {}",
            row.machine.name,
            node.last_error.unwrap_or_default()
        );
    }
    let started = Instant::now();
    for row in &rows {
        op.provision(&row.uuid, ProvisionTarget::Active).await?;
    }
    // The victim: an agent-family machine, whose agent writes the image itself (with
    // one machine, that one).
    let victim = if args.no_kill {
        None
    } else {
        rows.iter().rposition(|r| r.driver.starts_with("agent"))
    };
    let mut screen = Screen::new(rows, plan.image_mb << 20, started);
    let mut killed = false;
    let mut engine_killed = false;
    // A VM boots its ramdisk before it writes.
    let boot_allowance = if vm.is_some() { 120.0 } else { 60.0 };
    loop {
        let nodes = op.nodes().await?;
        screen.update(&nodes);
        // Cut between two heartbeats, not during the engine's call to the agent that
        // follows one: an agent that dies under a call fails the node at once ("cannot
        // reach the agent", as Ironic's does), and the demo shows the other path, the
        // one only the timeout can take (a silent agent).
        if let Some(v) = victim
            && !killed
            && screen.fraction(v) >= 0.4
            && screen.heartbeat_age(v).is_some_and(|age| age >= kill_after)
        {
            lab.machines[&screen.rows[v].machine.name].kill_agent();
            killed = true;
            screen.note(format!(
                "{} {} mid-write: its heartbeats stop",
                if vm.is_some() {
                    "cut the power of (killed QEMU)"
                } else {
                    "killed the agent of"
                },
                screen.rows[v].machine.name
            ));
        }
        // With engines sharing the store, one is killed once a write is a quarter done.
        if let Engines::Shared(cluster) = &mut engines
            && !engine_killed
            && (0..screen.rows.len()).any(|r| screen.fraction(r) >= 0.25)
        {
            let addr = cluster.kill(0).await?;
            engine_killed = true;
            screen.note(format!(
                "killed the engine at {addr} (SIGKILL) mid-deploy: the balancer sends its calls to the others, which take its nodes over once its 10 s lease lapses"
            ));
        }
        screen.draw();
        if screen.all_settled() {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs_f64(write_secs * 4.0 + boot_allowance),
            "the deploys did not finish in time"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut ok = screen.summary(&sha256, victim, plan.timeout)?;
    if vm.is_some() {
        ok &= booted(&screen).await;
    }
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
    if let Engines::Shared(_) = &engines {
        conductors(&api_url, engine_killed).await;
    }
    lab.stop();
    engines.shutdown().await?;
    Ok(ok)
}

/// Who tells the story: one engine on sled in this process, or engines sharing a store.
enum Engines {
    One(Engine),
    Shared(cluster::Cluster),
}

impl Engines {
    /// Where clients and agents call.
    fn url(&self) -> String {
        match self {
            Engines::One(engine) => format!("http://{}", engine.addr),
            Engines::Shared(cluster) => cluster.url.clone(),
        }
    }

    async fn shutdown(self) -> anyhow::Result<()> {
        match self {
            Engines::One(engine) => engine.shutdown().await,
            Engines::Shared(cluster) => {
                cluster.stop().await;
                Ok(())
            }
        }
    }
}

/// `deployd serve`'s flags for what `config` sets beside the defaults.
fn serve_flags(config: &Config, dir: &Path) -> Vec<String> {
    let c = &config.conductor;
    [
        (
            "--deploy-callback-timeout",
            c.deploy_callback_timeout.to_string(),
        ),
        (
            "--clean-callback-timeout",
            c.clean_callback_timeout.to_string(),
        ),
        (
            "--check-provision-state-interval",
            c.check_provision_state_interval.to_string(),
        ),
        (
            "--ramdisk-heartbeat-timeout",
            config.api.ramdisk_heartbeat_timeout.to_string(),
        ),
        ("--file-url-allowed-path", dir.display().to_string()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_owned(), value])
    .collect()
}

/// The engines as `GET /v1/conductors` lists them at the end: once one was killed, when
/// the survivors have declared it dead (its lease lapses 10 s after it was killed; the
/// deploys may end sooner).
async fn conductors(api_url: &str, one_killed: bool) {
    let listed = || async {
        let text = reqwest::Client::new()
            .get(format!("{api_url}/v1/conductors"))
            .header("X-OpenStack-Ironic-API-Version", "latest")
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let listed: serde_json::Value = serde_json::from_str(&text).ok()?;
        let all: Vec<(String, bool)> = listed["conductors"]
            .as_array()?
            .iter()
            .map(|c| {
                (
                    c["hostname"].as_str().unwrap_or("?").to_owned(),
                    c["alive"] == true,
                )
            })
            .collect();
        Some(all)
    };
    let mut all = listed().await.unwrap_or_default();
    let until = Instant::now() + Duration::from_secs(20);
    while one_killed && all.iter().all(|(_, alive)| *alive) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(500)).await;
        all = listed().await.unwrap_or_default();
    }
    println!("\nthe engines, as GET /v1/conductors lists them:");
    for (hostname, alive) in all {
        println!("  {hostname:24} {}", if alive { "alive" } else { "dead" });
    }
}

/// Every active VM boots its deployed disk: the line its console printed. True when
/// each did.
async fn booted(screen: &Screen) -> bool {
    println!("\nthe deployed VMs boot from their disks:");
    let mut ok = true;
    for row in screen.rows.iter().filter(|r| r.state == "active") {
        let Some(console) = &row.machine.console else {
            continue;
        };
        match vms::booted_line(console, Duration::from_secs(120)).await {
            Some(line) => println!("  {:12} console: {line}", row.machine.name),
            None => {
                ok = false;
                println!(
                    "  {:12} did not boot its disk within 120 s   <-- unexpected (see {})",
                    row.machine.name,
                    console.display()
                );
            }
        }
    }
    ok
}
