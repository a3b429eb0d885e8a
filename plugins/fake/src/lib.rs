//! `fake`: deploys without hardware, through the host's fake BMC. For tests and first steps.

use deployd_driver_sdk::bmc::{self, BootDevice, PowerState};
use deployd_driver_sdk::{Description, Driver, Family, Outcome, describe, export_driver, log};

struct Fake;

impl Driver for Fake {
    fn describe() -> Description {
        describe!(
            "fake",
            Family::Fake,
            "fake",
            "Deploys instantly without hardware (fake power)",
        )
    }

    fn deploy() -> Outcome {
        let steps = bmc::set_boot_device(BootDevice::Disk, true)
            .and_then(|()| bmc::set_power(PowerState::On));
        match steps {
            Ok(()) => {
                log::info("fake deploy finished");
                Outcome::Done
            }
            Err(e) => Outcome::Fail(e.into()),
        }
    }

    fn tear_down() -> Outcome {
        match bmc::set_power(PowerState::Off) {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::Fail(e.into()),
        }
    }

    fn clean_up(reason: String) {
        log::warn(&format!("cleaning up after: {reason}"));
        let _ = bmc::set_power(PowerState::Off);
    }
}

export_driver!(Fake);
