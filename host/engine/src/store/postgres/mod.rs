//! The shared store on PostgreSQL: several engines, one database.
//!
//! sled is one process's store; this is the store that several engines share. The rules
//! (transitions, deadlines, the sweeper's verdict, `last_error`'s words) are the sled
//! store's own functions (`transitions::advanced`, `touches::touched`, `expiry::judge`,
//! `enrolled`); what differs is how a write is made atomic and fenced:
//!
//! - **A node is a row** whose hot columns (state, target, clock, deadline, the sweeper's
//!   index position `due`, progress, owner and owner epoch) sit outside its JSON body. Only
//!   `due` is indexed (a partial index on the rows that have one), so a touch, which moves
//!   `updated_at` and `deadline` but not `due`, is a heap-only update: no index is written.
//! - **The database's clock** stamps every touch, transition and sweep (`now()` of the
//!   statement's transaction): engines whose clocks disagree still agree on deadlines.
//! - **Touches are grouped**: every touch waiting while the previous statement runs goes
//!   into the next one (no fixed wait window), each acknowledged after its commit
//!   (`touches`).
//! - **The sweeper** takes due rows with `FOR UPDATE SKIP LOCKED`, so every engine can
//!   sweep and no two take the same node; the row lock orders it with touches, and the
//!   failing `UPDATE` rechecks the deadline itself (`sweep`).
//! - **Engines hold leases** (`leases`): a row per engine renewed on the database's clock.
//!   A node's claim is `owner` + `owner_epoch`, valid while that lease lives; a claimed
//!   write is fenced on both. A survivor marks an expired engine dead with a
//!   compare-and-swap and takes its nodes over.
//! - **Ports are rows** whose MAC and name are unique by the table's own constraints, so
//!   two engines creating ports for one MAC cannot both win; a port goes with its node
//!   (`ports`).
//! - **A deploy's config drive** is a row beside its node's, read only by the agent's
//!   download (`config_drives`).
//! - **History** is a table of rows, one per transition (in its transaction) and per
//!   milestone, shown in the words of `store::history` (`history`).
//! - **Documents** (chassis, port groups, allocations, …) are rows by kind and uuid, each
//!   unique value a row of its own, taken by its insert (`documents`).
//! - **Uploaded drivers** are rows by version (sha256 and limits) with each name's
//!   active one, loaded by every engine that starts on the database and by every engine
//!   running when one is uploaded or unloaded (`drivers`, notified to `listener`).
//! - **Edits and deletions** lock the node's row and apply the rules above the backends
//!   (`store::edits`); a name is unique by the table's constraint (`edits`).
//!
//! - **A flow step's claim** is the database's as well as the conductor's: owner and
//!   epoch in the node's row, every write under it fenced (`leases`, `nodes`, and the
//!   engine's side in `membership`).
//! - **Engines start beside one another** (`recovery`): one that joins recovers what no
//!   live engine holds, by the rule of `store::recovery`.
//!
//! The schema is versioned (`schema`): an engine migrates an older one at start and
//! refuses a newer one, as the sled store's format check does.

mod claims;
mod config_drives;
mod documents;
mod drivers;
mod edits;
mod export;
mod grouped;
mod history;
mod leases;
mod listener;
mod membership;
mod nodes;
mod ports;
mod recovery;
mod rows;
mod schema;
mod sweep;
mod tls;
mod touches;

use std::str::FromStr;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use super::StoreError;
use crate::state_machine::Timeouts;

pub use claims::Refusal;
pub use drivers::KeptDriver;
pub use leases::{DeadEngine, EngineId, EngineInfo, LeaseTimes, Renewed, TakenOver};
pub use listener::{DeadlineListener, Notifications};
pub use membership::Membership;
pub use schema::SCHEMA_VERSION;

/// Connections an engine keeps to the shared store.
const POOL_SIZE: usize = 12;

/// An engine's registration: its row and the epoch its claims carry (see `leases`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub id: i64,
    pub epoch: i64,
}

/// One engine's handle on the shared store.
pub struct SharedStore {
    pool: Pool,
    /// The lease's own connection: renewing it never waits behind the engine's load for
    /// one of `pool`'s (a lease that lapsed under load would stop every action).
    leases: Pool,
    /// Where to open a connection of its own (the deadline listener's).
    config: tokio_postgres::Config,
    /// How its connections are made (see `tls`).
    tls: tls::Tls,
    timeouts: Timeouts,
    lease_times: LeaseTimes,
    /// Whether transitions and milestones are recorded in the nodes' history
    /// (`[conductor] node_history`); what was recorded before is shown either way.
    history: bool,
    touches: grouped::Grouped<touches::Touch>,
    claims: claims::Claims,
}

impl SharedStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`, with TLS as its
    /// `sslmode` and `sslrootcert` ask: see `tls`), migrates an older schema and refuses a
    /// newer one. Needs a tokio runtime: the touch batchers run on it.
    pub async fn connect(url: &str, timeouts: Timeouts) -> Result<SharedStore, StoreError> {
        let (config, tls) = config(url)?;
        let leases = pool(config.clone(), &tls, 1)?;
        let pool = pool(config.clone(), &tls, POOL_SIZE)?;
        let mut client = pool.get().await.map_err(pool_error)?;
        schema::migrate(&mut client).await?;
        drop(client);
        let touches = touches::start(pool.clone());
        let claims = claims::Claims::start(pool.clone());
        Ok(SharedStore {
            pool,
            leases,
            config,
            tls,
            timeouts,
            lease_times: LeaseTimes::default(),
            history: true,
            touches,
            claims,
        })
    }

    /// The same store with engines' leases of other lengths (tests shorten them).
    pub fn with_lease_times(self, lease_times: LeaseTimes) -> SharedStore {
        SharedStore {
            lease_times,
            ..self
        }
    }

    /// The same store recording no history (`[conductor] node_history = false`).
    pub fn without_history(self) -> SharedStore {
        SharedStore {
            history: false,
            ..self
        }
    }

    pub fn lease_times(&self) -> LeaseTimes {
        self.lease_times
    }

    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Bytes the database takes on its disks.
    pub async fn size_on_disk(&self) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT pg_database_size(current_database())", &[])
            .await
            .map_err(db_error)?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_error)
    }

    /// The connection the lease is renewed and dead engines declared on.
    async fn lease_client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.leases.get().await.map_err(pool_error)
    }
}

/// Applies the schema's pending migrations to the database at `url`; returns the version
/// it was at and the version it is at now. What `deployd store migrate` runs.
pub async fn migrate(url: &str) -> Result<(i32, i32), StoreError> {
    let (config, tls) = config(url)?;
    let pool = pool(config, &tls, 1)?;
    let mut client = pool.get().await.map_err(pool_error)?;
    schema::migrate(&mut client).await
}

/// The connection settings in `url` and the TLS it asks for, with synchronous commit on
/// whatever the server's default: a write is acknowledged only once it is on the primary's
/// disk. An unreadable URL is refused without being repeated (it may hold a password).
fn config(url: &str) -> Result<(tokio_postgres::Config, tls::Tls), StoreError> {
    let (settings, tls) = tls::settings(url)?;
    let mut config = tokio_postgres::Config::from_str(&settings)
        .map_err(|e| StoreError::Shared(format!("the store URL: {e}")))?;
    let options = format!(
        "{} -c synchronous_commit=on",
        config.get_options().unwrap_or_default()
    );
    config.options(options.trim_start());
    Ok((config, tls))
}

fn pool(config: tokio_postgres::Config, tls: &tls::Tls, size: usize) -> Result<Pool, StoreError> {
    let recycling = || ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = match tls {
        tls::Tls::Plain => Manager::from_config(config, NoTls, recycling()),
        tls::Tls::Verified(connector) => {
            Manager::from_config(config, connector.clone(), recycling())
        }
    };
    Pool::builder(manager)
        .max_size(size)
        .build()
        .map_err(|e| StoreError::Shared(e.to_string()))
}

/// A connection that could not be had is the database's absence (a 503, as a full disk is
/// for sled), whatever the server said: it is down, restarting, refusing connections to
/// this database, or has none left. A wrong password or a database that does not exist is
/// the configuration's fault, not a passing one.
fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    use tokio_postgres::error::SqlState;
    match e {
        deadpool_postgres::PoolError::Backend(e) => {
            let code = e.as_db_error().map(|d| d.code().clone());
            let misconfigured = code
                .is_some_and(|c| c.code().starts_with("28") || c == SqlState::INVALID_CATALOG_NAME);
            match misconfigured {
                true => db_error(e),
                false => StoreError::Unavailable(format!("the shared store: {}", described(&e))),
            }
        }
        e => StoreError::Unavailable(format!("the shared store: {e}")),
    }
}

/// The database's time now (its transaction's, inside one).
async fn now(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<crate::clock::Timestamp, StoreError> {
    let row = client
        .query_one("SELECT now()", &[])
        .await
        .map_err(db_error)?;
    Ok(rows::stamp(row.get(0)))
}

/// The constraint a refused write broke, if that is why it was refused.
fn violated(e: &tokio_postgres::Error) -> Option<&str> {
    e.as_db_error().and_then(|d| d.constraint())
}

/// A lost connection, or an error the database says will pass (it is shutting down or
/// failing over, out of disk, memory or connections, or it gave up a transaction in a
/// deadlock or a serialization failure), is the database's absence: a 503, and nothing
/// was changed. Any other error the database answered, or a statement this engine could
/// not make, is the store's own fault.
fn db_error(e: tokio_postgres::Error) -> StoreError {
    use std::error::Error;
    if let Some(db) = e.as_db_error() {
        return match passing(db.code()) {
            true => StoreError::Unavailable(format!("the shared store: {db}")),
            false => StoreError::Shared(db.to_string()),
        };
    }
    let io = e.source().is_some_and(|s| s.is::<std::io::Error>());
    if e.is_closed() || io {
        StoreError::Unavailable(format!("the shared store: {}", described(&e)))
    } else {
        StoreError::Shared(described(&e))
    }
}

/// Whether an error the database answered says the same call may work later. Class 08 is
/// the connection's; 53 insufficient resources (a full disk among them); 57P01–57P03 a
/// server shutting down or not yet up; 25006 a read-only server (a standby, mid-failover);
/// 40001 and 40P01 a transaction the server rolled back to let another through.
fn passing(code: &tokio_postgres::error::SqlState) -> bool {
    use tokio_postgres::error::SqlState;
    let class = &code.code()[..2];
    class == "08"
        || class == "53"
        || [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::READ_ONLY_SQL_TRANSACTION,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
        ]
        .contains(code)
}

/// An error with its cause (tokio-postgres keeps the interesting part there).
fn described(e: &tokio_postgres::Error) -> String {
    use std::error::Error;
    match e.as_db_error() {
        Some(db) => db.to_string(),
        None => match e.source() {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}
