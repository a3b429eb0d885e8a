#!/bin/busybox sh
# deployd's ramdisk init: the drivers, the network by DHCP on the interface the machine
# booted from (BOOTIF; the first one when it booted from virtual media), or statically
# as `ip=` says (dracut's syntax, Ironic's DHCP-less deploy), then the agent until it
# powers the machine off, or until it sets up a rescue (then a login).
/bin/busybox mkdir -p /proc /sys /dev /tmp /run /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "deployd ramdisk: up; loading drivers"
while read -r module; do
    insmod "/lib/modules/$module.ko" 2>/dev/null
done < /etc/modules.order

api="" bootif="" host="" port="" throttle="" static=""
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        ipa-api-url=*) api="${arg#*=}" ;;
        BOOTIF=*) bootif="${arg#*=}" ;;
        ipa-advertise-host=*) host="${arg#*=}" ;;
        ipa-advertise-port=*) port="${arg#*=}" ;;
        deployd-agent-throttle=*) throttle="${arg#*=}" ;;
        ip=*:*) static="${arg#*=}" ;;
    esac
done
mac=$(echo "${bootif#01-}" | tr '-' ':' | tr 'A-F' 'a-f')
[ -n "$api" ] || echo "deployd ramdisk: no ipa-api-url on the kernel command line"

# The interface with the boot MAC (the first one that is not lo without BOOTIF).
iface=""
tries=0
while [ -z "$iface" ] && [ $tries -lt 50 ]; do
    for dev in /sys/class/net/*; do
        name="${dev##*/}"
        [ "$name" = lo ] && continue
        if [ -z "$mac" ] || [ "$(cat "$dev/address")" = "$mac" ]; then
            iface="$name"
            break
        fi
    done
    [ -n "$iface" ] || { tries=$((tries + 1)); sleep 0.2; }
done
# Booted from virtual media there is no BOOTIF: the agent looks its node up by the MAC
# of the interface it brought up.
[ -n "$mac" ] || [ -z "$iface" ] || mac=$(cat "/sys/class/net/$iface/address")
ip link set lo up
ip link set "$iface" up
if [ -n "$static" ]; then
    # <address>::<gateway>:<netmask>:<hostname>:<interface>:none[:<dns>]
    IFS=: read -r address _ gateway netmask _ _ _ dns <<STATIC
$static
STATIC
    echo "deployd ramdisk: static address $address/$netmask on $iface ($mac), gateway ${gateway:-none}"
    ifconfig "$iface" "$address" netmask "$netmask" up
    [ -n "$gateway" ] && route add default gw "$gateway" dev "$iface"
    [ -n "$dns" ] && echo "nameserver $dns" > /etc/resolv.conf
else
    echo "deployd ramdisk: DHCP on ${iface:-no interface} ($mac)"
    until udhcpc -i "$iface" -s /etc/udhcpc.script -q -n -t 5 -T 2; do
        sleep 1
    done
fi

set -- --api-url "$api" --listen 0.0.0.0:9999 --rescue-password-file /run/rescue-password
# A UEFI machine: the agent adds a written image's boot entry where its loader needs one.
if [ -d /sys/firmware/efi ] && mount -t efivarfs efivarfs /sys/firmware/efi/efivars; then
    set -- "$@" --efivars /sys/firmware/efi/efivars
fi
[ -n "$mac" ] && set -- "$@" --mac "$mac"
[ -n "$host" ] && set -- "$@" --advertise-host "$host"
[ -n "$port" ] && set -- "$@" --advertise-port "$port"
[ -n "$throttle" ] && set -- "$@" --throttle "$throttle"
# Rescue (the agent's rescue.finalize_rescue wrote the password's hash): a `rescue` login
# (root's powers: the operator repairs the disk) on the serial console and by telnet.
rescue() {
    mkdir -p /root
    echo "root:x:0:0:root:/root:/bin/sh" > /etc/passwd
    echo "rescue:x:0:0:rescue:/root:/bin/sh" >> /etc/passwd
    echo "root:*:1:0:99999:7:::" > /etc/shadow
    echo "rescue:$(cat /run/rescue-password):1:0:99999:7:::" >> /etc/shadow
    chmod 600 /etc/shadow
    rm -f /run/rescue-password
    echo "deployd ramdisk: rescue ready; log in as rescue on this console or by telnet to $iface"
    telnetd -l /bin/login
    while true; do
        getty -L 115200 ttyS0 vt100
    done
}

echo "deployd ramdisk: starting the agent"
# The agent exits 0 when told to power off, 3 once a rescue is set up; anything else is a
# crash, restarted.
while true; do
    /bin/deployd-agent "$@"
    case $? in
        0) break ;;
        3) rescue ;;
    esac
    echo "deployd ramdisk: the agent stopped; starting it again"
    sleep 5
done
echo "deployd ramdisk: powering off"
sync
poweroff -f
