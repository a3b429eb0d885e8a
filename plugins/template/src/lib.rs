//! A driver to start from: copy this folder, rename the crate and the driver, and fill in
//! the flow. See `plugins/GUIDE.md`.

use deployd_driver_sdk::{
    Description, Driver, Family, Outcome, describe, export_driver, log, node,
};

struct Template;

impl Driver for Template {
    fn describe() -> Description {
        describe!(
            "template",
            Family::Fake,
            "fake",
            "A starting point for new drivers",
        )
    }

    fn validate() -> Result<(), String> {
        // Refuse nodes whose record lacks what the flow needs.
        let node = node::get();
        match node.instance("image_source") {
            Some(_) => Ok(()),
            None => Err("instance_info.image_source is required".into()),
        }
    }

    fn deploy() -> Outcome {
        let node = node::get();
        log::info(&format!(
            "deploying {}",
            node.instance("image_source").unwrap_or("?")
        ));
        // A real driver boots the machine into its ramdisk here and returns `Wait`; the
        // agent's heartbeats then arrive at `heartbeat`.
        Outcome::Done
    }
}

export_driver!(Template);
