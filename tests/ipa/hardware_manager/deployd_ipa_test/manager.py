"""A hardware manager for running ironic-python-agent unprivileged in deployd's tests.

The machine's only disk is DEPLOYD_IPA_DISK, a regular file or a loop device the test
lends; its only NIC has the MAC DEPLOYD_IPA_MAC. Every erase acts on that disk. Auto-TLS uses IPA's own certificate code,
writing into $HOME instead of /run (which an unprivileged agent cannot write). It outranks
the generic manager, so IPA asks it first for everything it implements.
"""
import os

from ironic_python_agent import hardware
from ironic_python_agent import tls_utils

DISK = os.environ.get("DEPLOYD_IPA_DISK", "/nonexistent")
MAC = os.environ.get("DEPLOYD_IPA_MAC", "52:54:00:ee:00:02")
MIB = 1 << 20


def _size():
    """The disk's size: a file's length, or a block device's (whose stat size is 0)."""
    with open(DISK, "rb") as f:
        return f.seek(0, os.SEEK_END)


def _zero(ranges):
    with open(DISK, "r+b") as f:
        for start, length in ranges:
            f.seek(start)
            f.write(b"\0" * length)
        f.flush()
        os.fsync(f.fileno())


class FileDiskManager(hardware.HardwareManager):
    HARDWARE_MANAGER_NAME = "FileDiskManager"
    HARDWARE_MANAGER_VERSION = "1.0"

    def evaluate_hardware_support(self):
        return hardware.HardwareSupport.SERVICE_PROVIDER + 1

    def list_block_devices(self, include_partitions=False, all_serial_and_wwn=False):
        size = _size()
        return [hardware.BlockDevice(name=DISK, model="file", size=size,
                                     rotational=False, vendor="deployd",
                                     serial="file0", hctl=None, by_path=None)]

    def list_block_devices_check_skip_list(self, node, include_partitions=False,
                                           all_serial_and_wwn=False):
        return self.list_block_devices()

    def get_os_install_device(self, permit_refresh=False):
        return DISK

    def get_skip_list_from_node_for_disks(self, node, block_devices=None):
        return set()

    def list_network_interfaces(self):
        return [hardware.NetworkInterface(name="eth0", mac_addr=MAC, ipv4_address="127.0.0.1",
                                          has_carrier=True, vendor=None, product=None)]

    def get_cpus(self):
        return hardware.CPU(model_name="deployd test", frequency=1000, count=1,
                            architecture="x86_64", flags=[])

    def get_memory(self):
        return hardware.Memory(total=1 << 30, physical_mb=1024)

    def get_bmc_address(self):
        return None

    def get_bmc_v6address(self):
        return None

    def get_bmc_mac(self):
        return None

    def get_boot_info(self):
        return hardware.BootInfo(current_boot_mode="bios", pxe_interface=MAC)

    def get_system_vendor_info(self):
        return hardware.SystemVendorInfo(product_name="deployd", serial_number="0",
                                         manufacturer="deployd", firmware=None)

    def get_clean_steps(self, node, ports):
        return [{"step": "erase_devices_metadata", "priority": 99, "interface": "deploy",
                 "reboot_requested": False, "abortable": True},
                {"step": "erase_devices", "priority": 10, "interface": "deploy",
                 "reboot_requested": False, "abortable": True}]

    def get_deploy_steps(self, node, ports):
        return []

    def erase_devices_metadata(self, node, ports):
        size = _size()
        _zero([(0, min(MIB, size)), (max(0, size - MIB), min(MIB, size))])

    def erase_devices(self, node, ports):
        self.erase_devices_metadata(node, ports)

    def erase_block_device(self, node, block_device):
        self.erase_devices_metadata(node, [])

    def generate_tls_certificate(self, ip_address):
        root = os.path.join(os.environ["HOME"], "tls")
        os.makedirs(root, exist_ok=True)
        cert, key = os.path.join(root, "agent.crt"), os.path.join(root, "agent.key")
        content = tls_utils._generate_tls_certificate(cert, key, "deployd-test-machine",
                                                      ip_address)
        return tls_utils.TlsCertificate(content, cert, key)
