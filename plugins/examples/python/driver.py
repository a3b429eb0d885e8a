"""py_redfish: an agent-family deploy driver for deployd, in Python.

The ramdisk agent writes the image (``standby.prepare_image``); the BMC is reached over
Redfish through the host's ``bmc`` interface. Built with componentize-py against
``wit/driver.wit`` (deployd:driver@0.2.0): see ``build.sh`` and ``plugins/GUIDE.md``.

Every call is about one node, in a fresh instance: what must outlive a call goes into the
node's scratch keys. Host calls that fail raise ``Err(error)``, whose class says what
kind of failure it is (``Error_NotReady``: wait for the next heartbeat, and so on).
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import agent, bmc, log, node, provision
from wit_world.imports.types import (
    Description,
    Error_NotReady,
    Family,
    Outcome_Done,
    Outcome_Fail,
    Outcome_Wait,
)

STEP = "step"


def message(e: Err) -> str:
    """The text of a host error, fit for last_error."""
    return e.value.value


def info(text: str) -> None:
    log.log(log.Level.INFO, text)


def the_node() -> dict:
    return json.loads(node.get())


def scratch(key: str):
    value = node.get_scratch(key)
    return None if value is None else json.loads(value)


def image(n: dict) -> dict:
    """The image and its checksum, as instance_info gives them."""
    ii = n["instance_info"]
    source = ii.get("image_source")
    if not source:
        raise ValueError("instance_info.image_source is required")
    algo, value = ii.get("image_os_hash_algo"), ii.get("image_os_hash_value")
    if not (algo and value):
        value = ii.get("image_checksum") or ""
        algo = {64: "sha256", 128: "sha512"}.get(len(value))
        if algo is None:
            raise ValueError("instance_info needs image_os_hash_algo and image_os_hash_value, or image_checksum")
    return {
        "id": source.rsplit("/", 1)[-1],
        "urls": [ii.get("image_url") or source],
        "os_hash_algo": algo,
        "os_hash_value": value,
        "disk_format": ii.get("image_disk_format", "raw"),
        "container_format": "bare",
        "stream_raw_images": True,
        "node_uuid": n["uuid"],
    }


def last_command(name: str):
    commands = json.loads(agent.commands())
    found = [c for c in commands if c.get("command_name") == name]
    return found[-1] if found else None


def boot_instance():
    bmc.set_power(bmc.PowerState.OFF)
    bmc.set_boot_device(bmc.BootDevice.DISK, True)
    bmc.set_power(bmc.PowerState.ON)
    node.set_scratch(STEP, None)
    return Outcome_Done()


def deploy_step():
    heard = provision.last_heartbeat()
    if heard is not None and heard.progress is not None:
        p = heard.progress
        of = f" of {p.bytes_total}" if p.bytes_total is not None else ""
        info(f"agent {heard.agent_version}: {p.bytes_done}{of} bytes written")
    if scratch(STEP) == "writing":
        command = last_command("prepare_image")
        status = command and command.get("command_status")
        if status in ("RUNNING", "VERIFYING"):
            return Outcome_Wait()
        if status == "SUCCEEDED":
            return boot_instance()
        if status == "FAILED":
            return Outcome_Fail(f"the agent failed to write the image: {command.get('command_error')}")
        info("the agent has no prepare_image command; starting the write again")
    img = image(the_node())
    command = json.loads(agent.run("standby.prepare_image", json.dumps({"image_info": img}), False))
    if command.get("command_status") not in ("RUNNING", "SUCCEEDED"):
        return Outcome_Fail(f"the agent refused to write the image: {command.get('command_error')}")
    node.set_scratch(STEP, json.dumps("writing"))
    info(f"the agent is writing image {img['id']}")
    return Outcome_Wait()


class WitWorld(wit_world.WitWorld):
    def describe(self) -> Description:
        return Description(
            name="py_redfish",
            version="0.2.0",
            family=Family.AGENT,
            power="redfish",
            summary="The ramdisk agent writes the image; power by redfish (a Python driver)",
        )

    def validate(self) -> None:
        n = the_node()
        missing = [k for k in ("redfish_address", "redfish_system_id") if k not in n["driver_info"]]
        if missing:
            raise Err("driver_info lacks " + ", ".join(missing))
        try:
            image(n)
        except ValueError as e:
            raise Err(str(e))

    def deploy(self):
        try:
            bmc.set_boot_device(bmc.BootDevice.PXE, False)
            bmc.reboot()
            node.set_scratch(STEP, None)
            return Outcome_Wait()
        except Err as e:
            return Outcome_Fail(message(e))

    def heartbeat(self):
        try:
            if the_node()["provision_state"] == "clean wait":
                return Outcome_Done()
            return deploy_step()
        except Err as e:
            if isinstance(e.value, Error_NotReady):
                return Outcome_Wait()
            return Outcome_Fail(message(e))
        except ValueError as e:
            return Outcome_Fail(str(e))

    def tear_down(self):
        try:
            bmc.set_power(bmc.PowerState.OFF)
            return Outcome_Done()
        except Err as e:
            return Outcome_Fail(message(e))

    def clean_up(self, reason: str) -> None:
        log.log(log.Level.WARN, f"cleaning up after: {reason}")
        try:
            bmc.set_power(bmc.PowerState.OFF)
        except Err:
            pass
