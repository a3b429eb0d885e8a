//! What an operator asks of a node: `PUT /v1/nodes/{id}/states/provision` and
//! `…/states/power` take these targets, spelled as Ironic spells them.

use crate::version::Version;

string_enum! {
    /// A provision target (Ironic's `VERBS`).
    ProvisionTarget {
        Active = "active",
        Deleted = "deleted",
        Rebuild = "rebuild",
        Manage = "manage",
        Provide = "provide",
        Inspect = "inspect",
        Abort = "abort",
        Clean = "clean",
        Adopt = "adopt",
        Rescue = "rescue",
        Unrescue = "unrescue",
        Deploy = "deploy",
        Undeploy = "undeploy",
        Unhold = "unhold",
        Service = "service",
    }
}

impl ProvisionTarget {
    /// The API microversion that brought the target.
    pub fn since(self) -> Version {
        use ProvisionTarget as T;
        Version(match self {
            T::Active | T::Deleted | T::Rebuild => 1,
            T::Manage | T::Provide => 4,
            T::Inspect => 6,
            T::Abort => 13,
            T::Clean => 15,
            T::Adopt => 17,
            T::Rescue | T::Unrescue => 38,
            T::Deploy | T::Undeploy => 73,
            T::Unhold => 85,
            T::Service => 87,
        })
    }
}

string_enum! {
    /// A power target.
    PowerTarget {
        On = "power on",
        Off = "power off",
        Reboot = "rebooting",
        SoftOff = "soft power off",
        SoftReboot = "soft rebooting",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_keep_ironic_spelling_and_versions() {
        assert_eq!("deleted".parse(), Ok(ProvisionTarget::Deleted));
        assert_eq!(ProvisionTarget::Undeploy.since(), Version(73));
        assert_eq!(
            serde_json::to_string(&PowerTarget::SoftReboot).unwrap(),
            "\"soft rebooting\""
        );
        assert!("power cycle".parse::<PowerTarget>().is_err());
        // Every target's version is within what the API serves.
        for t in ProvisionTarget::ALL {
            assert!(t.since() <= crate::version::MAX);
        }
    }
}
