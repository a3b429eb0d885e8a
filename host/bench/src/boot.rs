//! `deployd bench boot`: power-on → the agent's first heartbeat on one lab VM, per boot
//! path: BIOS and UEFI by iPXE from the NIC's ROM, by virtual media (the engine's ISO
//! read as a CD), and UEFI with Secure Boot by virtual media through Debian's signed
//! chain. That is the time every deploy, cleaning and inspection spends before its agent
//! can work. Under software emulation unless told `--accel kvm`.
//!
//! The engine runs in this process (its public url the guests' `10.0.2.100`); each run is
//! a fresh `deployd lab --vm` process with one machine (a new disk and variable store),
//! enrolled as a `redfish` node and deployed until its first heartbeat, read from the
//! node's history: from the last power-on before it; the deploy (a MiB) then ends before
//! the machine is stopped. The ramdisk is built with
//! `deployd ramdisk build --secure-boot`. Also reported: the ISO's size and build time.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use deployd_engine::clock::Clock;
use deployd_engine::config::Config;
use deployd_engine::engine::Engine;
use deployd_lab::Enrollment;
use deployd_lab::operator::Operator;
use deployd_wire::state_machine::ProvisionState;
use deployd_wire::targets::ProvisionTarget;
use serde_json::json;
use tokio::time::Instant;

/// One way a machine boots its ramdisk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BootPath {
    BiosIpxe,
    UefiIpxe,
    BiosVmedia,
    UefiVmedia,
    UefiSecureVmedia,
}

impl BootPath {
    const ALL: [BootPath; 5] = [
        BootPath::BiosIpxe,
        BootPath::UefiIpxe,
        BootPath::BiosVmedia,
        BootPath::UefiVmedia,
        BootPath::UefiSecureVmedia,
    ];

    fn vmedia(self) -> bool {
        matches!(
            self,
            BootPath::BiosVmedia | BootPath::UefiVmedia | BootPath::UefiSecureVmedia
        )
    }

    /// The node's `properties.capabilities`.
    fn capabilities(self) -> &'static str {
        match self {
            BootPath::BiosIpxe | BootPath::BiosVmedia => "boot_mode:bios",
            BootPath::UefiIpxe | BootPath::UefiVmedia => "boot_mode:uefi",
            BootPath::UefiSecureVmedia => "boot_mode:uefi,secure_boot:true",
        }
    }
}

#[derive(Clone, Debug, clap::Args)]
pub struct BootBench {
    /// The boot paths to measure (comma-separated; all by default).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub paths: Vec<BootPath>,
    /// Runs per path (alternated across paths).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// The static deployd-agent the ramdisk carries.
    #[arg(
        long,
        default_value = "target/x86_64-unknown-linux-musl/release/deployd-agent"
    )]
    pub agent: PathBuf,
    /// Where the kernel and loader packages are kept between builds.
    #[arg(long, default_value = "target/ramdisk-cache")]
    pub ramdisk_cache: PathBuf,
    /// QEMU's accelerator (`deployd lab --accel`).
    #[arg(long, default_value = "tcg")]
    pub accel: String,
}

pub fn run_boot(args: &BootBench) -> anyhow::Result<()> {
    let runtime = super::runtime()?;
    let dir = super::core::BenchDir::new(None)?;
    runtime.block_on(boot(args, dir.path()))
}

async fn boot(args: &BootBench, dir: &Path) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("finding this executable")?;
    let boot = dir.join("boot");
    let built = Command::new(&exe)
        .args(["ramdisk", "build", "--secure-boot", "--out"])
        .arg(&boot)
        .arg("--agent")
        .arg(&args.agent)
        .arg("--cache")
        .arg(&args.ramdisk_cache)
        .output()
        .context("running deployd ramdisk build")?;
    if !built.status.success() {
        bail!(
            "deployd ramdisk build: {}",
            String::from_utf8_lossy(&built.stderr)
        );
    }
    iso_cost(&boot, dir)?;

    let port = deployd_lab::machine::free_port();
    let api_url = format!("http://127.0.0.1:{port}");
    let mut config = Config {
        data_dir: dir.join("engine"),
        listen: format!("127.0.0.1:{port}").parse()?,
        ..Config::default()
    };
    config.api.public_url = Some(format!("http://{}:{port}", deployd_lab::vm::GUEST_ENGINE));
    config.deploy.external_http_url = Some(api_url.clone());
    config.api.file_url_allowed_paths = vec![dir.to_owned()];
    config.conductor.automated_clean = false;
    config.conductor.deploy_callback_timeout = 600;
    let engine = Engine::start(&config, Clock::new()).await?;
    let image = dir.join("image.raw");
    let sha256 = deployd_lab::random_image(&image, 1 << 20).await?;

    let paths = match args.paths.is_empty() {
        true => BootPath::ALL.to_vec(),
        false => args.paths.clone(),
    };
    let mut seconds: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
    for run in 0..args.runs {
        for (i, &path) in paths.iter().enumerate() {
            let lab_dir = dir.join(format!("lab-{run}-{i}"));
            let took = one_boot(args, &exe, &api_url, &boot, &image, &sha256, path, &lab_dir)
                .await
                .with_context(|| format!("{path:?}, run {}", run + 1))?;
            println!("{path:?} run {}: {took:.1} s", run + 1);
            seconds[i].push(took);
        }
    }
    println!(
        "power-on → first heartbeat, one VM ({} emulation), medians of {}:",
        args.accel, args.runs
    );
    for (path, mut runs) in paths.into_iter().zip(seconds) {
        runs.sort_by(f64::total_cmp);
        let all: Vec<String> = runs.iter().map(|s| format!("{s:.1}")).collect();
        println!(
            "  {path:?}: {:.1} s ({})",
            runs[runs.len() / 2],
            all.join(", ")
        );
    }
    println!("load average: {}", super::load_average());
    drop(engine);
    Ok(())
}

/// The virtual media ISO of this ramdisk, as the engine builds it: size and build time.
fn iso_cost(boot: &Path, dir: &Path) -> anyhow::Result<()> {
    let parts = deployd_engine::boot_iso::Parts {
        kernel: boot.join("deploy_kernel"),
        ramdisk: boot.join("deploy_ramdisk"),
        cmdline: "ipa-api-url=http://10.0.2.100:6385 boot_method=vmedia".into(),
        bootloader: None,
    };
    let out = dir.join("bench.iso");
    let started = Instant::now();
    deployd_engine::boot_iso::build(&parts, &out)?;
    let took = started.elapsed();
    let size = std::fs::metadata(&out)?.len();
    println!(
        "virtual media ISO: {:.1} MB, built in {:.2} s",
        size as f64 / 1e6,
        took.as_secs_f64()
    );
    Ok(())
}

/// One machine, enrolled for `path`, deployed until its first heartbeat: the seconds from
/// its last power-on to that heartbeat.
#[allow(clippy::too_many_arguments)]
async fn one_boot(
    args: &BootBench,
    exe: &Path,
    api_url: &str,
    boot: &Path,
    image: &Path,
    sha256: &str,
    path: BootPath,
    lab_dir: &Path,
) -> anyhow::Result<f64> {
    let mut lab = Command::new(exe)
        .args(["lab", "--vm", "--machines", "1", "--listen", "127.0.0.1:0"])
        .args(["--api-url", api_url, "--disk-size", "4294967296"])
        .args(["--accel", &args.accel])
        .args(path.vmedia().then_some("--no-dhcp-boot-file"))
        .arg("--dir")
        .arg(lab_dir)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .context("starting deployd lab")?;
    let stop = Stop(lab.id());
    let mut line = String::new();
    std::io::BufReader::new(lab.stdout.take().expect("piped")).read_line(&mut line)?;
    let machine: Enrollment = serde_json::from_str(&line).context("the lab's enrollment")?;
    let mut driver_info = json!({
        "deploy_kernel": boot.join("deploy_kernel"),
        "deploy_ramdisk": boot.join("deploy_ramdisk"),
        "kernel_append_params": machine.kernel_append_params,
    });
    if path == BootPath::UefiSecureVmedia {
        driver_info["bootloader"] = json!(boot.join("bootloader.img"));
    }
    let op = Operator::new(api_url);
    // Every lab names its machine alike: the node's name says which run it is.
    let name = lab_dir.file_name().unwrap_or_default().to_string_lossy();
    let fields = json!({
        "name": format!("{path:?}-{name}").to_lowercase(),
        "driver": "redfish",
        "deploy_interface": "direct",
        "boot_interface": if path.vmedia() { "redfish-virtual-media" } else { "ipxe" },
        "driver_info": driver_info,
        "properties": {"capabilities": path.capabilities()},
    });
    let node = op.enroll_with(&machine, fields, image, sha256).await?;
    op.walk(&node, ProvisionTarget::Manage, ProvisionState::Manageable)
        .await?;
    op.walk(&node, ProvisionTarget::Provide, ProvisionState::Available)
        .await?;
    op.provision(&node, ProvisionTarget::Active).await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let took = loop {
        if let Some(took) = first_heartbeat(&op.history(&node).await?) {
            break took;
        }
        if Instant::now() > deadline {
            bail!("no heartbeat within 600 s (console: {:?})", machine.console);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // The deploy (a MiB) ends before its machine goes, so nothing is left mid-flow.
    op.settled(&node, Duration::from_secs(300)).await?;
    drop(stop);
    let _ = lab.wait();
    Ok(took)
}

/// Seconds from the last power-on before the first heartbeat to it, once there is one.
fn first_heartbeat(history: &[deployd_wire::documents::HistoryEvent]) -> Option<f64> {
    let at = |e: &deployd_wire::documents::HistoryEvent| {
        chrono::DateTime::parse_from_rfc3339(&e.created_at).ok()
    };
    let first = history
        .iter()
        .find(|e| e.event.starts_with("First heartbeat"))?;
    let heartbeat = at(first)?;
    let on = history
        .iter()
        .filter(|e| {
            matches!(
                e.event.as_str(),
                "Machine is now in power on" | "Machine rebooted"
            )
        })
        .filter_map(at)
        .filter(|t| *t <= heartbeat)
        .max()?;
    Some((heartbeat - on).as_seconds_f64())
}

/// Stops the lab (its VM with it) when dropped: SIGTERM, which it handles.
struct Stop(u32);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.to_string()])
            .status();
    }
}
