//! Kernel modules, with their dependencies resolved: the drivers a ramdisk needs and
//! everything they need, in an order `insmod` can load them (each after its
//! dependencies). A module's dependencies are the `depends=` entry of its `.modinfo`
//! section, as `depmod` reads them; Debian's kernel packages ship no `modules.dep`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The drivers a deploy ramdisk loads: virtio for VMs, then the disks (NVMe, AHCI, SCSI)
/// and NICs common on servers. A driver the kernel has built in, or does not have, is
/// skipped (the build says which).
pub const WANTED: &[&str] = &[
    "virtio_pci",
    "virtio_net",
    "virtio_blk",
    "virtio_scsi",
    "virtio_rng",
    "sd_mod",
    "nvme",
    "ahci",
    "e1000",
    "e1000e",
    "igb",
    "ixgbe",
    "i40e",
    "ice",
    "bnxt_en",
    "tg3",
    "r8169",
    "mlx5_core",
    // The firmware's variables, where the agent adds an image's UEFI boot entry.
    "efivarfs",
];

/// `virtio-net` and `virtio_net` are one module.
pub fn canonical(name: &str) -> String {
    name.replace('-', "_")
}

/// The `depends=` list of a module file's bytes (empty: none).
pub fn depends(ko: &[u8]) -> Vec<String> {
    let key = b"depends=";
    let Some(at) = ko
        .windows(key.len())
        .position(|w| w == key)
        .map(|at| at + key.len())
    else {
        return Vec::new();
    };
    let end = ko[at..]
        .iter()
        .position(|&b| b == 0)
        .map_or(ko.len(), |e| at + e);
    String::from_utf8_lossy(&ko[at..end])
        .split(',')
        .filter(|d| !d.is_empty())
        .map(canonical)
        .collect()
}

/// What a kernel's module tree has: each module's file, and the built-in ones.
pub struct Tree {
    pub files: BTreeMap<String, PathBuf>,
    pub builtin: BTreeSet<String>,
}

impl Tree {
    /// Reads `lib/modules/<version>` (its `kernel/` files and `modules.builtin`).
    pub fn read(dir: &Path) -> std::io::Result<Tree> {
        let mut files = BTreeMap::new();
        let mut todo = vec![dir.join("kernel")];
        while let Some(d) = todo.pop() {
            for entry in std::fs::read_dir(&d)? {
                let path = entry?.path();
                if path.is_dir() {
                    todo.push(path);
                } else if let Some(module) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".ko"))
                {
                    files.insert(canonical(module), path.clone());
                }
            }
        }
        let builtin = std::fs::read_to_string(dir.join("modules.builtin"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.rsplit('/').next()?.strip_suffix(".ko"))
            .map(canonical)
            .collect();
        Ok(Tree { files, builtin })
    }
}

/// Modules to load, dependencies first: (name, file).
pub type LoadOrder = Vec<(String, PathBuf)>;

/// The modules to load for `wanted`, dependencies first; and the wanted ones the kernel
/// lacks (neither a module nor built in).
pub fn resolve(
    tree: &Tree,
    wanted: &[&str],
    read: impl Fn(&Path) -> std::io::Result<Vec<u8>>,
) -> std::io::Result<(LoadOrder, Vec<String>)> {
    let mut order = Vec::new();
    let mut placed = BTreeSet::new();
    let mut missing = Vec::new();
    // Depth-first, a module after what it depends on.
    fn visit(
        name: &str,
        tree: &Tree,
        read: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>,
        placed: &mut BTreeSet<String>,
        order: &mut Vec<(String, PathBuf)>,
        on_path: &mut Vec<String>,
    ) -> std::io::Result<()> {
        if placed.contains(name) || on_path.iter().any(|n| n == name) {
            return Ok(());
        }
        let Some(path) = tree.files.get(name) else {
            return Ok(());
        };
        on_path.push(name.to_owned());
        for dep in depends(&read(path)?) {
            visit(&dep, tree, read, placed, order, on_path)?;
        }
        on_path.pop();
        placed.insert(name.to_owned());
        order.push((name.to_owned(), path.clone()));
        Ok(())
    }
    for want in wanted {
        let name = canonical(want);
        if tree.files.contains_key(&name) {
            visit(&name, tree, &read, &mut placed, &mut order, &mut Vec::new())?;
        } else if !tree.builtin.contains(&name) {
            missing.push(name);
        }
    }
    Ok((order, missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ko(depends: &str) -> Vec<u8> {
        format!("\x7fELF…\0license=GPL\0depends={depends}\0vermagic=6.1\0").into_bytes()
    }

    #[test]
    fn depends_is_read_from_the_modinfo_strings() {
        assert_eq!(
            depends(&ko("virtio,virtio_ring")),
            ["virtio", "virtio_ring"]
        );
        assert_eq!(depends(&ko("")), Vec::<String>::new());
        assert_eq!(depends(b"no modinfo here"), Vec::<String>::new());
    }

    #[test]
    fn modules_come_after_their_dependencies_and_missing_ones_are_named() {
        let tree = Tree {
            files: [
                ("virtio_net", "net/virtio_net.ko"),
                ("net_failover", "net/net_failover.ko"),
                ("failover", "core/failover.ko"),
                ("virtio", "virtio/virtio.ko"),
                ("virtio_ring", "virtio/virtio_ring.ko"),
                ("virtio_blk", "block/virtio_blk.ko"),
            ]
            .into_iter()
            .map(|(n, p)| (n.to_owned(), PathBuf::from(p)))
            .collect(),
            builtin: ["nvme".to_owned()].into(),
        };
        let deps = |p: &Path| -> std::io::Result<Vec<u8>> {
            Ok(ko(match p.to_str().unwrap() {
                "net/virtio_net.ko" => "net_failover,virtio,virtio_ring",
                "net/net_failover.ko" => "failover",
                "block/virtio_blk.ko" => "virtio,virtio_ring",
                "virtio/virtio_ring.ko" => "virtio",
                _ => "",
            }))
        };
        let (order, missing) =
            resolve(&tree, &["virtio-net", "virtio_blk", "nvme", "e1000"], deps).unwrap();
        let names: Vec<_> = order.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "failover",
                "net_failover",
                "virtio",
                "virtio_ring",
                "virtio_net",
                "virtio_blk"
            ]
        );
        assert_eq!(missing, ["e1000"], "nvme is built in, e1000 is absent");
    }
}
