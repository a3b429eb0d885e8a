//! `agent_redfish`: the ramdisk agent writes the image; power through Redfish.
agent_family::family_driver!(
    AgentRedfish,
    "agent_redfish",
    Agent,
    "redfish",
    agent_family::agent_heartbeat
);
