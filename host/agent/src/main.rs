//! `deployd-agent`: the ramdisk agent on its own, for a ramdisk image (the engine's
//! `deployd agent` subcommand runs the same code).

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "deployd-agent",
    version,
    about = "A ramdisk agent: looks its machine up, heartbeats, writes images to its disk"
)]
struct Cli {
    #[command(flatten)]
    agent: deployd_agent::AgentArgs,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let ended = tokio::runtime::Runtime::new()?.block_on(deployd_agent::runner::run(cli.agent))?;
    ended.exit()
}
