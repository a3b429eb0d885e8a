//! Byte layouts of a stored node and of deadline-index keys.
//!
//! A node is one sled value, `provision record ‖ body JSON`, so that every write to a node
//! is a single atomic insert. The provision record is what a heartbeat rewrites, so it
//! comes first, is fixed-size and is cheap to decode (a touch copies the JSON bytes as they
//! are, without parsing them): `[version, state, target, updated_at, deadline, indexed]`,
//! the three times as i64 BE microseconds, 27 bytes, with `target = 0xFF` and a time of
//! `i64::MIN` for none. A deadline key is
//! `deadline: u64 BE ‖ uuid`, so sled's key order is deadline order and the sweeper reads
//! the index from the front.

use uuid::Uuid;

use crate::clock::Timestamp;
use crate::node::Provision;
use crate::state_machine::ProvisionState;

use super::StoreError;

const VERSION: u8 = 2;
const RECORD_LEN: usize = 27;
const NO_TARGET: u8 = 0xFF;
const NO_DEADLINE: i64 = i64::MIN;

fn state_code(s: ProvisionState) -> u8 {
    ProvisionState::ALL
        .iter()
        .position(|&x| x == s)
        .expect("state is in ALL") as u8
}

fn state_from_code(code: u8) -> Option<ProvisionState> {
    ProvisionState::ALL.get(code as usize).copied()
}

fn encode(p: &Provision) -> [u8; RECORD_LEN] {
    let mut out = [0u8; RECORD_LEN];
    out[0] = VERSION;
    out[1] = state_code(p.state);
    out[2] = p.target.map_or(NO_TARGET, state_code);
    out[3..11].copy_from_slice(&p.updated_at.as_micros().to_be_bytes());
    let time = |t: Option<Timestamp>| t.map_or(NO_DEADLINE, Timestamp::as_micros).to_be_bytes();
    out[11..19].copy_from_slice(&time(p.deadline));
    out[19..27].copy_from_slice(&time(p.indexed));
    out
}

fn decode(uuid: Uuid, bytes: &[u8]) -> Result<Provision, StoreError> {
    let corrupt = || StoreError::Corrupt(format!("provision record of node {uuid}: {bytes:02x?}"));
    if bytes.len() != RECORD_LEN || bytes[0] != VERSION {
        return Err(corrupt());
    }
    let state = state_from_code(bytes[1]).ok_or_else(corrupt)?;
    let target = match bytes[2] {
        NO_TARGET => None,
        code => Some(state_from_code(code).ok_or_else(corrupt)?),
    };
    let i64_at = |at: usize| i64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let time = |at: usize| {
        Some(i64_at(at))
            .filter(|&t| t != NO_DEADLINE)
            .map(Timestamp::from_micros)
    };
    Ok(Provision {
        state,
        target,
        updated_at: Timestamp::from_micros(i64_at(3)),
        deadline: time(11),
        indexed: time(19),
    })
}

/// A stored node: the record, then the body's JSON.
pub(super) fn join(record: &Provision, body_json: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(RECORD_LEN + body_json.len());
    value.extend_from_slice(&encode(record));
    value.extend_from_slice(body_json);
    value
}

/// Splits a stored node into its decoded record and its body's JSON bytes.
pub(super) fn split(uuid: Uuid, value: &[u8]) -> Result<(Provision, &[u8]), StoreError> {
    if value.len() < RECORD_LEN {
        return Err(StoreError::Corrupt(format!(
            "node {uuid}: a {}-byte value",
            value.len()
        )));
    }
    let (record, json) = value.split_at(RECORD_LEN);
    Ok((decode(uuid, record)?, json))
}

pub(super) fn deadline_key(deadline: Timestamp, uuid: Uuid) -> [u8; 24] {
    let mut key = [0u8; 24];
    // Offset by 2^63 so that the byte order of the key is the numeric order of the i64.
    key[..8].copy_from_slice(&((deadline.as_micros() as u64) ^ (1 << 63)).to_be_bytes());
    key[8..].copy_from_slice(uuid.as_bytes());
    key
}

pub(super) fn parse_deadline_key(key: &[u8]) -> Result<(Timestamp, Uuid), StoreError> {
    let bytes: [u8; 24] = key
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("deadline key {key:02x?}")))?;
    let micros = (u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes")) ^ (1 << 63)) as i64;
    let uuid = Uuid::from_bytes(bytes[8..].try_into().expect("16 bytes"));
    Ok((Timestamp::from_micros(micros), uuid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_for_every_state() {
        for (i, &state) in ProvisionState::ALL.iter().enumerate() {
            let p = Provision {
                state,
                target: state.target(),
                updated_at: Timestamp::from_micros(1_700_000_000_000_000 + i as i64),
                deadline: (i % 2 == 0).then_some(Timestamp::from_micros(-5)),
                indexed: (i % 3 == 0).then_some(Timestamp::from_micros(-7)),
            };
            assert_eq!(decode(Uuid::nil(), &encode(&p)).unwrap(), p);
        }
    }

    #[test]
    fn corrupt_records_are_errors_not_panics() {
        let good = encode(&Provision {
            state: ProvisionState::Active,
            target: None,
            updated_at: Timestamp::from_micros(1),
            deadline: None,
            indexed: None,
        });
        for bad in [
            &good[..5],
            &[9u8; RECORD_LEN][..],
            &[&[VERSION, 200][..], &[0u8; RECORD_LEN - 2][..]].concat()[..],
        ] {
            assert!(matches!(
                decode(Uuid::nil(), bad),
                Err(StoreError::Corrupt(_))
            ));
        }
    }

    #[test]
    fn deadline_keys_sort_by_deadline_then_uuid() {
        let a = Uuid::from_u128(2);
        let b = Uuid::from_u128(1);
        let keys = [
            deadline_key(Timestamp::from_micros(-10), a),
            deadline_key(Timestamp::from_micros(0), a),
            deadline_key(Timestamp::from_micros(7), b),
            deadline_key(Timestamp::from_micros(7), a),
            deadline_key(Timestamp::from_micros(1 << 40), b),
        ];
        let mut sorted = keys;
        sorted.sort();
        assert_eq!(sorted, keys);
        for k in keys {
            let (t, u) = parse_deadline_key(&k).unwrap();
            assert_eq!(deadline_key(t, u), k);
        }
    }
}
