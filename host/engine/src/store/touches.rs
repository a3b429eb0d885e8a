//! The rule of a touch, what every heartbeat of a live agent does to its waiting node: its
//! clock and deadline move, its state does not. Every backend applies it.

use crate::clock::Timestamp;
use crate::node::Provision;
use crate::state_machine::Timeouts;

/// `old` touched at `at`, with the agent's `progress` mark: the clock moves, and the
/// progress clock only when the mark differs from the last. The same rule for every backend.
pub(crate) fn touched(
    timeouts: &Timeouts,
    old: &Provision,
    at: Timestamp,
    progress: Option<u64>,
) -> Provision {
    let (progress_at, progress) = match progress {
        Some(mark) if mark != old.progress => (at, mark),
        _ => (old.progress_at, old.progress),
    };
    Provision {
        updated_at: at,
        deadline: timeouts
            .deadline(old.state, at, progress_at)
            .map(|(d, _)| d),
        progress_at,
        progress,
        ..*old
    }
}

/// `old` with progress `mark` seen at `at` elsewhere than in a heartbeat (a driver reading
/// its agent's command list): the progress clock moves, `provision_updated_at` does not;
/// `None` when the node does not wait or the mark is the last one seen.
pub(crate) fn progressed(
    timeouts: &Timeouts,
    old: &Provision,
    at: Timestamp,
    mark: u64,
) -> Option<Provision> {
    if !old.state.accepts_touch() || old.progress == mark {
        return None;
    }
    Some(Provision {
        deadline: timeouts
            .deadline(old.state, old.updated_at, at)
            .map(|(d, _)| d),
        progress_at: at,
        progress: mark,
        ..*old
    })
}

/// A fingerprint of an agent's report of its progress, stable across restarts (FNV-1a,
/// 64 bits) and never 0, which means "no report yet". The report is the concatenation of
/// `parts`, hashed as they come: no report is assembled to be hashed.
pub fn progress_fingerprint<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let hash = parts
        .into_iter()
        .flatten()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    hash.max(1)
}

/// What a heartbeat said of its agent, kept with the touch where several engines share the
/// nodes (the shared store), so a node read through any engine shows its agent's last
/// report: its command API, its version, its own account of its work, and when (the
/// store's clock, set by the touch). What a heartbeat does not say stays as the last one
/// said it (a heartbeat without a status message keeps the last message).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AgentHeard {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// When the heartbeat was heard, in microseconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_micros: Option<i64>,
    /// Which boot of the agent it was (a digest of its token, which each boot gets anew):
    /// the touch tells whether the store heard this boot before, whichever engine did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<String>,
}
