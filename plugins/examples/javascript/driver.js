// js_redfish: an agent-family deploy driver for deployd, in JavaScript.
//
// The ramdisk agent writes the image (`standby.prepare_image`); the BMC is reached over
// Redfish through the host's `bmc` interface. Built with componentize-js against
// `wit/driver.wit` (deployd:driver@0.2.0): see `build.sh` and `plugins/GUIDE.md`.
//
// Every call is about one node, in a fresh instance: what must outlive a call goes into
// the node's scratch keys. A host call that fails throws an error whose `payload` is the
// WIT `error` ({tag: "not-ready", val: "..."}): its tag says what kind of failure it is.

import { get, getScratch, setScratch } from "deployd:driver/node@0.2.0";
import { lastHeartbeat } from "deployd:driver/provision@0.2.0";
import { run, commands } from "deployd:driver/agent@0.2.0";
import { setPower, reboot, setBootDevice } from "deployd:driver/bmc@0.2.0";
import { log } from "deployd:driver/log@0.2.0";

const STEP = "step";

const info = (text) => log("info", text);
const theNode = () => JSON.parse(get());
const scratch = (key) => {
  const value = getScratch(key);
  return value === undefined || value === null ? null : JSON.parse(value);
};
// The host's error, or a JavaScript one.
const hostError = (e) => (e && e.payload && e.payload.tag ? e.payload : null);
const message = (e) => (hostError(e) ? hostError(e).val : String(e));

function image(n) {
  const ii = n.instance_info;
  const source = ii.image_source;
  if (!source) throw new Error("instance_info.image_source is required");
  let algo = ii.image_os_hash_algo;
  let value = ii.image_os_hash_value;
  if (!(algo && value)) {
    value = ii.image_checksum || "";
    algo = { 64: "sha256", 128: "sha512" }[value.length];
    if (!algo) throw new Error("instance_info needs image_os_hash_algo and image_os_hash_value, or image_checksum");
  }
  return {
    id: source.split("/").pop(),
    urls: [ii.image_url || source],
    os_hash_algo: algo,
    os_hash_value: value,
    disk_format: ii.image_disk_format || "raw",
    container_format: "bare",
    stream_raw_images: true,
    node_uuid: n.uuid,
  };
}

function lastCommand(name) {
  const found = JSON.parse(commands()).filter((c) => c.command_name === name);
  return found.length ? found[found.length - 1] : null;
}

function bootInstance() {
  setPower("off");
  setBootDevice("disk", true);
  setPower("on");
  setScratch(STEP, undefined);
  return { tag: "done" };
}

function deployStep() {
  const heard = lastHeartbeat();
  if (heard && heard.progress) {
    const p = heard.progress;
    const of = p.bytesTotal !== undefined && p.bytesTotal !== null ? ` of ${p.bytesTotal}` : "";
    info(`agent ${heard.agentVersion}: ${p.bytesDone}${of} bytes written`);
  }
  if (scratch(STEP) === "writing") {
    const command = lastCommand("prepare_image");
    const status = command && command.command_status;
    if (status === "RUNNING" || status === "VERIFYING") return { tag: "wait" };
    if (status === "SUCCEEDED") return bootInstance();
    if (status === "FAILED") {
      return { tag: "fail", val: `the agent failed to write the image: ${JSON.stringify(command.command_error)}` };
    }
    info("the agent has no prepare_image command; starting the write again");
  }
  const imageInfo = image(theNode());
  const params = JSON.stringify({ image_info: imageInfo });
  const command = JSON.parse(run("standby.prepare_image", params, false));
  if (command.command_status !== "RUNNING" && command.command_status !== "SUCCEEDED") {
    return { tag: "fail", val: `the agent refused to write the image: ${JSON.stringify(command.command_error)}` };
  }
  setScratch(STEP, JSON.stringify("writing"));
  info(`the agent is writing image ${imageInfo.id}`);
  return { tag: "wait" };
}

export function describe() {
  return {
    name: "js_redfish",
    version: "0.2.0",
    family: "agent",
    power: "redfish",
    summary: "The ramdisk agent writes the image; power by redfish (a JavaScript driver)",
  };
}

export function validate() {
  const n = theNode();
  const missing = ["redfish_address", "redfish_system_id"].filter((k) => !(k in n.driver_info));
  if (missing.length) throw `driver_info lacks ${missing.join(", ")}`;
  try {
    image(n);
  } catch (e) {
    throw e.message;
  }
}

export function deploy() {
  try {
    setBootDevice("pxe", false);
    reboot();
    setScratch(STEP, undefined);
    return { tag: "wait" };
  } catch (e) {
    return { tag: "fail", val: message(e) };
  }
}

export function heartbeat() {
  try {
    if (theNode().provision_state === "clean wait") return { tag: "done" };
    return deployStep();
  } catch (e) {
    const error = hostError(e);
    if (error && error.tag === "not-ready") return { tag: "wait" };
    return { tag: "fail", val: message(e) };
  }
}

export function tearDown() {
  try {
    setPower("off");
    return { tag: "done" };
  } catch (e) {
    return { tag: "fail", val: message(e) };
  }
}

export function cleanUp(reason) {
  log("warn", `cleaning up after: ${reason}`);
  try {
    setPower("off");
  } catch (e) {
    // Nothing more to do.
  }
}
