//! `deployd node console NODE`: the operator's terminal on a node's serial console (see
//! the engine's `console`): the `tcp://` url of its `console_info`, connected to, with the
//! terminal in raw mode so every key reaches the machine. `Ctrl-]` (telnet's escape)
//! leaves; the console stays enabled for the next operator.

use std::io::{Read, Write};
use std::net::TcpStream;

use anyhow::{Context, bail};
use serde_json::json;

/// The key that leaves the console (`Ctrl-]`).
const ESCAPE: u8 = 0x1d;

/// Attaches stdin and stdout to `node`'s console (enabling it first with `enable`).
pub fn attach(
    client: &deployd_client::blocking::Client,
    node: &str,
    enable: bool,
) -> anyhow::Result<()> {
    let path = format!("/v1/nodes/{node}/states/console");
    let mut states = client.get(&path)?;
    if states["console_enabled"] != true {
        if !enable {
            bail!(
                "the console of node {node} is disabled: enable it with --enable (or baremetal node console enable {node})"
            );
        }
        let body = json!({"enabled": true});
        client.call(
            deployd_client::Method::PUT,
            &path,
            deployd_client::Payload::Json(&body),
        )?;
        states = client.get(&path)?;
    }
    let url = states["console_info"]["url"].as_str().map(str::to_owned);
    let address = url
        .as_deref()
        .and_then(|u| u.strip_prefix("tcp://"))
        .with_context(|| {
            format!(
                "node {node}'s console has no tcp:// url to connect to: {}",
                states["console_info"]
            )
        })?;
    let socket = TcpStream::connect(address).with_context(|| format!("connecting to {address}"))?;
    eprintln!("Connected to node {node}'s console at {address}. Ctrl-] leaves.\r");
    let _raw = RawTerminal::enter();
    let mut from_machine = socket.try_clone()?;
    let output = std::thread::spawn(move || {
        let mut stdout = std::io::stdout();
        let mut buf = [0u8; 4096];
        while let Ok(n) = from_machine.read(&mut buf) {
            if n == 0
                || stdout
                    .write_all(&buf[..n])
                    .and_then(|()| stdout.flush())
                    .is_err()
            {
                break;
            }
        }
    });
    let mut to_machine = socket;
    let mut stdin = std::io::stdin();
    let mut buf = [0u8; 1024];
    loop {
        let n = stdin.read(&mut buf)?;
        let typed = &buf[..n];
        let (keys, leave) = match typed.iter().position(|&b| b == ESCAPE) {
            Some(at) => (&typed[..at], true),
            None => (typed, n == 0),
        };
        if to_machine.write_all(keys).is_err() || leave {
            break;
        }
    }
    let _ = to_machine.shutdown(std::net::Shutdown::Both);
    let _ = output.join();
    eprintln!("\r\nLeft node {node}'s console.");
    Ok(())
}

/// The terminal in raw mode while this lives (nothing when stdin is no terminal).
struct RawTerminal(Option<rustix::termios::Termios>);

impl RawTerminal {
    fn enter() -> RawTerminal {
        let stdin = rustix::stdio::stdin();
        if !rustix::termios::isatty(stdin) {
            return RawTerminal(None);
        }
        let Ok(before) = rustix::termios::tcgetattr(stdin) else {
            return RawTerminal(None);
        };
        let mut raw = before.clone();
        raw.make_raw();
        let set = rustix::termios::tcsetattr(stdin, rustix::termios::OptionalActions::Now, &raw);
        RawTerminal(set.ok().map(|()| before))
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        if let Some(before) = &self.0 {
            let stdin = rustix::stdio::stdin();
            let _ =
                rustix::termios::tcsetattr(stdin, rustix::termios::OptionalActions::Now, before);
        }
    }
}
