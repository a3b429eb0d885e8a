//! `pxe_ipmitool`: the engine writes the image over the disk the agent exposes; power
//! through ipmitool.
agent_family::family_driver!(
    PxeIpmitool,
    "pxe_ipmitool",
    Pxe,
    "ipmitool",
    agent_family::pxe_heartbeat
);
