//! `deployd store`: backup (online, through the engine), restore (onto either backend),
//! copy (a store into a new one, checked), verify (offline, on a data directory), and the
//! shared store's schema migration. See `deployd_engine::store::backup`, `::copy`,
//! `::verify` and `::postgres`.

use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use deployd_engine::store::{StoreConfig, backup, copy, postgres, verify};

#[derive(Subcommand)]
pub enum StoreCommand {
    /// Writes a backup of the running engine's store to a file (the engine keeps serving).
    Backup {
        #[command(flatten)]
        endpoint: crate::cli::Endpoint,
        /// Where the backup goes (written to a temporary file, renamed when complete).
        #[arg(long)]
        to: PathBuf,
    },
    /// Restores a backup, taken on either store, into a new data directory (sled) or an
    /// empty PostgreSQL database no engine serves; start `deployd serve` on it after.
    Restore {
        #[arg(long)]
        from: PathBuf,
        /// A new data directory for the embedded store (sled).
        #[arg(
            long,
            env = "DEPLOYD_DATA_DIR",
            required_unless_present = "store_url",
            conflicts_with = "store_url"
        )]
        data_dir: Option<PathBuf>,
        /// `postgres://user:password@host:port/database`: an empty shared store.
        #[arg(long)]
        store_url: Option<String>,
    },
    /// Copies a stopped engine's store (or a shared store, served or not) into a new one:
    /// sled to PostgreSQL, PostgreSQL to sled, or either to another of its kind; then reads
    /// the copy back and checks every record against the source's.
    Copy {
        /// A data directory (sled), or `postgres://…`.
        #[arg(long)]
        from: String,
        /// A new data directory (sled), or `postgres://…` naming an empty database no
        /// engine serves.
        #[arg(long)]
        to: String,
    },
    /// Brings a shared store's (PostgreSQL) schema to this deployd's version; refuses a
    /// database a newer deployd migrated.
    Migrate {
        /// `postgres://user:password@host:port/database`
        #[arg(long, env = "DEPLOYD_STORE_URL")]
        store_url: String,
    },
    /// Reads every record and index entry of a stopped engine's store; exits 1 on a problem.
    Verify {
        #[arg(long, env = "DEPLOYD_DATA_DIR", default_value = "deployd-data")]
        data_dir: PathBuf,
    },
}

pub fn run(command: StoreCommand) -> anyhow::Result<()> {
    match command {
        StoreCommand::Backup { endpoint, to } => download(&endpoint, &to),
        StoreCommand::Restore {
            from,
            data_dir,
            store_url,
        } => {
            let file = std::fs::File::open(&from)
                .with_context(|| format!("opening {}", from.display()))?;
            let file = BufReader::new(file);
            let (done, into) = match (data_dir, store_url) {
                (Some(data_dir), _) => {
                    std::fs::create_dir_all(&data_dir)?;
                    let path = data_dir.join("store");
                    let done = backup::restore_to_sled(&path, &StoreConfig::default(), file)?;
                    (done, data_dir.display().to_string())
                }
                (None, Some(url)) => {
                    let runtime = tokio::runtime::Runtime::new()?;
                    let done = runtime.block_on(backup::restore_to_shared(&url, file))?;
                    (done, "the shared store".to_owned())
                }
                (None, None) => anyhow::bail!("name a --data-dir or a --store-url to restore into"),
            };
            println!(
                "restored {} nodes, {} ports, {} documents and {} history events ({} records) into {into}; {} ports, config drives and events whose node was not in the backup were dropped",
                done.nodes, done.ports, done.documents, done.events, done.records, done.dropped
            );
            Ok(())
        }
        StoreCommand::Copy { from, to } => {
            let runtime = tokio::runtime::Runtime::new()?;
            let (from, to) = (copy::Place::parse(&from), copy::Place::parse(&to));
            let done = copy::copy(&from, &to, &runtime)?;
            let m = &done.moved;
            println!(
                "copied {} nodes, {} ports, {} documents and {} history events ({} records); read back from the copy: equal (sha256 {})",
                m.nodes, m.ports, m.documents, m.events, m.records, done.sha256
            );
            Ok(())
        }
        StoreCommand::Migrate { store_url } => {
            let runtime = tokio::runtime::Runtime::new()?;
            let (was, now) = runtime.block_on(postgres::migrate(&store_url))?;
            if was == now {
                println!("the shared store's schema is at version {now}: nothing to do");
            } else {
                println!("migrated the shared store's schema from version {was} to {now}");
            }
            Ok(())
        }
        StoreCommand::Verify { data_dir } => {
            let v = verify::verify(&data_dir.join("store"), &StoreConfig::default())?;
            println!(
                "{} nodes, {} ports, {} documents, {} history events, {} stale deadline entries (dropped at start): {} problems",
                v.nodes, v.ports, v.documents, v.history_events, v.stale_deadlines, v.problems
            );
            for problem in &v.found {
                println!("  {problem}");
            }
            if v.problems > 0 {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

/// Streams `GET /store/backup` to `to`; only a backup that ended with its trailer is kept.
fn download(endpoint: &crate::cli::Endpoint, to: &std::path::Path) -> anyhow::Result<()> {
    let url = format!("{}/store/backup", endpoint.url.trim_end_matches('/'));
    let mut request = reqwest::blocking::Client::builder()
        .timeout(None)
        .build()?
        .get(&url);
    if let Some(user) = &endpoint.user {
        request = request.basic_auth(user, std::env::var("DEPLOYD_PASSWORD").ok());
    }
    let mut response = request.send().with_context(|| format!("GET {url}"))?;
    anyhow::ensure!(
        response.status().is_success(),
        "GET {url}: {} {}",
        response.status(),
        response.text().unwrap_or_default()
    );
    let dir = to
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let file = tempfile::NamedTempFile::new_in(dir)?;
    let mut out = BufWriter::new(file);
    let bytes = response
        .copy_to(&mut out)
        .context("the backup was cut off")?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    let tail = std::fs::read(file.path())?;
    let last = tail.rsplit(|&b| b == b'\n').nth(1).unwrap_or_default();
    anyhow::ensure!(
        last.starts_with(b"{\"end\""),
        "the backup ended without its trailer (the engine logged why); nothing was kept"
    );
    file.as_file().sync_all()?;
    file.persist(to)?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "wrote {} ({bytes} bytes)", to.display())?;
    Ok(())
}
