//! A deployed VM's serial console and its rescue, as an operator has them: the lab's VM
//! behind its IPMI BMC (pyghmi's BMC class, `deployd lab --ipmi-python`), an `ipmi` node
//! deployed by the real agent in deployd's ramdisk; its `ipmitool-socat` console (socat
//! and the real `ipmitool sol activate` through the BMC's Serial-over-LAN to the VM's
//! serial port) shows the deployed OS's login prompt and takes a command. Rescued, the
//! ramdisk boots again and its `rescue` login takes the password on that console, with the
//! disk readable from the rescue shell; unrescued, the disk boots again.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use deployd_test_support::{emulators, processes as support, vm};
use serde_json::{Value, json};
use support::{Engine, Lab, call, provision, sha256_of, wait_node};

/// What the deployed OS prints when it has booted from the VM's disk.
const MARKER: &str = "deployd test OS: booted from its own disk, login follows";

/// Busybox's shell prompt and its terminal query, answered by [`Console::expect`]:
/// typing before the answer went out would mix the two.
const SHELL_READY: &str = "# \x1b[6n";

/// An operator's connection to a node's console.
struct Console {
    socket: TcpStream,
    seen: String,
}

impl Console {
    fn connect(port: u16) -> Console {
        let socket = TcpStream::connect(("127.0.0.1", port)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        Console {
            socket,
            seen: String::new(),
        }
    }

    /// Reads until `want` shows up after what was read before (within `secs`), pressing
    /// Enter every few seconds (a prompt printed before the session began is not
    /// replayed: Enter makes getty print it again), and answering the shell's terminal
    /// queries.
    fn expect(&mut self, want: &str, secs: u64) -> String {
        let from = self.seen.len();
        self.expect_within(want, secs).unwrap_or_else(|| {
            panic!(
                "{want:?} never came on the console; it showed:\n{}",
                &self.seen[from..]
            )
        })
    }

    /// A shell command typed until its output shows (three times at most): a line typed
    /// over Serial-over-LAN can reach the machine garbled when the lab's BMC (pyghmi)
    /// mishandles a packet ipmitool sent again under load ("/de/vvda" for "/dev/vda"), as
    /// an operator would type it again.
    ///
    /// A garbled line can leave the shell waiting for its end (an unclosed `$(` gives the
    /// continuation prompt `> `): Ctrl-C drops it and the shell prompts again.
    fn run(&mut self, line: &str, want: &str) {
        for _ in 0..2 {
            self.type_line(line);
            if self.expect_within(want, 15).is_some() {
                return;
            }
            self.socket.write_all(b"\x03").unwrap();
            self.expect(SHELL_READY, 15);
        }
        self.type_line(line);
        self.expect(want, 30);
    }

    /// [`Console::expect`], or `None` once `secs` passed.
    fn expect_within(&mut self, want: &str, secs: u64) -> Option<String> {
        let from = self.seen.len();
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut last_enter = Instant::now();
        let mut buf = [0u8; 4096];
        while !self.seen[from..].contains(want) {
            if Instant::now() >= deadline {
                return None;
            }
            match self.socket.read(&mut buf) {
                Ok(0) => panic!("the console closed; it showed:\n{}", &self.seen[from..]),
                Ok(n) => {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    // Busybox's shell asks the terminal where its cursor is (as a real
                    // terminal would, answer it: else the shell waits for the answer).
                    for _ in text.matches("\x1b[6n") {
                        self.socket.write_all(b"\x1b[1;1R").unwrap();
                    }
                    self.seen.push_str(&text);
                }
                Err(_) if last_enter.elapsed() > Duration::from_secs(5) => {
                    self.type_line("");
                    last_enter = Instant::now();
                }
                Err(_) => {}
            }
        }
        Some(self.seen[from..].to_owned())
    }

    fn type_line(&mut self, line: &str) {
        self.socket
            .write_all(format!("{line}\r").as_bytes())
            .unwrap();
    }
}

#[test]
fn a_deployed_vms_console_shows_its_login_and_its_rescue_login_reaches_its_disk() {
    let dir = tempfile::tempdir().unwrap();
    let (kernel, ramdisk) = vm::ramdisk(&dir.path().join("boot"));
    let initrd = deployd_lab::os_image::login_initramfs(Path::new("/bin/busybox"), MARKER)
        .expect("Debian's busybox-static");
    let image = deployd_lab::os_image::bootable_with(dir.path(), &kernel, &initrd, 64, 0).unwrap();
    let (port, console_port) = (emulators::free_tcp_port(), emulators::free_tcp_port());
    let public = format!("http://10.0.2.100:{port}");
    let allowed = format!("--file-url-allowed-path={}", dir.path().display());
    let range = format!("{console_port}:{console_port}");
    let flags = [
        "--public-url",
        &public,
        &allowed,
        "--ramdisk-heartbeat-timeout",
        "4",
        "--deploy-callback-timeout",
        "120",
        "--rescue-callback-timeout",
        "120",
        "--check-provision-state-interval",
        "1",
        "--enabled-console-interfaces",
        "no-console,ipmitool-socat",
        "--enabled-rescue-interfaces",
        "no-rescue,agent",
        "--console-port-range",
        &range,
    ];
    let engine = Engine::start_on(port, &dir.path().join("data"), &flags);
    let python = emulators::venv_bin("python");
    let python = python.display().to_string();
    let lab = Lab::start_vm(
        &dir.path().join("lab"),
        &engine.url,
        &["--firmware", "bios", "--ipmi-python", &python],
    );
    let machine = lab.machines[0].clone();
    let console_log = machine["console"].as_str().unwrap().to_owned();
    let mut driver_info = machine["ipmi"].clone();
    driver_info["deploy_kernel"] = json!(kernel.display().to_string());
    driver_info["deploy_ramdisk"] = json!(ramdisk.display().to_string());
    driver_info["kernel_append_params"] = machine["kernel_append_params"].clone();
    let node = json!({
            "name": "vm-console",
            "driver": "ipmi",
            "deploy_interface": "direct",
            "rescue_interface": "agent",
            "driver_info": driver_info,
            "properties": {"capabilities": "boot_mode:bios"},
            "instance_info": {
                "image_source": image.display().to_string(),
                "image_os_hash_algo": "sha256",
                "image_os_hash_value": sha256_of(&image),
            },
    });
    let node = support::enroll_available(&engine.url, node, &machine["mac"]);
    let (_, shown) = call("GET", &format!("{}/v1/nodes/{node}", engine.url), None);
    assert_eq!(
        shown["console_interface"], "ipmitool-socat",
        "Ironic's default once enabled"
    );
    let wait_for = |state: &str| {
        let ends = [
            state.to_owned(),
            format!("{state} failed"),
            "deploy failed".to_owned(),
        ];
        let n = wait_node(&engine.url, &node, 400, |n| {
            n["provision_state"]
                .as_str()
                .is_some_and(|s| ends.iter().any(|e| e == s))
        });
        let log = std::fs::read_to_string(&console_log).unwrap_or_default();
        assert_eq!(n["provision_state"], state, "{n}\nconsole:\n{log}");
        n
    };

    // Deployed by the agent through IPMI; the disk boots its OS.
    provision(&engine.url, &node, "active");
    wait_for("active");
    // Its login prompt, in the console log (a kernel message may cut into the marker line).
    vm::wait_console(Path::new(&console_log), "deployed login: ", 120);

    // The console: the OS's login prompt, and a command typed there.
    let states = format!("{}/v1/nodes/{node}/states/console", engine.url);
    let (status, body) = call("PUT", &states, Some(json!({"enabled": true})));
    assert_eq!(status, 202, "{body}");
    let (_, shown) = call("GET", &states, None);
    assert_eq!(
        shown["console_info"],
        json!({"type": "socat", "url": format!("tcp://127.0.0.1:{console_port}")})
    );
    let mut console = Console::connect(console_port);
    console.expect("deployed login: ", 60);
    console.type_line("root");
    console.expect(SHELL_READY, 30);
    console.run("echo typed-$((6*7)) on $(hostname)", "typed-42 on deployed");

    // Rescue: the ramdisk's rescue login on the same console, the disk readable.
    let (status, body) = call(
        "PUT",
        &format!("{}/v1/nodes/{node}/states/provision", engine.url),
        Some(json!({"target": "rescue", "rescue_password": "s3cret-Rescue"})),
    );
    assert_eq!(status, 202, "{body}");
    let rescued = wait_for("rescue");
    assert_eq!(rescued["last_error"], Value::Null);
    assert_eq!(rescued["instance_info"].get("hashed_rescue_password"), None);
    console.expect("rescue ready", 120);
    console.expect("login: ", 60);
    console.type_line("rescue");
    console.expect("Password: ", 30);
    console.type_line("wrong");
    console.expect("Login incorrect", 30);
    console.expect("login: ", 30);
    console.type_line("rescue");
    console.expect("Password: ", 30);
    console.type_line("s3cret-Rescue");
    console.expect(SHELL_READY, 30);
    // The deployed disk's boot sector names what installed its loader.
    console.run(
        "dd if=/dev/vda bs=1 skip=3 count=8 2>/dev/null; echo ' read-by-rescue'",
        "SYSLINUX read-by-rescue",
    );

    // Unrescue: the disk boots again, and its console shows it (the rescue ramdisk's
    // prompt is "(none) login:").
    provision(&engine.url, &node, "unrescue");
    wait_for("active");
    console.expect("deployed login: ", 120);
}
