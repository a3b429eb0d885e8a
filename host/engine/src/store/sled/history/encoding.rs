//! The bytes of stored history: a record per event, records gathered in chunks.
//!
//! A record is `1, from, to, target (state codes, see [`super::super::record`]), seconds
//! (f64, little-endian), the event's name (a length byte, then its bytes), a text tag,
//! then the text's bytes`: 18 bytes for a plain state change, where its JSON took about
//! 110. Stores of format 3 and before hold one JSON record per key, which still read.
//!
//! A chunk is a node's events one after another, each `time (u64 µs, big-endian) ‖
//! sequence (u64, big-endian) ‖ the record's length (u32, little-endian) ‖ the record`.
//! Stored bytes outlive versions: the golden tests pin them.

use super::super::record::{state_code, state_from_code};
use crate::state_machine::ProvisionState;

/// A state change (or a milestone within a state) to record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Change<'a> {
    /// The state left and the state entered.
    pub from: ProvisionState,
    pub to: ProvisionState,
    /// The state machine event (`milestone` for a milestone).
    pub event: &'a str,
    pub target: Option<ProvisionState>,
    /// The error that failed the node, if this change did.
    pub error: Option<&'a str>,
    /// Seconds spent in the state left.
    pub seconds: f64,
    /// A milestone within the state instead of a change of it (power on, the agent's
    /// lookup and first heartbeat, an image transfer's start and end): its words.
    pub note: Option<&'a str>,
}

/// A change as read back, from either form.
pub(super) use crate::store::history::Recorded as Stored;

/// One event of a chunk: when, its sequence number, what.
pub(crate) struct Entry {
    pub micros: u64,
    pub sequence: u64,
    pub change: Stored,
}

/// The first byte of a binary record (a JSON one starts with `{`).
const BINARY: u8 = 1;
/// The target byte of a change without a target.
pub(super) const NO_TARGET: u8 = 0xff;
/// What the text at the end of a binary record is.
const NO_TEXT: u8 = 0;
const ERROR_TEXT: u8 = 1;
const NOTE_TEXT: u8 = 2;
/// An entry's bytes before its record.
const ENTRY_HEAD: usize = 20;

fn encode_into(v: &mut Vec<u8>, change: &Change) {
    let text = match (change.error, change.note) {
        (Some(error), _) => Some((ERROR_TEXT, error)),
        (None, Some(note)) => Some((NOTE_TEXT, note)),
        (None, None) => None,
    };
    let event = change.event.as_bytes();
    v.reserve(14 + event.len() + text.map_or(0, |(_, t)| t.len()));
    v.push(BINARY);
    v.push(state_code(change.from));
    v.push(state_code(change.to));
    v.push(change.target.map_or(NO_TARGET, state_code));
    v.extend_from_slice(&change.seconds.to_le_bytes());
    v.push(u8::try_from(event.len()).expect("an event's name is short"));
    v.extend_from_slice(event);
    match text {
        None => v.push(NO_TEXT),
        Some((tag, text)) => {
            v.push(tag);
            v.extend_from_slice(text.as_bytes());
        }
    }
}

/// Reads a record in either form; `None` if it is neither.
pub(super) fn decode(value: &[u8]) -> Option<Stored> {
    let Some((&BINARY, rest)) = value.split_first() else {
        return serde_json::from_slice(value).ok();
    };
    let (&[from, to, target], rest) = rest.split_first_chunk::<3>()?;
    let (seconds, rest) = rest.split_first_chunk::<8>()?;
    let (&len, rest) = rest.split_first()?;
    let (event, rest) = rest.split_at_checked(len as usize)?;
    let (&tag, text) = rest.split_first()?;
    let text = std::str::from_utf8(text).ok().map(str::to_owned);
    let (error, note) = match tag {
        NO_TEXT if text.as_deref() == Some("") => (None, None),
        ERROR_TEXT => (Some(text?), None),
        NOTE_TEXT => (None, Some(text?)),
        _ => return None,
    };
    Some(Stored {
        from: state_from_code(from)?,
        to: state_from_code(to)?,
        event: std::str::from_utf8(event).ok()?.to_owned(),
        target: match target {
            NO_TARGET => None,
            code => Some(state_from_code(code)?),
        },
        error,
        seconds: f64::from_le_bytes(*seconds),
        note,
    })
}

/// Appends an event to a chunk.
pub(super) fn append(chunk: &mut Vec<u8>, micros: u64, sequence: u64, change: &Change) {
    chunk.extend_from_slice(&micros.to_be_bytes());
    chunk.extend_from_slice(&sequence.to_be_bytes());
    let at = chunk.len();
    chunk.extend_from_slice(&[0; 4]);
    encode_into(chunk, change);
    let len = u32::try_from(chunk.len() - at - 4).expect("a record under 4 GiB");
    chunk[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// A chunk's events, oldest first; `None` if it is damaged.
pub(super) fn entries(mut chunk: &[u8]) -> Option<Vec<Entry>> {
    let mut out = Vec::with_capacity(chunk.len() / (ENTRY_HEAD + 18));
    while !chunk.is_empty() {
        let (micros, rest) = chunk.split_first_chunk::<8>()?;
        let (sequence, rest) = rest.split_first_chunk::<8>()?;
        let (len, rest) = rest.split_first_chunk::<4>()?;
        let (record, rest) = rest.split_at_checked(u32::from_le_bytes(*len) as usize)?;
        out.push(Entry {
            micros: u64::from_be_bytes(*micros),
            sequence: u64::from_be_bytes(*sequence),
            change: decode(record)?,
        });
        chunk = rest;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProvisionState as S;

    fn encode(change: &Change) -> Vec<u8> {
        let mut v = Vec::new();
        encode_into(&mut v, change);
        v
    }

    fn failed() -> Change<'static> {
        Change {
            from: S::Deploying,
            to: S::DeployFailed,
            event: "fail",
            target: Some(S::Active),
            error: Some("disk gone"),
            seconds: 2.5,
            note: None,
        }
    }

    fn done() -> Change<'static> {
        Change {
            from: S::Manageable,
            to: S::Available,
            event: "done",
            target: None,
            error: None,
            seconds: 0.0,
            note: None,
        }
    }

    #[test]
    fn a_record_s_bytes_are_pinned() {
        let mut golden = vec![1, 4, 7, 8];
        golden.extend_from_slice(&2.5f64.to_le_bytes());
        golden.extend_from_slice(b"\x04fail\x01disk gone");
        assert_eq!(encode(&failed()), golden);
        assert_eq!(encode(&done()).len(), 18, "a plain change is this small");
        assert_eq!(encode(&done())[3], NO_TARGET);
    }

    #[test]
    fn a_chunk_s_bytes_are_pinned_and_read_back_in_order() {
        let mut chunk = Vec::new();
        append(&mut chunk, 7, 9, &done());
        let mut golden = vec![0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 9, 18, 0, 0, 0];
        golden.extend_from_slice(&encode(&done()));
        assert_eq!(chunk, golden);
        append(&mut chunk, 8, 10, &failed());
        let read = entries(&chunk).unwrap();
        let read: Vec<_> = read
            .iter()
            .map(|e| (e.micros, e.sequence, e.change.error.as_deref()))
            .collect();
        assert_eq!(read, [(7, 9, None), (8, 10, Some("disk gone"))]);
    }

    #[test]
    fn a_binary_record_reads_as_its_json_twin_did() {
        let json = br#"{"from":"deploying","to":"deploy failed","event":"fail","target":"active","error":"disk gone","seconds":2.5}"#;
        let from_json = decode(json).unwrap();
        assert_eq!(decode(&encode(&failed())), Some(from_json));
        let note = Change {
            note: Some("image written: 3 GiB"),
            error: None,
            ..failed()
        };
        let read = decode(&encode(&note)).unwrap();
        assert_eq!(
            (read.note.as_deref(), read.error),
            (Some("image written: 3 GiB"), None)
        );
    }

    #[test]
    fn a_damaged_record_or_chunk_is_refused_not_misread() {
        let good = encode(&done());
        assert!(decode(&good).is_some());
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_none(), "record cut at {cut}");
        }
        let mut extra = good.clone();
        extra.push(b'x');
        assert!(decode(&extra).is_none(), "a no-text record ends at its tag");
        for (at, byte) in [(1, 200), (2, 200), (3, 200), (12, 9)] {
            let mut bad = good.clone();
            bad[at] = byte;
            assert!(decode(&bad).is_none(), "byte {at} = {byte}");
        }
        let mut chunk = Vec::new();
        append(&mut chunk, 1, 2, &done());
        append(&mut chunk, 3, 4, &done());
        for cut in 1..chunk.len() {
            let read = entries(&chunk[..cut]).map(|e| e.len());
            let whole_first = cut == chunk.len() / 2;
            assert_eq!(read, whole_first.then_some(1), "chunk cut at {cut}");
        }
    }
}
