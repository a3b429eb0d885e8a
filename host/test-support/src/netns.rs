//! A network namespace a test makes and deletes itself, standing in for a provisioning
//! host: a tap device for a VM's NIC (the provisioning network, where dnsmasq answers
//! DHCP), and a veth pair from the test's own namespace (the operator's management
//! network, over which the test calls the engine). No bridge, no route and no address
//! outside the pair's own end touch the host's network; deleting the namespace removes
//! the tap and both ends of the pair.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The provisioning network: the namespace's address on its tap, and the addresses
/// dnsmasq hands out.
pub const PROVISIONING: &str = "10.251.0.1";
pub const DHCP_RANGE: &str = "10.251.0.100,10.251.0.150";

pub struct Netns {
    pub name: String,
    /// The tap device inside the namespace (for `deployd lab --vm --tap`).
    pub tap: String,
    /// The namespace's end of its management network (a /30 of `10.250.0.0/16` of its
    /// own), over which the test calls the engine. Each namespace of a test process has
    /// another: a namespace deleted a moment ago lives on while its last process exits,
    /// and with it its veth pair; had it the same addresses, its host end's route would
    /// take the new namespace's traffic to the dying one (CI: an engine in the new
    /// namespace running, and not answering for 60 s).
    pub management: String,
    /// One namespace at a time in a test process: each holds a VM, and two VMs beside
    /// the rest of the suite starve CI's two cores.
    _one: std::sync::MutexGuard<'static, ()>,
}

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// Each namespace of a test process gets names of its own: a namespace deleted a moment
/// ago may still hold the last one's veth pair.
static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Runs `ip` with `args`; panics with what it said when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("iproute2's ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    /// Makes the namespace, its tap (up, with [`PROVISIONING`]) and the veth pair (the
    /// test's end `10.250.<x>.<y>+1`, the namespace's [`Netns::management`], `+2`). Needs
    /// root.
    pub fn create() -> Netns {
        let one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let pid = std::process::id();
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // 16384 /30 networks in 10.250.0.0/16: the n-th namespace takes the n-th.
        let base = (n % 16384) * 4;
        let (x, y) = (base / 256, base % 256);
        let host_end_address = format!("10.250.{x}.{}", y + 1);
        let ns = Netns {
            name: format!("deployd-test-{pid}-{n}"),
            tap: "prov0".into(),
            management: format!("10.250.{x}.{}", y + 2),
            _one: one,
        };
        // An interface name has at most 15 characters.
        let host_end = format!("dpl{}x{}", pid % 1_000_000, n % 1000);
        ip(&["netns", "add", &ns.name]);
        let inside = |args: &[&str]| {
            let mut all = vec!["-n", ns.name.as_str()];
            all.extend_from_slice(args);
            ip(&all);
        };
        inside(&["link", "set", "lo", "up"]);
        inside(&["tuntap", "add", "dev", &ns.tap, "mode", "tap"]);
        inside(&["addr", "add", &format!("{PROVISIONING}/24"), "dev", &ns.tap]);
        inside(&["link", "set", &ns.tap, "up"]);
        ip(&[
            "link", "add", &host_end, "type", "veth", "peer", "name", "mgmt0", "netns", &ns.name,
        ]);
        ip(&[
            "addr",
            "add",
            &format!("{host_end_address}/30"),
            "dev",
            &host_end,
        ]);
        ip(&["link", "set", &host_end, "up"]);
        inside(&[
            "addr",
            "add",
            &format!("{}/30", ns.management),
            "dev",
            "mgmt0",
        ]);
        inside(&["link", "set", "mgmt0", "up"]);
        ns
    }

    /// `program` run inside the namespace (`ip netns exec` execs it: its pid is the
    /// program's own).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    /// The real dnsmasq inside the namespace with `conf` (what `deployd boot
    /// dnsmasq-config` printed), its leases and log in `dir`.
    pub fn dnsmasq(&self, conf: &Path, dir: &Path) -> Dnsmasq {
        let log = dir.join("dnsmasq.log");
        let child = self
            .command("dnsmasq")
            .arg("--keep-in-foreground")
            .arg(format!("--conf-file={}", conf.display()))
            .arg(format!("--dhcp-leasefile={}", dir.join("leases").display()))
            .arg(format!("--pid-file={}", dir.join("dnsmasq.pid").display()))
            .arg(format!("--log-facility={}", log.display()))
            .args(["--log-dhcp", "--user=root"])
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(dir.join("dnsmasq.stderr")).unwrap())
            .spawn()
            .expect("Debian's dnsmasq-base (.ci/run installs it)");
        Dnsmasq {
            child,
            log: log.clone(),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

/// A dnsmasq process, stopped by its pid when dropped.
pub struct Dnsmasq {
    pub child: Child,
    pub log: std::path::PathBuf,
}

impl Dnsmasq {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
