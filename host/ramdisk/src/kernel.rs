//! The deploy kernel and its modules: from a Debian `linux-image-*` package, downloaded
//! with `apt-get download` and unpacked with `dpkg-deb -x` into a cache directory (never
//! installed on the host), or from a kernel and module tree the operator names.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

pub struct Kernel {
    pub image: PathBuf,
    /// `lib/modules/<version>`, if the kernel has modules.
    pub modules: Option<PathBuf>,
    pub version: String,
}

fn run(command: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = command
        .output()
        .with_context(|| format!("{what}: could not run {:?}", command.get_program()))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The versioned package a meta-package (`linux-image-cloud-amd64`) stands for; a
/// versioned name is its own.
fn versioned(package: &str) -> anyhow::Result<String> {
    let depends = run(
        Command::new("apt-cache").args(["depends", package]),
        &format!("looking up {package}"),
    )?;
    let dep = depends
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|d| d.starts_with("linux-image-"));
    Ok(dep.unwrap_or(package).to_owned())
}

/// Downloads and unpacks `package` under `cache` (once: an unpacked one is reused).
pub fn from_package(package: &str, cache: &Path) -> anyhow::Result<Kernel> {
    let name = versioned(package)?;
    let tree = unpacked(&name, cache, "boot")?;
    let image = std::fs::read_dir(tree.join("boot"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with("vmlinuz-"))
        })
        .with_context(|| format!("{name} has no boot/vmlinuz-*"))?;
    let version = image
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_start_matches("vmlinuz-")
        .to_owned();
    let modules = tree.join("lib/modules").join(&version);
    Ok(Kernel {
        image,
        modules: modules.is_dir().then_some(modules),
        version,
    })
}

/// Debian's package `name`, downloaded with `apt-get download` and unpacked under
/// `cache/<name>` (once: a tree that has `probe` is reused). Nothing is installed. Builds
/// that share the cache may run at once (the tests do): each downloads and unpacks in a
/// directory of its own, and the first to finish moves its tree into place.
pub fn unpacked(name: &str, cache: &Path, probe: &str) -> anyhow::Result<PathBuf> {
    let tree = cache.join(name);
    if tree.join(probe).exists() {
        return Ok(tree);
    }
    std::fs::create_dir_all(cache)?;
    let work = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .tempdir_in(cache)
        .with_context(|| format!("a directory to unpack {name} in"))?;
    run(
        Command::new("apt-get")
            .args(["download", "-q", name])
            .current_dir(work.path()),
        &format!("apt-get download {name} (is `apt-get update` done?)"),
    )?;
    let deb = std::fs::read_dir(work.path())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            let file = p.file_name().unwrap_or_default().to_string_lossy();
            file.starts_with(&format!("{name}_")) && file.ends_with(".deb")
        })
        .with_context(|| format!("apt-get download left no {name}_*.deb"))?;
    let unpacked = work.path().join("tree");
    run(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked),
        &format!("unpacking {}", deb.display()),
    )?;
    // A tree without the probe is a broken one (an older build's, cut short).
    if tree.exists() && !tree.join(probe).exists() {
        let _ = std::fs::remove_dir_all(&tree);
    }
    match std::fs::rename(&unpacked, &tree) {
        Ok(()) => Ok(tree),
        Err(_) if tree.join(probe).exists() => Ok(tree), // another build was first
        Err(e) => Err(e).with_context(|| format!("moving {name} into {}", tree.display())),
    }
}

/// A kernel the operator names, with its `lib/modules/<version>` tree if it has one.
pub fn given(image: &Path, modules: Option<&Path>) -> anyhow::Result<Kernel> {
    if !image.is_file() {
        bail!("the kernel {} is not a file", image.display());
    }
    let version = modules
        .and_then(|m| m.file_name())
        .map_or_else(|| "given".into(), |v| v.to_string_lossy().into_owned());
    Ok(Kernel {
        image: image.to_owned(),
        modules: modules.map(Path::to_owned),
        version,
    })
}

/// Whether an ELF executable is static (has no program interpreter): a ramdisk has no
/// C library to load it with.
pub fn is_static_elf(bytes: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        return false; // 64-bit little-endian only
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum).all(|i| {
        let at = phoff + i * phentsize;
        at + 4 <= bytes.len()
            && u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) != PT_INTERP
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_executable_is_not_static() {
        let dynamic = std::fs::read("/bin/sh").unwrap();
        assert!(!is_static_elf(&dynamic), "/bin/sh links the C library");
        assert!(!is_static_elf(b"#!/bin/sh\n"));
    }

    #[test]
    fn a_static_executable_is() {
        // The ELF header and one PT_LOAD program header, nothing else.
        let mut elf = vec![0u8; 64 + 56];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        elf[64..68].copy_from_slice(&1u32.to_le_bytes());
        assert!(is_static_elf(&elf));
        elf[64..68].copy_from_slice(&3u32.to_le_bytes());
        assert!(!is_static_elf(&elf));
    }
}
