"""A lab machine's IPMI BMC, on pyghmi's BMC class (as pyghmi's own fakebmc is).

Power and boot device go to the machine's Redfish system on the lab's BMC (so IPMI and
Redfish see one machine); Serial-over-LAN is bridged to the machine's serial port, a
Unix socket (a VM's: QEMU serves it), reconnected whenever the machine restarts.
Run by `deployd lab --ipmi-python` (see ipmi.rs); prints "ready <port>" once listening.
"""

import argparse
import json
import socket
import sys
import threading
import time
import urllib.request

import pyghmi.ipmi.bmc as bmc

# What the serial port printed while no SOL session was active, kept for the next one
# (as a console server replays recent output): at most this many bytes.
BACKLOG = 4096

# IPMI's boot devices (pyghmi's names) and the lab's Redfish targets.
TARGETS = {"network": "Pxe", "hd": "Hdd", "optical": "Cd"}
DEVICES = {"Pxe": "network", "UefiHttp": "network", "Hdd": "hd", "Cd": "optical"}


class LabBmc(bmc.Bmc):
    def __init__(self, authdata, port, system, serial):
        super().__init__(authdata, port=port, address="127.0.0.1")
        self.system = system.rstrip("/")
        self.serial = serial
        self.conn = None
        self.backlog = bytearray()
        # Orders the serial port's output against a session's start.
        self.output = threading.RLock()
        threading.Thread(target=self.pump, daemon=True).start()

    def redfish(self, method, path="", body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.system + path, data=data, method=method,
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            text = answer.read()
        return json.loads(text) if text else None

    def reset(self, kind):
        self.redfish("POST", "/Actions/ComputerSystem.Reset", {"ResetType": kind})

    def get_power_state(self):
        return "on" if self.redfish("GET")["PowerState"] == "On" else "off"

    def power_on(self):
        self.reset("On")

    def power_off(self):
        self.reset("ForceOff")

    def power_shutdown(self):
        self.reset("GracefulShutdown")

    def power_reset(self):
        self.reset("ForceRestart")

    def power_cycle(self):
        self.reset("PowerCycle")

    def is_active(self):
        return self.get_power_state() == "on"

    def get_boot_device(self):
        boot = self.redfish("GET")["Boot"]
        if boot.get("BootSourceOverrideEnabled") == "Disabled":
            return "default"
        return DEVICES.get(boot.get("BootSourceOverrideTarget"), "default")

    def set_boot_device(self, bootdevice):
        target = TARGETS.get(bootdevice)
        if target is None:
            return  # "default", "setup": nothing the lab's machines can be told
        self.redfish("PATCH", "", {"Boot": {
            "BootSourceOverrideTarget": target,
            "BootSourceOverrideEnabled": "Once"}})

    def activate_payload(self, request, session):
        """A session starts: it gets what the serial port printed meanwhile first."""
        with self.output:
            super().activate_payload(request, session)
            pending, self.backlog = bytes(self.backlog), bytearray()
            if self.sol is not None and pending:
                self.sol.send_data(pending)

    def iohandler(self, data):
        """What the operator typed, on to the serial port."""
        if isinstance(data, str):
            data = data.encode("utf-8", "replace")
        conn = self.conn
        if conn is not None:
            try:
                conn.sendall(bytes(data))
            except OSError:
                pass

    def pump(self):
        """The serial port's output, on to the SOL session while one is active."""
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(self.serial)
            except OSError:
                conn.close()
                time.sleep(0.2)
                continue
            self.conn = conn
            while True:
                try:
                    data = conn.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    break
                with self.output:
                    if self.sol is not None:
                        self.sol.send_data(data)
                    else:
                        self.backlog += data
                        del self.backlog[:-BACKLOG]
            self.conn = None
            conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--system", required=True, help="the machine's Redfish system url")
    parser.add_argument("--serial", required=True, help="the machine's serial port socket")
    parser.add_argument("--username", default="admin")
    parser.add_argument("--password", default="password")
    args = parser.parse_args()
    server = LabBmc({args.username: args.password}, args.port, args.system, args.serial)
    print("ready %d" % args.port, flush=True)
    server.listen()


if __name__ == "__main__":
    sys.exit(main())
