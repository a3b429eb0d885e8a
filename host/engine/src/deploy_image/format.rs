//! What an image is, by its content: the first bytes of a disk image name its format,
//! whatever the operator called it. Only raw and qcow2 are deployed (qcow2 is served as
//! the raw disk it describes); anything else is refused before a machine boots, naming
//! what it is, rather than written to a disk that then cannot boot.

/// Bytes [`detect`] needs: a VDI's signature sits at 0x40, an ISO's past 32 KiB.
pub const HEAD: usize = 0x8006;

/// A disk image format, as its content says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Raw,
    Qcow2,
    /// A format deployd does not deploy, by the name operators know it by.
    Unsupported(&'static str),
}

impl Format {
    /// The name Ironic and Glance use (`disk_format`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Raw => "raw",
            Format::Qcow2 => "qcow2",
            Format::Unsupported(name) => name,
        }
    }
}

/// The format of an image that starts with `head` (at least [`HEAD`] bytes, or the whole
/// image if it is shorter). Anything unrecognised is a raw disk, as for `qemu-img`.
pub fn detect(head: &[u8]) -> Format {
    let at = |offset: usize, magic: &[u8]| head.get(offset..offset + magic.len()) == Some(magic);
    if at(0, b"QFI\xfb") {
        // qcow (version 1) shares the magic; its version field says 1.
        return match head.get(4..8) {
            Some([0, 0, 0, 1]) => Format::Unsupported("qcow (version 1)"),
            _ => Format::Qcow2,
        };
    }
    const SIGNATURES: &[(usize, &[u8], &str)] = &[
        (0, b"KDMV", "vmdk"),
        (0, b"# Disk DescriptorFile", "vmdk"),
        (0, b"vhdxfile", "vhdx"),
        (0, b"conectix", "vhd"),
        (0x40, b"\x7f\x10\xda\xbe", "vdi"),
        (0, b"LUKS\xba\xbe", "luks"),
        (0, b"\x1f\x8b", "gzip"),
        (0, b"\xfd7zXZ\x00", "xz"),
        (0, b"\x28\xb5\x2f\xfd", "zstd"),
        (0, b"BZh", "bzip2"),
    ];
    SIGNATURES
        .iter()
        .find(|(offset, magic, _)| at(*offset, magic))
        .map_or(Format::Raw, |(_, _, name)| Format::Unsupported(name))
}

/// Checks what the content is against what the operator declared
/// (`instance_info.image_disk_format`), as Ironic does since its image-format checks
/// (a "raw" file that is really a qcow2 with a backing file was CVE-2024-44082's cousin).
pub fn check(found: Format, declared: Option<&str>) -> Result<(), String> {
    if let Format::Unsupported(name) = found {
        return Err(format!(
            "the image is {name}, which deployd does not deploy: convert it to raw or qcow2"
        ));
    }
    match declared {
        None => Ok(()),
        Some(d) if d == found.name() => Ok(()),
        Some(d @ ("raw" | "qcow2")) => Err(format!(
            "instance_info.image_disk_format is {d:?} but the image is {}",
            found.name()
        )),
        Some(d) => Err(format!(
            "unsupported instance_info.image_disk_format {d:?}: deployd deploys raw and qcow2 images"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_by_content() {
        let mut qcow2 = b"QFI\xfb\0\0\0\x03".to_vec();
        qcow2.resize(512, 0);
        assert_eq!(detect(&qcow2), Format::Qcow2);
        assert_eq!(
            detect(b"QFI\xfb\0\0\0\x01"),
            Format::Unsupported("qcow (version 1)")
        );
        let mut vdi = vec![0u8; 0x80];
        vdi[0x40..0x44].copy_from_slice(b"\x7f\x10\xda\xbe");
        assert_eq!(detect(&vdi), Format::Unsupported("vdi"));
        assert_eq!(detect(b"KDMV...."), Format::Unsupported("vmdk"));
        assert_eq!(detect(b"\x1f\x8b\x08"), Format::Unsupported("gzip"));
        // A boot sector, an empty image and anything else are raw.
        assert_eq!(detect(&[0u8; 512]), Format::Raw);
        assert_eq!(detect(b""), Format::Raw);
        assert_eq!(detect(b"QFI"), Format::Raw);
    }

    #[test]
    fn a_declared_format_must_match_the_content() {
        assert!(check(Format::Raw, None).is_ok());
        assert!(check(Format::Qcow2, Some("qcow2")).is_ok());
        let e = check(Format::Qcow2, Some("raw")).unwrap_err();
        assert!(e.contains("\"raw\"") && e.contains("qcow2"), "{e}");
        let e = check(Format::Raw, Some("vmdk")).unwrap_err();
        assert!(e.contains("vmdk"), "{e}");
        let e = check(Format::Unsupported("vhdx"), None).unwrap_err();
        assert!(e.contains("vhdx"), "{e}");
    }
}
