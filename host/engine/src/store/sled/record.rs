//! Byte layouts of a stored node and of deadline-index keys.
//!
//! A node is one sled value, `provision record ‖ body JSON`, so that every write to a node
//! is a single atomic insert. The provision record is what a heartbeat rewrites, so it
//! comes first, is fixed-size and is cheap to decode (a touch copies the JSON bytes as they
//! are, without parsing them): `[version, state, target, updated_at, deadline, indexed,
//! progress_at, progress]`, the four times as i64 BE microseconds and the progress
//! fingerprint as u64 BE, 43 bytes, with `target = 0xFF` and a time of `i64::MIN` for none.
//! Version 2 records (27 bytes, before stall timeouts) are read as having made progress
//! when they were last updated; every write stores version 3. A deadline key is
//! `deadline: u64 BE ‖ uuid`, so sled's key order is deadline order and the sweeper reads
//! the index from the front.

use uuid::Uuid;

use crate::clock::Timestamp;
use crate::node::Provision;
use crate::state_machine::ProvisionState;

use super::StoreError;

const VERSION: u8 = 3;
const RECORD_LEN: usize = 43;
/// The record of stores written before stall timeouts, without the progress fields.
const V2: u8 = 2;
const V2_LEN: usize = 27;
const NO_TARGET: u8 = 0xFF;
const NO_DEADLINE: i64 = i64::MIN;

/// Every state's stored code, written out: reordering or adding states in the state
/// machine must never change what a stored byte means (the golden test below pins them).
/// An unlisted state is a compile error in [`state_code`].
pub(crate) const STATE_CODES: [(ProvisionState, u8); 30] = {
    use ProvisionState as S;
    [
        (S::Enroll, 0),
        (S::Verifying, 1),
        (S::Manageable, 2),
        (S::Available, 3),
        (S::Deploying, 4),
        (S::WaitCallBack, 5),
        (S::DeployHold, 6),
        (S::DeployFailed, 7),
        (S::Active, 8),
        (S::Error, 9),
        (S::Deleting, 10),
        (S::Cleaning, 11),
        (S::CleanWait, 12),
        (S::CleanHold, 13),
        (S::CleanFailed, 14),
        (S::Inspecting, 15),
        (S::InspectWait, 16),
        (S::InspectFailed, 17),
        (S::Adopting, 18),
        (S::AdoptFailed, 19),
        (S::Rescuing, 20),
        (S::RescueWait, 21),
        (S::Rescue, 22),
        (S::RescueFailed, 23),
        (S::Unrescuing, 24),
        (S::UnrescueFailed, 25),
        (S::Servicing, 26),
        (S::ServiceWait, 27),
        (S::ServiceHold, 28),
        (S::ServiceFailed, 29),
    ]
};

pub(crate) fn state_code(s: ProvisionState) -> u8 {
    use ProvisionState as S;
    // Exhaustive on purpose: a new state needs a new code in STATE_CODES.
    match s {
        S::Enroll
        | S::Verifying
        | S::Manageable
        | S::Available
        | S::Deploying
        | S::WaitCallBack
        | S::DeployHold
        | S::DeployFailed
        | S::Active
        | S::Error
        | S::Deleting
        | S::Cleaning
        | S::CleanWait
        | S::CleanHold
        | S::CleanFailed
        | S::Inspecting
        | S::InspectWait
        | S::InspectFailed
        | S::Adopting
        | S::AdoptFailed
        | S::Rescuing
        | S::RescueWait
        | S::Rescue
        | S::RescueFailed
        | S::Unrescuing
        | S::UnrescueFailed
        | S::Servicing
        | S::ServiceWait
        | S::ServiceHold
        | S::ServiceFailed => {}
    }
    STATE_CODES
        .iter()
        .find(|(state, _)| *state == s)
        .map(|(_, code)| *code)
        .expect("every state has a code")
}

pub(crate) fn state_from_code(code: u8) -> Option<ProvisionState> {
    STATE_CODES
        .iter()
        .find(|(_, c)| *c == code)
        .map(|(state, _)| *state)
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
    out[27..35].copy_from_slice(&p.progress_at.as_micros().to_be_bytes());
    out[35..43].copy_from_slice(&p.progress.to_be_bytes());
    out
}

/// The length of the record a stored value starts with, from its version byte.
fn record_len(value: &[u8]) -> Option<usize> {
    match *value.first()? {
        VERSION => Some(RECORD_LEN),
        V2 => Some(V2_LEN),
        _ => None,
    }
}

fn decode(uuid: Uuid, bytes: &[u8]) -> Result<Provision, StoreError> {
    let corrupt = || StoreError::Corrupt(format!("provision record of node {uuid}: {bytes:02x?}"));
    if record_len(bytes) != Some(bytes.len()) {
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
    let updated_at = Timestamp::from_micros(i64_at(3));
    let (progress_at, progress) = match bytes[0] {
        V2 => (updated_at, 0),
        _ => (
            Timestamp::from_micros(i64_at(27)),
            u64::from_be_bytes(bytes[35..43].try_into().expect("8 bytes")),
        ),
    };
    Ok(Provision {
        state,
        target,
        updated_at,
        deadline: time(11),
        indexed: time(19),
        progress_at,
        progress,
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
    let len = record_len(value).filter(|&len| value.len() >= len);
    let Some(len) = len else {
        return Err(StoreError::Corrupt(format!(
            "node {uuid}: a {}-byte value of record version {:?}",
            value.len(),
            value.first()
        )));
    };
    let (record, json) = value.split_at(len);
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
                progress_at: Timestamp::from_micros(9 + i as i64),
                progress: u64::MAX - i as u64,
            };
            assert_eq!(decode(Uuid::nil(), &encode(&p)).unwrap(), p);
        }
    }

    /// The bytes on disk, pinned: if this fails, stored nodes would change meaning.
    #[test]
    fn stored_bytes_are_stable() {
        let p = Provision {
            state: ProvisionState::WaitCallBack,
            target: Some(ProvisionState::Active),
            updated_at: Timestamp::from_micros(0x0102_0304_0506_0708),
            deadline: Some(Timestamp::from_micros(-2)),
            indexed: None,
            progress_at: Timestamp::from_micros(0x1112_1314_1516_1718),
            progress: 0x2122_2324_2526_2728,
        };
        assert_eq!(
            hex::encode(encode(&p)),
            "030508\
             0102030405060708\
             fffffffffffffffe\
             8000000000000000\
             1112131415161718\
             2122232425262728"
        );
        // A record written before stall timeouts (version 2) still reads, as having made
        // progress when it was last updated.
        let v2 = hex::decode(
            "020508\
             0102030405060708\
             fffffffffffffffe\
             8000000000000000",
        )
        .unwrap();
        let (old, json) = split(Uuid::nil(), &[&v2[..], b"{}"].concat())
            .map(|(p, j)| (p, j.to_vec()))
            .unwrap();
        assert_eq!(json, b"{}");
        assert_eq!(
            old,
            Provision {
                progress_at: p.updated_at,
                progress: 0,
                ..p
            }
        );
        let codes: Vec<(&str, u8)> = STATE_CODES.iter().map(|(s, c)| (s.as_str(), *c)).collect();
        let golden = [
            "enroll",
            "verifying",
            "manageable",
            "available",
            "deploying",
            "wait call-back",
            "deploy hold",
            "deploy failed",
            "active",
            "error",
            "deleting",
            "cleaning",
            "clean wait",
            "clean hold",
            "clean failed",
            "inspecting",
            "inspect wait",
            "inspect failed",
            "adopting",
            "adopt failed",
            "rescuing",
            "rescue wait",
            "rescue",
            "rescue failed",
            "unrescuing",
            "unrescue failed",
            "servicing",
            "service wait",
            "service hold",
            "service failed",
        ];
        for (i, name) in golden.iter().enumerate() {
            assert_eq!(codes[i], (*name, i as u8));
        }
        assert_eq!(
            codes.len(),
            ProvisionState::ALL.len(),
            "every state has a code"
        );
        for &state in ProvisionState::ALL {
            assert_eq!(state_from_code(state_code(state)), Some(state));
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
            progress_at: Timestamp::from_micros(1),
            progress: 0,
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
