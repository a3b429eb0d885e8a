//! `deployd node|port|driver …`: the operator CLI, a thin client of the HTTP API (the same
//! requests `baremetal` makes, through `deployd-client`).

use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use deployd_client::{Method, Payload};
use deployd_wire::documents::Node;
use deployd_wire::state_machine::ProvisionState;
use deployd_wire::targets::{PowerTarget, ProvisionTarget};
use serde_json::{Map, Value, json};

#[derive(Args, Debug)]
pub struct Endpoint {
    /// The engine's API.
    #[arg(
        long,
        global = true,
        env = "DEPLOYD_URL",
        default_value = "http://127.0.0.1:6385"
    )]
    pub url: String,
    /// User for http_basic auth (the password comes from DEPLOYD_PASSWORD).
    #[arg(long, global = true, env = "DEPLOYD_USER")]
    pub user: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum NodeCommand {
    /// One line per node.
    List,
    /// Every field of a node, then its timeline (state changes and milestones).
    Show { node: String },
    /// Enroll a node.
    Create {
        #[arg(long)]
        driver: String,
        #[arg(long)]
        name: Option<String>,
        /// driver_info entries, key=value (repeatable).
        #[arg(long = "driver-info", value_parser = key_value)]
        driver_info: Vec<(String, Value)>,
        /// instance_info entries, key=value (repeatable).
        #[arg(long = "instance-info", value_parser = key_value)]
        instance_info: Vec<(String, Value)>,
    },
    /// enroll → manageable (validates the node's driver_info).
    Manage {
        node: String,
        #[arg(long)]
        wait: bool,
    },
    /// manageable → available.
    Provide {
        node: String,
        #[arg(long)]
        wait: bool,
    },
    /// Deploy; with --wait, follow it to active (or failure) with progress.
    Deploy {
        node: String,
        #[arg(long)]
        wait: bool,
    },
    /// active → available: power off, wipe the disk through the ramdisk, power off.
    Undeploy {
        node: String,
        #[arg(long)]
        wait: bool,
    },
    /// Manual cleaning of a manageable node (erase_devices_metadata), back to manageable.
    Clean {
        node: String,
        #[arg(long)]
        wait: bool,
    },
    /// Stops a deploy or cleaning that waits for its agent.
    Abort { node: String },
    /// Removes a node (in enroll, manageable, available or a failed state).
    Delete { node: String },
    /// power on | power off | rebooting | soft power off | soft rebooting
    Power { node: String, target: PowerTarget },
    /// rescue (with a password for the `rescue` login) | unrescue
    Rescue {
        node: String,
        /// The `rescue` login's password; without it, `unrescue`.
        #[arg(long, env = "DEPLOYD_RESCUE_PASSWORD")]
        password: Option<String>,
        #[arg(long)]
        wait: bool,
    },
    /// The terminal on the node's serial console (Ctrl-] leaves).
    Console {
        node: String,
        /// Enable the console first if it is not.
        #[arg(long)]
        enable: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum PortCommand {
    List,
    Create {
        #[arg(long)]
        node: String,
        #[arg(long)]
        address: String,
    },
    Delete {
        port: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum DriverCommand {
    List,
    /// Run a driver component against a simulated machine (engine and lab in a temporary
    /// directory): manage, provide, deploy, undeploy, and the node's timeline.
    Test(crate::driver_test::DriverTestArgs),
    /// Load (or replace) a driver from a .wasm component file, without a restart.
    Load {
        file: std::path::PathBuf,
        #[arg(long)]
        memory_mib: Option<usize>,
        #[arg(long)]
        deadline_ms: Option<u64>,
    },
    Unload {
        name: String,
        #[arg(long)]
        force: bool,
    },
}

/// `key=value`, the value parsed as JSON when it is JSON (numbers, booleans), else text.
fn key_value(s: &str) -> Result<(String, Value), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected key=value, got {s:?}"))?;
    let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_owned()));
    Ok((k.to_owned(), value))
}

/// The engine's API through the one client (python-ironicclient's retries of 409 and
/// 503 included), with the operator's credentials if given.
struct Client(deployd_client::blocking::Client);

impl Client {
    fn new(e: &Endpoint) -> Client {
        let mut client = deployd_client::Client::new(&e.url);
        if let Some(user) = &e.user {
            let password = std::env::var("DEPLOYD_PASSWORD").unwrap_or_default();
            client = client.with_basic_auth(user, &password);
        }
        Client(deployd_client::blocking::Client::new(client))
    }

    fn get(&self, path: &str) -> anyhow::Result<Value> {
        Ok(self.0.get(path)?)
    }

    fn json(&self, method: Method, path: &str, body: Value) -> anyhow::Result<Value> {
        Ok(self.0.call(method, path, Payload::Json(&body))?)
    }

    fn delete(&self, path: &str) -> anyhow::Result<Value> {
        Ok(self.0.call(Method::DELETE, path, Payload::None)?)
    }

    fn upload(&self, path: &str, bytes: &[u8]) -> anyhow::Result<Value> {
        Ok(self.0.call(Method::POST, path, Payload::Bytes(bytes))?)
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub fn node(endpoint: &Endpoint, command: NodeCommand) -> anyhow::Result<()> {
    let c = Client::new(endpoint);
    let provision = |node: &str, target: ProvisionTarget, arguments: Map<String, Value>| {
        Ok(c.0.provision(node, target, arguments)?)
    };
    let follow = |node: &str, target: ProvisionTarget, wait: bool, until: ProvisionState| {
        run(
            &c,
            node,
            provision(node, target, Map::new()),
            wait.then_some(until),
        )
    };
    match command {
        NodeCommand::List => {
            println!(
                "{:<36}  {:<16}  {:<14}  {:<16}  {:<10}",
                "UUID", "NAME", "DRIVER", "PROVISION STATE", "POWER"
            );
            for n in c.0.nodes()? {
                println!(
                    "{:<36}  {:<16}  {:<14}  {:<16}  {:<10}",
                    n.uuid,
                    n.name.as_deref().unwrap_or("-"),
                    n.driver,
                    state_text(n.provision_state),
                    n.power_state.as_deref().unwrap_or("-"),
                );
            }
        }
        NodeCommand::Show { node } => {
            let doc = c.get(&format!("/v1/nodes/{node}"))?;
            println!("{}", serde_json::to_string_pretty(&doc)?);
            println!("\ntimeline:");
            for line in deployd_client::timeline::lines(&c.0.history(&node)?) {
                println!("  {line}");
            }
        }
        NodeCommand::Create {
            driver,
            name,
            driver_info,
            instance_info,
        } => {
            let body = json!({
                "driver": driver,
                "name": name,
                "driver_info": driver_info.into_iter().collect::<Map<_, _>>(),
                "instance_info": instance_info.into_iter().collect::<Map<_, _>>(),
            });
            let node: Node = serde_json::from_value(c.json(Method::POST, "/v1/nodes", body)?)?;
            println!("{} {}", node.uuid, state_text(node.provision_state));
        }
        NodeCommand::Manage { node, wait } => follow(
            &node,
            ProvisionTarget::Manage,
            wait,
            ProvisionState::Manageable,
        )?,
        NodeCommand::Provide { node, wait } => follow(
            &node,
            ProvisionTarget::Provide,
            wait,
            ProvisionState::Available,
        )?,
        NodeCommand::Deploy { node, wait } => {
            follow(&node, ProvisionTarget::Active, wait, ProvisionState::Active)?
        }
        NodeCommand::Undeploy { node, wait } => follow(
            &node,
            ProvisionTarget::Deleted,
            wait,
            ProvisionState::Available,
        )?,
        NodeCommand::Clean { node, wait } => {
            let steps = json!([{"interface": "deploy", "step": "erase_devices_metadata"}]);
            let arguments = Map::from_iter([("clean_steps".to_owned(), steps)]);
            let accepted = provision(&node, ProvisionTarget::Clean, arguments);
            run(
                &c,
                &node,
                accepted,
                wait.then_some(ProvisionState::Manageable),
            )?
        }
        NodeCommand::Abort { node } => run(
            &c,
            &node,
            provision(&node, ProvisionTarget::Abort, Map::new()),
            None,
        )?,
        NodeCommand::Delete { node } => {
            c.delete(&format!("/v1/nodes/{node}"))?;
            println!("Deleted node {node}");
        }
        NodeCommand::Power { node, target } => {
            c.0.power(&node, target)?;
            println!("{node}: {target} requested");
        }
        NodeCommand::Rescue {
            node,
            password,
            wait,
        } => {
            let (target, arguments, until) = match password {
                Some(p) => {
                    let mut arguments = Map::new();
                    arguments.insert("rescue_password".into(), Value::String(p));
                    (ProvisionTarget::Rescue, arguments, ProvisionState::Rescue)
                }
                None => (
                    ProvisionTarget::Unrescue,
                    Map::new(),
                    ProvisionState::Active,
                ),
            };
            run(
                &c,
                &node,
                provision(&node, target, arguments),
                wait.then_some(until),
            )?
        }
        NodeCommand::Console { node, enable } => crate::console_cli::attach(&c.0, &node, enable)?,
    }
    Ok(())
}

fn state_text(state: Option<ProvisionState>) -> &'static str {
    state.map_or("-", ProvisionState::as_str)
}

/// After an accepted action, optionally follows the node until `until`, printing a line
/// whenever its state changes and a progress line every few seconds while it waits.
fn run(
    c: &Client,
    node: &str,
    accepted: anyhow::Result<()>,
    until: Option<ProvisionState>,
) -> anyhow::Result<()> {
    accepted?;
    let Some(until) = until else {
        println!("{node}: accepted");
        return Ok(());
    };
    let mut last = None;
    let mut ticks = 0u32;
    loop {
        let n = c.0.node(node)?;
        let state = n.provision_state;
        let since = n
            .provision_updated_at
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
        let age = since.map(|t| {
            (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_milliseconds() as f64 / 1000.0
        });
        if state != last || ticks.is_multiple_of(5) {
            let age = age.map_or("-".into(), |a| format!("{a:.1}s"));
            let agent = n
                .driver_internal_info
                .get("agent_status_message")
                .and_then(Value::as_str)
                .map(|m| format!("agent: {m}"));
            let error = n.last_error.as_ref().map(|e| format!("last_error: {e}"));
            println!(
                "{node}: {:<16} (clock moved {age} ago) {}",
                state_text(state),
                error.or(agent).unwrap_or_default()
            );
            last = state;
        }
        let Some(state) = state else {
            bail!("{node}: the engine sent no provision_state")
        };
        if state == until && n.is_settled() {
            return Ok(());
        }
        // A failure state, or a stable one other than the goal (a failed verification
        // returns the node to enroll): it will not get there by itself.
        if state.is_failed() || (n.is_settled() && state.is_stable()) {
            bail!(
                "{node} went to \"{state}\" instead of \"{until}\": {}",
                n.last_error.as_deref().unwrap_or("-")
            );
        }
        ticks += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
}

pub fn port(endpoint: &Endpoint, command: PortCommand) -> anyhow::Result<()> {
    let c = Client::new(endpoint);
    match command {
        PortCommand::List => {
            for p in c.get("/v1/ports/detail")?["ports"]
                .as_array()
                .into_iter()
                .flatten()
            {
                println!(
                    "{}  {}  {}",
                    text(&p["uuid"]),
                    text(&p["address"]),
                    text(&p["node_uuid"])
                );
            }
        }
        PortCommand::Create { node, address } => {
            let uuid = text(&c.get(&format!("/v1/nodes/{node}"))?["uuid"]);
            let p = c.json(
                Method::POST,
                "/v1/ports",
                json!({"node_uuid": uuid, "address": address}),
            )?;
            println!("{} {}", text(&p["uuid"]), text(&p["address"]));
        }
        PortCommand::Delete { port } => {
            c.delete(&format!("/v1/ports/{port}"))?;
            println!("Deleted port {port}");
        }
    }
    Ok(())
}

pub fn driver(endpoint: &Endpoint, command: DriverCommand) -> anyhow::Result<()> {
    let c = Client::new(endpoint);
    match command {
        DriverCommand::List => {
            println!(
                "{:<16}  {:<8}  {:<6}  {:<9}  {:<12}  SUMMARY",
                "NAME", "VERSION", "FAMILY", "POWER", "HASH"
            );
            for d in c.get("/v1/drivers")?["drivers"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let x = &d["deployd"];
                let hash = text(&x["hash"]);
                println!(
                    "{:<16}  {:<8}  {:<6}  {:<9}  {:<12}  {}",
                    text(&d["name"]),
                    text(&x["version"]),
                    text(&x["family"]),
                    text(&x["power"]),
                    &hash[..hash.len().min(12)],
                    text(&x["summary"])
                );
            }
        }
        DriverCommand::Load {
            file,
            memory_mib,
            deadline_ms,
        } => {
            let bytes =
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let mut query = Vec::new();
            if let Some(m) = memory_mib {
                query.push(format!("memory_mib={m}"));
            }
            if let Some(d) = deadline_ms {
                query.push(format!("deadline_ms={d}"));
            }
            let path = format!("/v1/deployd/drivers?{}", query.join("&"));
            let d = c.upload(&path, &bytes)?;
            println!(
                "loaded {} {} ({})",
                text(&d["name"]),
                text(&d["deployd"]["version"]),
                text(&d["deployd"]["hash"])
            );
        }
        DriverCommand::Test(_) => unreachable!("main runs `driver test` on its runtime"),
        DriverCommand::Unload { name, force } => {
            c.delete(&format!("/v1/deployd/drivers/{name}?force={force}"))?;
            println!("unloaded {name}");
        }
    }
    Ok(())
}
