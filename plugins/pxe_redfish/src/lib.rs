//! `pxe_redfish`: the engine writes the image over the disk the agent exposes; power
//! and boot device through Redfish.
agent_family::family_driver!(
    PxeRedfish,
    "pxe_redfish",
    Pxe,
    "redfish",
    agent_family::pxe_heartbeat
);
