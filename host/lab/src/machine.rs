//! One simulated machine: a power switch, a boot device, a disk file, and the ramdisk
//! agent that runs while the machine is on and boots from the network.
//!
//! Power-on with a network boot starts the agent (a `deployd agent` process, or a task in
//! this process for fleets too big for a process each); power-off stops it as pulling the
//! plug would (SIGKILL, or dropping the task). When the agent powers the machine off
//! itself (`standby.power_off`, exit status 0), the machine is off. An agent killed from
//! outside leaves the machine on: a hung machine, which only a timeout notices.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use deployd_agent::AgentArgs;

use crate::vm::Firmware;

/// How a machine's agent runs.
#[derive(Clone, Debug)]
pub enum AgentMode {
    /// A `deployd agent` process of this executable.
    Process(PathBuf),
    /// A task in this process (a thousand machines on one host).
    Task,
    /// A QEMU virtual machine that really boots: its firmware network-boots the engine's
    /// ramdisk, or boots its disk ([`crate::vm`]).
    Vm(Arc<crate::vm::VmConfig>),
}

/// Where a machine boots from, as Redfish's `BootSourceOverrideTarget` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Boot {
    Pxe,
    Hdd,
    /// Its virtual CD (the image a BMC's `InsertMedia` put there).
    Cd,
    /// The network by UEFI HTTP boot (the firmware's, not PXE): under BIOS, as `Pxe`.
    UefiHttp,
}

#[derive(Clone, Debug, Serialize)]
pub struct MachineView {
    pub name: String,
    pub mac: String,
    pub disk: PathBuf,
    pub power: &'static str,
    pub boot: Boot,
    /// "Once" or "Continuous" while an override is set.
    pub boot_override: Option<&'static str>,
    /// The firmware it powers on with: `Boot.BootSourceOverrideMode`.
    pub boot_mode: Firmware,
    /// Whether its UEFI firmware enforces Secure Boot from its next power-on
    /// (`SecureBoot.SecureBootEnable`).
    pub secure_boot: bool,
    /// Whether it enforced Secure Boot at its last power-on (`SecureBootCurrentBoot`).
    pub booted_secure: bool,
    /// The agent's process id, while one runs as a process.
    pub agent_pid: Option<u32>,
    pub agent_running: bool,
    /// Times the machine powered on into its agent.
    pub agent_boots: u32,
    /// A VM's serial console log (firmware, iPXE, kernel, the deployed OS).
    pub console: PathBuf,
}

enum Running {
    Process(tokio::process::Child),
    Task(tokio::task::JoinHandle<()>),
}

struct State {
    on: bool,
    boot: Boot,
    once: Option<bool>,
    /// A VM's firmware at its next power-on.
    boot_mode: Firmware,
    secure_boot: bool,
    booted_secure: bool,
    agent: Option<Running>,
    boots: u32,
    /// Bumped at every power change, so a watcher of an old agent does not act.
    generation: u64,
}

pub struct Machine {
    pub name: String,
    pub mac: String,
    pub disk: PathBuf,
    pub console: PathBuf,
    /// A VM's serial port, a Unix socket (see [`crate::vm`]).
    pub serial_port: PathBuf,
    /// A UEFI VM's variable store (see [`crate::vm::Firmware`]).
    pub vars: PathBuf,
    /// A VM's network link.
    pub nic: crate::vm::Nic,
    /// A VM's other disks (`<name>.disk1`, `.disk2`, …).
    pub extra_disks: Vec<PathBuf>,
    /// The machine's memory, as its BMC reports it (a VM's is given to QEMU).
    pub memory_mb: u32,
    /// The image in its virtual CD, if one is inserted.
    media: Mutex<Option<String>>,
    log: PathBuf,
    args: AgentArgs,
    mode: AgentMode,
    state: Mutex<State>,
}

/// What a machine has besides its first disk, as its BMC reports it.
pub struct Spec {
    /// A VM's other disks.
    pub extra_disks: usize,
    pub memory_mb: u32,
    /// Its boot mode until its BMC is told another.
    pub boot_mode: Firmware,
}

impl Machine {
    pub fn new(
        name: String,
        mac: String,
        dir: &std::path::Path,
        args: AgentArgs,
        mode: AgentMode,
        nic: crate::vm::Nic,
        spec: Spec,
    ) -> Arc<Machine> {
        let Spec {
            extra_disks,
            memory_mb,
            boot_mode,
        } = spec;
        let disk = dir.join(format!("{name}.disk"));
        Arc::new(Machine {
            console: dir.join(format!("{name}.console.log")),
            serial_port: dir.join(format!("{name}.serial.sock")),
            vars: dir.join(format!("{name}.efivars.fd")),
            nic,
            extra_disks: (1..=extra_disks)
                .map(|i| dir.join(format!("{name}.disk{i}")))
                .collect(),
            memory_mb,
            media: Mutex::new(None),
            log: dir.join(format!("{name}.agent.log")),
            args: AgentArgs {
                macs: vec![mac.clone()],
                disk: Some(disk.clone()),
                // A rescue's password hash goes beside the machine's disk.
                rescue_password_file: Some(disk.with_extension("rescue-password")),
                ..args
            },
            name,
            mac,
            disk,
            mode,
            state: Mutex::new(State {
                on: false,
                boot: Boot::Hdd,
                once: None,
                boot_mode,
                secure_boot: false,
                booted_secure: false,
                agent: None,
                boots: 0,
                generation: 0,
            }),
        })
    }

    /// The image in the virtual CD.
    pub fn media(&self) -> Option<String> {
        self.media.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set_media(&self, image: Option<String>) {
        *self.media.lock().unwrap_or_else(|p| p.into_inner()) = image;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn view(&self) -> MachineView {
        let mut s = self.lock();
        let running = match &mut s.agent {
            Some(Running::Process(c)) => c.try_wait().map(|r| r.is_none()).unwrap_or(false),
            Some(Running::Task(t)) => !t.is_finished(),
            None => false,
        };
        MachineView {
            name: self.name.clone(),
            mac: self.mac.clone(),
            disk: self.disk.clone(),
            power: if s.on { "On" } else { "Off" },
            boot: s.boot,
            boot_override: s.once.map(|once| if once { "Once" } else { "Continuous" }),
            boot_mode: s.boot_mode,
            secure_boot: s.secure_boot,
            booted_secure: s.booted_secure,
            agent_pid: match &s.agent {
                Some(Running::Process(c)) if running => c.id(),
                _ => None,
            },
            agent_running: running,
            agent_boots: s.boots,
            console: self.console.clone(),
        }
    }

    pub fn set_boot(&self, boot: Boot, once: bool) {
        let mut s = self.lock();
        s.boot = boot;
        s.once = Some(once);
    }

    /// The firmware of its next power-on, as a real BMC's boot mode applies at the next
    /// boot.
    pub fn set_boot_mode(&self, mode: Firmware) {
        self.lock().boot_mode = mode;
    }

    /// Whether its UEFI firmware enforces Secure Boot, from its next power-on.
    pub fn set_secure_boot(&self, on: bool) {
        self.lock().secure_boot = on;
    }

    /// Powers on (a no-op when on): a network or CD boot starts the agent (a simulated
    /// machine's ramdisk); a VM boots whatever it boots.
    pub fn power_on(self: &Arc<Self>) -> std::io::Result<()> {
        let mut s = self.lock();
        if s.on {
            return Ok(());
        }
        s.on = true;
        s.generation += 1;
        let boot = s.boot;
        if s.once == Some(true) {
            s.boot = Boot::Hdd;
            s.once = None;
        }
        let vm = matches!(self.mode, AgentMode::Vm(_));
        s.booted_secure = vm && s.secure_boot && s.boot_mode == Firmware::Uefi;
        if boot != Boot::Hdd || vm {
            s.boots += u32::from(boot != Boot::Hdd);
            let generation = s.generation;
            let firmware = (s.boot_mode, s.booted_secure);
            s.agent = Some(self.start_agent(generation, boot, firmware)?);
        }
        Ok(())
    }

    /// Cuts the power: the agent dies at once, whatever it was doing.
    pub fn power_off(&self) {
        let mut s = self.lock();
        s.on = false;
        s.generation += 1;
        stop(s.agent.take());
    }

    /// Kills the agent only (a crash, a hang): the machine stays on.
    pub fn kill_agent(&self) -> bool {
        let mut s = self.lock();
        let had = s.agent.is_some();
        stop(s.agent.take());
        had
    }

    fn start_agent(
        self: &Arc<Self>,
        generation: u64,
        boot: Boot,
        (firmware, secure_boot): (Firmware, bool),
    ) -> std::io::Result<Running> {
        match &self.mode {
            AgentMode::Vm(config) => {
                let dir = self.disk.parent().unwrap_or(std::path::Path::new("."));
                let sercon = crate::vm::sercon_file(dir)?;
                let vars = crate::vm::vars_file(&self.vars, secure_boot);
                firmware.prepare(&vars, secure_boot)?;
                let cd = self.media();
                let vm = crate::vm::VmMachine {
                    mac: &self.mac,
                    disk: &self.disk,
                    console: &self.console,
                    serial_port: &self.serial_port,
                    vars: &vars,
                    nic: &self.nic,
                    serial: &self.name,
                    extra_disks: &self.extra_disks,
                    boot,
                    cd: cd.as_deref(),
                    firmware,
                    secure_boot,
                };
                let log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.log)?;
                let child = tokio::process::Command::new(&config.qemu)
                    .args(config.args(&vm, &sercon))
                    .stdin(std::process::Stdio::null())
                    .stdout(log.try_clone()?)
                    .stderr(log)
                    .kill_on_drop(true)
                    .spawn()?;
                self.watch_process(generation);
                Ok(Running::Process(child))
            }
            AgentMode::Process(exe) => {
                let mut command = tokio::process::Command::new(exe);
                command
                    .arg("agent")
                    .args(["--api-url", &self.args.api_url, "--mac", &self.mac])
                    .arg("--disk")
                    .arg(&self.disk)
                    .args(["--listen", &self.args.listen.to_string()]);
                if let Some(t) = self.args.throttle {
                    command.args(["--throttle", &t.to_string()]);
                }
                if let Some(i) = self.args.heartbeat_interval {
                    command.args(["--heartbeat-interval", &i.to_string()]);
                }
                // A rescued agent's exit status leaves the machine on (`watch_process`).
                if let Some(file) = &self.args.rescue_password_file {
                    command.arg("--rescue-password-file").arg(file);
                }
                let tls = clap::ValueEnum::to_possible_value(&self.args.tls)
                    .expect("every TLS mode has a name");
                command.args(["--tls", tls.get_name()]);
                let log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.log)?;
                let child = command
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(log)
                    .kill_on_drop(true)
                    .spawn()?;
                self.watch_process(generation);
                Ok(Running::Process(child))
            }
            AgentMode::Task => {
                let (args, me) = (self.args.clone(), self.clone());
                Ok(Running::Task(tokio::spawn(async move {
                    let ended = deployd_agent::runner::run(args).await;
                    if let Err(e) = &ended {
                        tracing::warn!(machine = %me.name, "agent stopped: {e:#}");
                    }
                    // Rescued, the ramdisk goes on: the machine stays on.
                    let off = matches!(ended, Ok(deployd_agent::runner::Ended::PoweredOff));
                    me.agent_exited(generation, off);
                })))
            }
        }
    }

    /// Polls the agent process; its clean exit is the machine powering itself off.
    fn watch_process(self: &Arc<Self>, generation: u64) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                let Some(me) = me.upgrade() else { return };
                let mut s = me.lock();
                if s.generation != generation {
                    return;
                }
                let status = match &mut s.agent {
                    Some(Running::Process(c)) => c.try_wait().ok().flatten(),
                    _ => return,
                };
                if let Some(status) = status {
                    drop(s);
                    // A VM whose QEMU ended is off, however it ended (the guest powered
                    // off, or QEMU failed: its log says).
                    let vm = matches!(me.mode, AgentMode::Vm(_));
                    if vm && !status.success() {
                        tracing::warn!(
                            machine = %me.name,
                            %status,
                            "QEMU ended without the guest powering off; see {}",
                            me.log.display()
                        );
                    }
                    let off = status.success() || vm;
                    me.agent_exited(generation, off);
                    return;
                }
            }
        });
    }

    fn agent_exited(&self, generation: u64, clean: bool) {
        let mut s = self.lock();
        if s.generation == generation && clean {
            s.on = false;
            s.generation += 1;
            s.agent = None;
        }
    }
}

/// A free port on the host's loopback (a VM's forwarded agent port).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(0, |a| a.port())
}

fn stop(agent: Option<Running>) {
    match agent {
        Some(Running::Process(mut c)) => {
            let _ = c.start_kill();
            // Reap it in the background (outside a runtime, tokio's orphan reaper does).
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = c.wait().await;
                });
            }
        }
        Some(Running::Task(t)) => t.abort(),
        None => {}
    }
}
