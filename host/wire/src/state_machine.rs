//! Ironic's provision state machine, as a pure table: no I/O, no clock, no store. It is
//! part of the wire: the engine moves nodes by it, and clients read the same states (a
//! CLI waiting for a stable state, a test expecting `deploy failed`).
//!
//! States and events carry Ironic's spelling on the wire (`"wait call-back"`, `"deploy
//! failed"`), so the operator API and the `baremetal` CLI see what they see against Ironic.
//! The table is `ironic/common/state_machine.py` (see `shared/reference`, §4.1); the tests
//! check it row by row against a transcription of that reference.

use std::fmt;

string_enum! {
    /// A node's provision state.
    ProvisionState {
        Enroll = "enroll",
        Verifying = "verifying",
        Manageable = "manageable",
        Available = "available",
        Deploying = "deploying",
        WaitCallBack = "wait call-back",
        DeployHold = "deploy hold",
        DeployFailed = "deploy failed",
        Active = "active",
        Error = "error",
        Deleting = "deleting",
        Cleaning = "cleaning",
        CleanWait = "clean wait",
        CleanHold = "clean hold",
        CleanFailed = "clean failed",
        Inspecting = "inspecting",
        InspectWait = "inspect wait",
        InspectFailed = "inspect failed",
        Adopting = "adopting",
        AdoptFailed = "adopt failed",
        Rescuing = "rescuing",
        RescueWait = "rescue wait",
        Rescue = "rescue",
        RescueFailed = "rescue failed",
        Unrescuing = "unrescuing",
        UnrescueFailed = "unrescue failed",
        Servicing = "servicing",
        ServiceWait = "service wait",
        ServiceHold = "service hold",
        ServiceFailed = "service failed",
    }
}

string_enum! {
    /// What moves a node from one state to the next.
    Event {
        Manage = "manage",
        Provide = "provide",
        Clean = "clean",
        Inspect = "inspect",
        Adopt = "adopt",
        Deploy = "deploy",
        Rebuild = "rebuild",
        Delete = "delete",
        Wait = "wait",
        Resume = "resume",
        Done = "done",
        Fail = "fail",
        Abort = "abort",
        Hold = "hold",
        Unhold = "unhold",
        Rescue = "rescue",
        Unrescue = "unrescue",
        Service = "service",
    }
}

/// The events that take a new node from `enroll` to `wait call-back` (manage, verified,
/// provide, cleaned, deploy, driver waits): how tests and benchmarks build waiting fleets.
pub const ENROLL_TO_WAIT_CALL_BACK: [Event; 6] = [
    Event::Manage,
    Event::Done,
    Event::Provide,
    Event::Done,
    Event::Deploy,
    Event::Wait,
];

/// A name that is not a state or event we know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    pub(crate) kind: &'static str,
    pub(crate) name: String,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} {:?}", self.kind, self.name)
    }
}

impl std::error::Error for UnknownName {}

/// An event the current state does not accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IllegalTransition {
    pub state: ProvisionState,
    pub event: Event,
}

impl fmt::Display for IllegalTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "event \"{}\" is not allowed in provision state \"{}\"",
            self.event, self.state
        )
    }
}

impl std::error::Error for IllegalTransition {}

/// The timeout families of the wait states: which callback a waiting node expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitKind {
    Deploy,
    Clean,
    Service,
    Rescue,
    /// `inspect wait`: the ramdisk's inventory is awaited (Ironic's `inspect_wait_timeout`,
    /// from the moment inspection booted it: agents do not heartbeat while inspecting).
    Inspect,
}

impl WaitKind {
    /// The configuration option that bounds this wait (as Ironic names it).
    pub fn option_name(self) -> &'static str {
        match self {
            WaitKind::Deploy => "deploy_callback_timeout",
            WaitKind::Clean => "clean_callback_timeout",
            WaitKind::Service => "service_callback_timeout",
            WaitKind::Rescue => "rescue_callback_timeout",
            WaitKind::Inspect => "inspect_wait_timeout",
        }
    }
}

impl ProvisionState {
    /// Where `event` takes a node in this state.
    pub fn next(self, event: Event) -> Result<ProvisionState, IllegalTransition> {
        use Event as E;
        use ProvisionState as S;
        let to = match (self, event) {
            (S::Enroll, E::Manage) => S::Verifying,
            (S::Verifying, E::Done) => S::Manageable,
            (S::Verifying, E::Fail) => S::Enroll,
            (S::Manageable, E::Provide | E::Clean) => S::Cleaning,
            (S::Manageable, E::Inspect) => S::Inspecting,
            (S::Manageable, E::Adopt) => S::Adopting,
            (S::Available, E::Deploy) => S::Deploying,
            (S::Available, E::Manage) => S::Manageable,
            (S::Deploying, E::Wait) => S::WaitCallBack,
            (S::Deploying, E::Hold) => S::DeployHold,
            (S::Deploying, E::Done) => S::Active,
            (S::Deploying, E::Fail) => S::DeployFailed,
            (S::WaitCallBack, E::Resume) => S::Deploying,
            (S::WaitCallBack, E::Hold) => S::DeployHold,
            (S::WaitCallBack, E::Fail | E::Abort) => S::DeployFailed,
            (S::WaitCallBack, E::Delete) => S::Deleting,
            (S::DeployHold, E::Unhold) => S::WaitCallBack,
            (S::DeployHold, E::Abort) => S::DeployFailed,
            (S::DeployFailed, E::Deploy | E::Rebuild) => S::Deploying,
            (S::DeployFailed, E::Delete) => S::Deleting,
            (S::Active, E::Rebuild) => S::Deploying,
            (S::Active, E::Delete) => S::Deleting,
            (S::Active, E::Rescue) => S::Rescuing,
            (S::Active, E::Service) => S::Servicing,
            (S::Error, E::Rebuild) => S::Deploying,
            (S::Error, E::Delete) => S::Deleting,
            (S::Deleting, E::Clean) => S::Cleaning,
            (S::Deleting, E::Fail) => S::Error,
            (S::Cleaning, E::Wait) => S::CleanWait,
            (S::Cleaning, E::Hold) => S::CleanHold,
            (S::Cleaning, E::Done) => S::Available,
            (S::Cleaning, E::Manage) => S::Manageable,
            (S::Cleaning, E::Fail) => S::CleanFailed,
            (S::CleanWait, E::Resume) => S::Cleaning,
            (S::CleanWait, E::Hold) => S::CleanHold,
            (S::CleanWait, E::Fail | E::Abort) => S::CleanFailed,
            (S::CleanHold, E::Unhold) => S::CleanWait,
            (S::CleanHold, E::Abort) => S::CleanFailed,
            (S::CleanFailed, E::Manage) => S::Manageable,
            (S::Inspecting, E::Done) => S::Manageable,
            (S::Inspecting, E::Wait) => S::InspectWait,
            (S::Inspecting, E::Fail) => S::InspectFailed,
            (S::InspectWait, E::Resume) => S::Inspecting,
            (S::InspectWait, E::Done) => S::Manageable,
            (S::InspectWait, E::Fail | E::Abort) => S::InspectFailed,
            (S::InspectFailed, E::Manage) => S::Manageable,
            (S::InspectFailed, E::Inspect) => S::Inspecting,
            (S::Adopting, E::Done) => S::Active,
            (S::Adopting, E::Fail) => S::AdoptFailed,
            (S::AdoptFailed, E::Adopt) => S::Adopting,
            (S::AdoptFailed, E::Manage) => S::Manageable,
            (S::Rescuing, E::Wait) => S::RescueWait,
            (S::Rescuing, E::Done) => S::Rescue,
            (S::Rescuing, E::Fail) => S::RescueFailed,
            (S::RescueWait, E::Resume) => S::Rescuing,
            (S::RescueWait, E::Fail | E::Abort) => S::RescueFailed,
            (S::RescueWait, E::Delete) => S::Deleting,
            (S::Rescue | S::RescueFailed | S::UnrescueFailed, E::Rescue) => S::Rescuing,
            (S::Rescue | S::RescueFailed | S::UnrescueFailed, E::Unrescue) => S::Unrescuing,
            (S::Rescue | S::RescueFailed | S::UnrescueFailed, E::Delete) => S::Deleting,
            (S::Unrescuing, E::Done) => S::Active,
            (S::Unrescuing, E::Fail) => S::UnrescueFailed,
            (S::Servicing, E::Done) => S::Active,
            (S::Servicing, E::Wait) => S::ServiceWait,
            (S::Servicing, E::Hold) => S::ServiceHold,
            (S::Servicing, E::Fail) => S::ServiceFailed,
            (S::ServiceWait, E::Resume) => S::Servicing,
            (S::ServiceWait, E::Hold) => S::ServiceHold,
            (S::ServiceWait, E::Fail | E::Abort) => S::ServiceFailed,
            (S::ServiceWait, E::Delete) => S::Deleting,
            (S::ServiceHold, E::Service) => S::Servicing,
            (S::ServiceHold, E::Unhold) => S::ServiceWait,
            (S::ServiceHold, E::Fail | E::Abort) => S::ServiceFailed,
            (S::ServiceFailed, E::Service) => S::Servicing,
            (S::ServiceFailed, E::Rescue) => S::Rescuing,
            (S::ServiceFailed, E::Wait) => S::ServiceWait,
            (S::ServiceFailed, E::Hold) => S::ServiceHold,
            (S::ServiceFailed, E::Delete) => S::Deleting,
            (S::ServiceFailed, E::Abort) => S::Active,
            (state, event) => return Err(IllegalTransition { state, event }),
        };
        Ok(to)
    }

    /// Stable states are where a flow ends; a node in one has no target.
    pub fn is_stable(self) -> bool {
        use ProvisionState as S;
        matches!(
            self,
            S::Enroll | S::Manageable | S::Available | S::Active | S::Error | S::Rescue
        )
    }

    /// States a failed flow ends in (a history event about them is an `ERROR`).
    pub fn is_failed(self) -> bool {
        use ProvisionState as S;
        matches!(
            self,
            S::DeployFailed
                | S::CleanFailed
                | S::InspectFailed
                | S::AdoptFailed
                | S::RescueFailed
                | S::UnrescueFailed
                | S::ServiceFailed
                | S::Error
        )
    }

    /// The state a transient state is heading for (`target_provision_state`).
    pub fn target(self) -> Option<ProvisionState> {
        use ProvisionState as S;
        Some(match self {
            S::Verifying => S::Manageable,
            S::Deploying | S::WaitCallBack | S::DeployFailed | S::DeployHold => S::Active,
            S::Adopting | S::AdoptFailed | S::Unrescuing | S::UnrescueFailed => S::Active,
            S::Servicing | S::ServiceWait | S::ServiceFailed | S::ServiceHold => S::Active,
            S::Cleaning | S::CleanWait | S::CleanFailed | S::CleanHold | S::Deleting => {
                S::Available
            }
            S::Inspecting | S::InspectWait | S::InspectFailed => S::Manageable,
            S::Rescuing | S::RescueWait | S::RescueFailed => S::Rescue,
            S::Enroll | S::Manageable | S::Available | S::Active | S::Error | S::Rescue => {
                return None;
            }
        })
    }

    /// Wait states, each bounded by its timeout: those in which a ramdisk agent calls back,
    /// and `inspect wait`.
    pub fn wait_kind(self) -> Option<WaitKind> {
        use ProvisionState as S;
        match self {
            S::WaitCallBack => Some(WaitKind::Deploy),
            S::CleanWait => Some(WaitKind::Clean),
            S::ServiceWait => Some(WaitKind::Service),
            S::RescueWait => Some(WaitKind::Rescue),
            S::InspectWait => Some(WaitKind::Inspect),
            _ => None,
        }
    }

    /// Wait states a heartbeat touches. `inspect wait` is bounded from the moment the
    /// ramdisk booted for inspection, as Ironic's `inspect_wait_timeout` is, so nothing
    /// extends it.
    pub fn accepts_touch(self) -> bool {
        matches!(self.wait_kind(), Some(k) if k != WaitKind::Inspect)
    }

    /// States in which the engine itself is working. Nobody can resume them after a
    /// restart, so recovery fails them (Ironic: `STUCK_STATES_TREATED_AS_FAIL`).
    pub fn is_busy(self) -> bool {
        use ProvisionState as S;
        matches!(
            self,
            S::Deploying
                | S::Cleaning
                | S::Verifying
                | S::Inspecting
                | S::Adopting
                | S::Rescuing
                | S::Unrescuing
                | S::Deleting
                | S::Servicing
        )
    }
}

#[cfg(test)]
mod tests;
