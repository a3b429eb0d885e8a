//! The table checked against `reference_table.md`: the rows of Ironic's state machine as
//! written in `shared/reference/ironic-protocol.md` §4.1, copied verbatim.

use std::collections::BTreeMap;

use super::*;

/// (from, event) → to, parsed from the reference rows `| from | ev → to; ev / ev → to |`.
fn reference() -> BTreeMap<(ProvisionState, Event), ProvisionState> {
    let mut table = BTreeMap::new();
    for line in include_str!("reference_table.md")
        .lines()
        .filter(|l| l.starts_with('|'))
    {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let from: ProvisionState = cells[0].parse().unwrap();
        for arm in cells[1].split(';') {
            // Drop commentary such as "(used when a manual clean … finishes)".
            let arm = arm.split('(').next().unwrap();
            let (events, to) = arm.split_once('→').unwrap();
            let to: ProvisionState = to.trim().parse().unwrap();
            for event in events.split('/') {
                let event: Event = event.trim().parse().unwrap();
                assert!(
                    table.insert((from, event), to).is_none(),
                    "duplicate row {from} {event}"
                );
            }
        }
    }
    table
}

#[test]
fn every_reference_row_is_legal_and_lands_where_the_reference_says() {
    let table = reference();
    assert!(
        table.len() > 70,
        "the transcription parsed only {} rows",
        table.len()
    );
    for (&(from, event), &to) in &table {
        assert_eq!(from.next(event), Ok(to), "{from} --{event}-->");
    }
}

#[test]
fn every_other_event_is_refused_naming_the_state_and_the_event() {
    let table = reference();
    let mut refused = 0;
    for &state in ProvisionState::ALL {
        for &event in Event::ALL {
            if table.contains_key(&(state, event)) {
                continue;
            }
            let err = state.next(event).unwrap_err();
            assert_eq!(err, IllegalTransition { state, event });
            let text = err.to_string();
            assert!(
                text.contains(state.as_str()) && text.contains(event.as_str()),
                "{text}"
            );
            refused += 1;
        }
    }
    assert_eq!(
        refused,
        ProvisionState::ALL.len() * Event::ALL.len() - table.len()
    );
}

#[test]
fn every_state_appears_in_the_reference() {
    let table = reference();
    for &state in ProvisionState::ALL {
        let seen = table
            .iter()
            .any(|(&(from, _), &to)| from == state || to == state);
        assert!(
            seen,
            "{state} is neither a source nor a destination in the reference"
        );
    }
}

#[test]
fn the_deploy_happy_path_and_its_targets() {
    use Event as E;
    use ProvisionState as S;
    let mut state = S::Enroll;
    let path = [
        E::Manage,
        E::Done,
        E::Provide,
        E::Done,
        E::Deploy,
        E::Wait,
        E::Resume,
        E::Done,
    ];
    for event in path {
        state = state.next(event).unwrap();
    }
    assert_eq!(state, S::Active);
    assert_eq!(S::WaitCallBack.target(), Some(S::Active));
    assert_eq!(S::DeployFailed.target(), Some(S::Active));
    assert_eq!(S::CleanWait.target(), Some(S::Available));
    for &s in ProvisionState::ALL {
        assert_eq!(s.is_stable(), s.target().is_none(), "{s}");
    }
}

#[test]
fn wait_states_have_a_timeout_family_and_fail_somewhere() {
    for &state in ProvisionState::ALL {
        if state.wait_kind().is_some() {
            let failed = state.next(Event::Fail).unwrap();
            assert!(
                failed.as_str().ends_with("failed"),
                "{state} fails to {failed}"
            );
        }
    }
}

#[test]
fn busy_states_all_have_a_fail_transition() {
    for &state in ProvisionState::ALL.iter().filter(|s| s.is_busy()) {
        assert!(state.next(Event::Fail).is_ok(), "{state} cannot fail");
    }
}

#[test]
fn names_round_trip_and_unknown_names_are_errors() {
    for &s in ProvisionState::ALL {
        assert_eq!(s.as_str().parse::<ProvisionState>(), Ok(s));
        assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
    }
    let err = "wait callback".parse::<ProvisionState>().unwrap_err();
    assert_eq!(err.to_string(), "unknown ProvisionState \"wait callback\"");
}
