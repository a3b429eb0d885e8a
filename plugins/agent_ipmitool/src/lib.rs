//! `agent_ipmitool`: the ramdisk agent writes the image; power through ipmitool.
agent_family::family_driver!(
    AgentIpmitool,
    "agent_ipmitool",
    Agent,
    "ipmitool",
    agent_family::agent_heartbeat
);
