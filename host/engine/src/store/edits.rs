//! An operator's (or a step's) change to a node's record, and a node's deletion: the
//! rules every backend applies, once. A change sees the node's provision state and its
//! body as they are under the node's lock (sled) or row lock (PostgreSQL) and may refuse;
//! the uuid never changes, a name must be a valid one, `updated_at` is stamped, and the
//! body must stay within its size limits.

use uuid::Uuid;

use super::StoreError;
use crate::clock::Timestamp;
use crate::node::{self, NodeBody, Provision};
use crate::state_machine::ProvisionState;

/// The body `change` makes of `old`, and its JSON, stamped `now`; or why not (then
/// nothing is written).
pub(crate) fn edited<E: From<StoreError>>(
    uuid: Uuid,
    provision: &Provision,
    old: &NodeBody,
    change: impl Fn(&Provision, &mut NodeBody) -> Result<(), E>,
    now: Timestamp,
) -> Result<(NodeBody, Vec<u8>), E> {
    let mut body = old.clone();
    change(provision, &mut body)?;
    body.uuid = uuid;
    if let Some(name) = &body.name {
        node::validate_name(name).map_err(StoreError::from)?;
    }
    body.updated_at = Some(now);
    let json = serde_json::to_vec(&body).expect("a node body serialises");
    node::check_sizes(&body, json.len(), Some(old)).map_err(StoreError::from)?;
    node::check_no_nul("the node", &body, &json, Some(old)).map_err(StoreError::from)?;
    Ok((body, json))
}

/// Whether a node may be deleted as it is: in the states where Ironic allows it, or in
/// maintenance.
pub(crate) fn deletable(
    uuid: Uuid,
    provision: &Provision,
    body: &NodeBody,
) -> Result<(), StoreError> {
    use ProvisionState as S;
    let stable = matches!(
        provision.state,
        S::Enroll | S::Manageable | S::Available | S::AdoptFailed
    );
    if stable || body.maintenance {
        return Ok(());
    }
    Err(StoreError::DeleteRefused {
        node: uuid,
        state: provision.state,
    })
}

/// The record of a node just enrolled, put straight into `available` (clients older than
/// API 1.11); refused unless it is still in `enroll`.
pub(crate) fn initially_available(uuid: Uuid, old: Provision) -> Result<Provision, StoreError> {
    if old.state != ProvisionState::Enroll {
        return Err(StoreError::StateChanged {
            node: uuid,
            expected: ProvisionState::Enroll,
            actual: old.state,
        });
    }
    Ok(Provision {
        state: ProvisionState::Available,
        ..old
    })
}
