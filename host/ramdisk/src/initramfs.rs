//! An initramfs: a gzip-compressed cpio archive in the `newc` format the kernel unpacks
//! into its root filesystem. Built in memory, entries in the order given, so a
//! directory comes before what it holds.

use std::io::Write;

use cpio::newc::{Builder, ModeFileType};

pub enum Entry {
    Dir {
        path: String,
    },
    File {
        path: String,
        bytes: Vec<u8>,
        executable: bool,
    },
    Symlink {
        path: String,
        target: String,
    },
    /// A character device node (`/dev/console` must exist before init runs, or the kernel
    /// gives init no console).
    CharDevice {
        path: String,
        major: u32,
        minor: u32,
    },
}

/// The archive, gzip-compressed.
pub fn build(entries: &[Entry]) -> std::io::Result<Vec<u8>> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    for (ino, entry) in entries.iter().enumerate() {
        let ino = ino as u32 + 1;
        let (path, body, kind, perm, rdev): (&str, &[u8], ModeFileType, u32, (u32, u32)) =
            match entry {
                Entry::Dir { path } => (path, &[], ModeFileType::Directory, 0o755, (0, 0)),
                Entry::File {
                    path,
                    bytes,
                    executable,
                } => {
                    let perm = if *executable { 0o755 } else { 0o644 };
                    (path, bytes, ModeFileType::Regular, perm, (0, 0))
                }
                Entry::Symlink { path, target } => (
                    path,
                    target.as_bytes(),
                    ModeFileType::Symlink,
                    0o777,
                    (0, 0),
                ),
                Entry::CharDevice { path, major, minor } => {
                    (path, &[], ModeFileType::Char, 0o600, (*major, *minor))
                }
            };
        let size = u32::try_from(body.len())
            .map_err(|_| std::io::Error::other(format!("{path} is over 4 GiB")))?;
        let mut writer = Builder::new(path.trim_start_matches('/'))
            .ino(ino)
            .mode(perm)
            .set_mode_file_type(kind)
            .nlink(if matches!(entry, Entry::Dir { .. }) {
                2
            } else {
                1
            })
            .rdev_major(rdev.0)
            .rdev_minor(rdev.1)
            .write(&mut gz, size);
        writer.write_all(body)?;
        writer.finish()?;
    }
    cpio::newc::trailer(&mut gz)?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn the_archive_reads_back_with_every_kind_of_entry() {
        let archive = build(&[
            Entry::Dir {
                path: "/bin".into(),
            },
            Entry::File {
                path: "/bin/tool".into(),
                bytes: b"#!/bin/sh\n".to_vec(),
                executable: true,
            },
            Entry::Symlink {
                path: "/bin/sh".into(),
                target: "tool".into(),
            },
            Entry::CharDevice {
                path: "/dev/console".into(),
                major: 5,
                minor: 1,
            },
        ])
        .unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(archive.as_slice())
            .read_to_end(&mut raw)
            .unwrap();
        let mut seen = Vec::new();
        let mut rest = raw.as_slice();
        loop {
            let mut reader = cpio::NewcReader::new(rest).unwrap();
            if reader.entry().is_trailer() {
                break;
            }
            let e = reader.entry();
            let line = (
                e.name().to_owned(),
                e.mode(),
                e.rdev_major(),
                e.rdev_minor(),
            );
            let mut body = Vec::new();
            reader.read_to_end(&mut body).unwrap();
            seen.push((line, body));
            rest = reader.finish().unwrap();
        }
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[1].0, ("bin/tool".to_owned(), 0o100755, 0, 0));
        assert_eq!(seen[1].1, b"#!/bin/sh\n");
        assert_eq!(seen[2].0.1 & 0o170000, 0o120000, "a symlink");
        assert_eq!(seen[2].1, b"tool");
        assert_eq!(seen[3].0, ("dev/console".to_owned(), 0o020600, 5, 1));
    }
}
