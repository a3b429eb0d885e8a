//! `deployd boot dnsmasq-config`: the DHCP and TFTP configuration of deployd's boot chain
//! for the operator's dnsmasq, as Ironic deployments run it. iPXE clients (they say so in
//! DHCP's user class) get the engine's entry script over HTTP; firmware without iPXE first
//! gets an iPXE binary by TFTP (`undionly.kpxe` for BIOS, `snponly.efi` for UEFI, from
//! Debian's `ipxe` package), which then asks again as an iPXE client. UEFI firmware that
//! boots by HTTP (client architecture 16; a node with `boot_interface: http-ipxe`, which
//! its BMC boots `UefiHttp`) is answered as an `HTTPClient` with the url of the engine's
//! `/boot/ipxe.efi` instead, and so needs no TFTP.

#[derive(clap::Args, Debug, Clone)]
pub struct DnsmasqArgs {
    /// The engine's url as machines reach it (its `public_url`).
    #[arg(long)]
    pub public_url: String,
    /// The interface of the provisioning network.
    #[arg(long)]
    pub interface: String,
    /// The addresses handed out: `START,END` (and optionally `,NETMASK`).
    #[arg(long)]
    pub range: String,
    /// Where the iPXE binaries are.
    #[arg(long, default_value = "/usr/lib/ipxe")]
    pub tftp_root: String,
}

pub fn config(args: &DnsmasqArgs) -> String {
    let base = args.public_url.trim_end_matches('/');
    let boot = format!("{base}/boot/ipxe");
    format!(
        "# deployd's network boot chain, for dnsmasq (DHCP and TFTP).\n\
         port=0\n\
         interface={interface}\n\
         bind-interfaces\n\
         dhcp-range={range},12h\n\
         enable-tftp\n\
         tftp-root={tftp_root}\n\
         # iPXE says so in its user class: it gets deployd's entry script over HTTP.\n\
         dhcp-userclass=set:ipxe,iPXE\n\
         dhcp-boot=tag:ipxe,{boot}\n\
         # Firmware without iPXE gets iPXE by TFTP first: UEFI (client arch 7, 9) or BIOS.\n\
         dhcp-match=set:efi64,option:client-arch,7\n\
         dhcp-match=set:efi64,option:client-arch,9\n\
         dhcp-boot=tag:!ipxe,tag:efi64,snponly.efi\n\
         # UEFI HTTP boot (client arch 16): an HTTPClient answer, iPXE from the engine.\n\
         dhcp-match=set:efihttp,option:client-arch,16\n\
         dhcp-option-force=tag:efihttp,60,HTTPClient\n\
         dhcp-boot=tag:!ipxe,tag:efihttp,{base}/boot/ipxe.efi\n\
         dhcp-boot=tag:!ipxe,tag:!efi64,tag:!efihttp,undionly.kpxe\n",
        interface = args.interface,
        range = args.range,
        tftp_root = args.tftp_root,
    )
}
