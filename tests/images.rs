//! Images as operators have them, end to end over real processes: qcow2 files made by
//! the real `qemu-img`, checksums given as a distribution's SHA256SUMS url, and images
//! that cannot be deployed failing before any machine boots, naming why.

use deployd_test_support::processes as support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use support::{Engine, Lab, call, make_available_without_cleaning, provision, wait_node};

fn engine(dir: &Path) -> Engine {
    let allowed = format!("--file-url-allowed-path={}", dir.display());
    Engine::start(
        &dir.join("data"),
        &[
            "--check-provision-state-interval",
            "1",
            "--ramdisk-heartbeat-timeout",
            "1",
            &allowed,
        ],
    )
}

fn qemu_img(args: &[&str]) {
    support::run(Command::new("qemu-img").args(args));
}

/// `raw` converted by the real `qemu-img` into the qcow2 `out`.
fn to_qcow2(raw: &Path, out: &Path) {
    qemu_img(&[
        "convert",
        "-f",
        "raw",
        "-O",
        "qcow2",
        raw.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// A raw disk of 4 MiB of data, 16 MiB of zeros, 2 MiB of data (a filesystem with free
/// space, as images have).
fn raw_disk(path: &Path) -> Vec<u8> {
    let data = noise(4 << 20, 1);
    let mut disk = data.clone();
    disk.extend(vec![0u8; 16 << 20]);
    disk.extend(noise(2 << 20, 2));
    std::fs::write(path, &disk).unwrap();
    disk
}

fn noise(bytes: usize, seed: u64) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ seed;
    (0..bytes)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Enrolls a lab machine with `driver` and walks it to available (no cleaning: its
/// ramdisk must not have booted before the deploy under test).
fn enroll(url: &str, machine: &Value, driver: &str) -> String {
    let (status, node) = call(
        "POST",
        &format!("{url}/v1/nodes"),
        Some(json!({
            "name": machine["name"],
            "driver": driver,
            "driver_info": {
                "redfish_address": machine["redfish_address"],
                "redfish_system_id": machine["redfish_system_id"],
            },
        })),
    );
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    let port = json!({"node_uuid": uuid, "address": machine["mac"]});
    let (status, port) = call("POST", &format!("{url}/v1/ports"), Some(port));
    assert_eq!(status, 201, "{port}");
    make_available_without_cleaning(url, &uuid);
    uuid
}

fn set_instance_info(url: &str, node: &str, info: Value) {
    let (status, body) = call(
        "PATCH",
        &format!("{url}/v1/nodes/{node}"),
        Some(json!([{"op": "add", "path": "/instance_info", "value": info}])),
    );
    assert_eq!(status, 200, "{body}");
}

fn state(n: &Value) -> &str {
    n["provision_state"].as_str().unwrap_or("?")
}

/// Waits for `node`'s deploy (of `what`) to end, which must be in `active`; the node.
fn deployed(engine: &Engine, node: &str, what: &str) -> Value {
    let n = wait_node(&engine.url, node, 90, |n| {
        matches!(state(n), "active" | "deploy failed")
    });
    let (error, log) = (&n["last_error"], engine.log_text());
    assert_eq!(state(&n), "active", "{what}: {error}\n{log}");
    n
}

#[test]
fn qcow2_images_deploy_as_their_raw_disks_in_both_families_without_writing_their_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let lab = Lab::start_with(&dir.path().join("lab"), 2, &engine.url, &[]);
    let raw = raw_disk(&dir.path().join("os.raw"));
    let (plain, packed) = (dir.path().join("os.qcow2"), dir.path().join("os-c.qcow2"));
    let raw_path = dir.path().join("os.raw").display().to_string();
    to_qcow2(Path::new(&raw_path), &plain);
    qemu_img(&[
        "convert",
        "-c",
        "-f",
        "raw",
        "-O",
        "qcow2",
        &raw_path,
        &packed.display().to_string(),
    ]);
    // The checksums as a distribution publishes them, served by the engine's images
    // directory; instance_info names the file, not a digest.
    let sums = format!(
        "{}  os.qcow2\n{}  os-c.qcow2\n",
        sha256(&std::fs::read(&plain).unwrap()),
        sha256(&std::fs::read(&packed).unwrap())
    );
    std::fs::write(dir.path().join("data/images/SHA256SUMS"), sums).unwrap();
    let checksum_url = format!("{}/images/SHA256SUMS", engine.url);
    let nodes = [
        (
            enroll(&engine.url, &lab.machines[0], "agent_redfish"),
            &plain,
        ),
        (
            enroll(&engine.url, &lab.machines[1], "pxe_redfish"),
            &packed,
        ),
    ];
    for (node, image) in &nodes {
        let source = image.display().to_string();
        set_instance_info(
            &engine.url,
            node,
            json!({"image_source": source, "image_checksum": checksum_url}),
        );
        provision(&engine.url, node, "active");
    }
    for ((node, _), machine) in nodes.iter().zip(&lab.machines) {
        let n = deployed(&engine, node, "qcow2");
        let prepared = &n["driver_internal_info"]["deploy_image"];
        assert_eq!(prepared["source_format"], "qcow2", "{prepared}");
        assert_eq!(prepared["disk_format"], "raw");
        assert_eq!(prepared["os_hash_value"], sha256(&raw));
        assert_eq!(prepared["size"], raw.len());
        let disk = Path::new(machine["disk"].as_str().unwrap());
        let written = std::fs::read(disk).unwrap();
        assert!(written == raw, "{} holds the raw disk", machine["name"]);
        // The 16 MiB of zeros were punched, not written: the disk file is sparse.
        let allocated = std::fs::metadata(disk).unwrap().blocks() * 512;
        assert!(
            allocated <= (raw.len() as u64) - (15 << 20),
            "{allocated} bytes allocated for a {} byte image with 16 MiB of zeros",
            raw.len()
        );
    }
}

#[test]
fn images_that_cannot_be_deployed_fail_before_the_machine_boots_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name).display().to_string();
    let engine = engine(dir.path());
    let lab = Lab::start_with(&dir.path().join("lab"), 1, &engine.url, &[]);
    raw_disk(&dir.path().join("os.raw"));
    to_qcow2(&dir.path().join("os.raw"), &dir.path().join("os.qcow2"));
    qemu_img(&[
        "create",
        "-f",
        "qcow2",
        "-b",
        &d("os.qcow2"),
        "-F",
        "qcow2",
        &d("overlay.qcow2"),
    ]);
    qemu_img(&[
        "convert",
        "-f",
        "raw",
        "-O",
        "vmdk",
        &d("os.raw"),
        &d("os.vmdk"),
    ]);
    let qcow2 = std::fs::read(d("os.qcow2")).unwrap();
    std::fs::write(d("cut.qcow2"), &qcow2[..qcow2.len() / 2]).unwrap();
    let sum = |name: &str| sha256(&std::fs::read(d(name)).unwrap());
    let sums = format!(
        "{}  os.qcow2\n{}  wrong.qcow2\n",
        sum("os.qcow2"),
        "0".repeat(64)
    );
    std::fs::write(dir.path().join("data/images/SHA256SUMS"), sums).unwrap();
    std::fs::copy(d("os.qcow2"), d("wrong.qcow2")).unwrap();
    let sums_url = format!("{}/images/SHA256SUMS", engine.url);
    let node = enroll(&engine.url, &lab.machines[0], "agent_redfish");
    let with =
        |name: &str, checksum: &str| json!({"image_source": d(name), "image_checksum": checksum});
    let (zeros, wrong) = ("0".repeat(64), sum("wrong.qcow2"));
    let cases = [
        (
            with("overlay.qcow2", &sum("overlay.qcow2")),
            vec!["backing file"],
        ),
        (with("cut.qcow2", &sum("cut.qcow2")), vec!["truncated"]),
        (with("os.vmdk", &sum("os.vmdk")), vec!["vmdk"]),
        (
            with("os.raw", "098f6bcd4621d373cade4e832627b4f6"),
            vec!["MD5", "allow_md5_checksum"],
        ),
        (
            with("wrong.qcow2", &sums_url),
            vec!["mismatch", &zeros, &wrong],
        ),
        (with("os.raw", &sums_url), vec!["no line for \"os.raw\""]),
        (
            json!({"image_source": d("os.qcow2"), "image_checksum": sum("os.qcow2"),
                   "image_disk_format": "raw"}),
            vec!["image_disk_format is \"raw\" but the image is qcow2"],
        ),
    ];
    for (info, expected) in cases {
        set_instance_info(&engine.url, &node, info.clone());
        provision(&engine.url, &node, "active");
        let n = wait_node(&engine.url, &node, 30, |n| {
            matches!(state(n), "active" | "deploy failed")
        });
        assert_eq!(state(&n), "deploy failed", "{info}");
        let error = n["last_error"].as_str().unwrap_or_default();
        for part in expected {
            assert!(error.contains(part), "{info}: {error:?} lacks {part:?}");
        }
        let machine = lab.machine(lab.machines[0]["name"].as_str().unwrap());
        assert_eq!(machine["agent_boots"], 0, "{info}: the machine booted");
    }
}

/// An image the engine downloads into its cache (a qcow2 from a url) is refused where it
/// would take the images directory's disk below the floor it keeps free: the deploy fails
/// before the machine boots, naming the free space, and nothing is left in the cache.
#[test]
fn a_downloaded_image_that_would_fill_the_images_disk_is_refused_before_it_does() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("data/images");
    let _tmpfs = crate::storage_faults::SmallFs::tmpfs(&images, 64);
    let engine = engine(dir.path());
    let lab = Lab::start_with(&dir.path().join("lab"), 1, &engine.url, &[]);
    // 40 MiB that do not compress, as a qcow2 the engine serves at /images/big.qcow2: a
    // copy of it would fit in the 24 MiB left, but not beside the 6.4 MiB kept free.
    let raw = dir.path().join("big.raw");
    std::fs::write(&raw, noise(40 << 20, 3)).unwrap();
    let qcow2 = images.join("big.qcow2");
    to_qcow2(&raw, &qcow2);
    let checksum = sha256(&std::fs::read(&qcow2).unwrap());
    let node = enroll(&engine.url, &lab.machines[0], "agent_redfish");
    let url = format!("{}/images/big.qcow2", engine.url);
    set_instance_info(
        &engine.url,
        &node,
        json!({"image_source": url, "image_checksum": checksum}),
    );
    provision(&engine.url, &node, "active");
    let n = wait_node(&engine.url, &node, 60, |n| {
        matches!(state(n), "active" | "deploy failed")
    });
    assert_eq!(state(&n), "deploy failed", "{n}");
    let error = n["last_error"].as_str().unwrap_or_default();
    for part in [
        "the images directory's disk",
        "keeps 6 MiB free",
        "nothing was left",
    ] {
        assert!(error.contains(part), "{error:?} lacks {part:?}");
    }
    let left: Vec<_> = std::fs::read_dir(&images)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["big.qcow2"], "the cache keeps nothing");
    let machine = lab.machine(lab.machines[0]["name"].as_str().unwrap());
    assert_eq!(machine["agent_boots"], 0, "the machine booted");
}

/// A whole-disk image of `mib` MiB with a `label` (gpt or msdos) table made by the real
/// parted, and data in its partition.
fn partitioned(path: &Path, label: &str, mib: usize) -> Vec<u8> {
    let mut disk = vec![0u8; mib << 20];
    disk[1 << 20..(1 << 20) + (2 << 20)].copy_from_slice(&noise(2 << 20, 7));
    std::fs::write(path, &disk).unwrap();
    support::run(
        Command::new("parted")
            .arg("-s")
            .arg(path)
            .args(["mklabel", label, "mkpart", "primary", "ext4", "1MiB"])
            .arg(format!("{}MiB", mib - 1)),
    );
    std::fs::read(path).unwrap()
}

/// `(start, size)` in bytes of partition `number` of `disk`, as the real parted reads
/// the table; it must read it without a complaint.
pub(crate) fn partition(disk: &Path, number: u32) -> (u64, u64) {
    let out = support::run(
        Command::new("parted")
            .args(["-s", "-m"])
            .arg(disk)
            .args(["unit", "B", "print"]),
    );
    let complaints = String::from_utf8_lossy(&out.stderr);
    assert!(complaints.trim().is_empty(), "{complaints}");
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("{number}:")))
        .unwrap_or_else(|| panic!("no partition {number} in {table}"));
    let field = |i: usize| {
        line.split(':')
            .nth(i)
            .unwrap()
            .trim_end_matches('B')
            .parse()
            .unwrap()
    };
    (field(1), field(3))
}

/// The config drive on partition 2 of `disk` as Debian's cloud-init reads it: its label
/// (util-linux's blkid), its files (xorriso, as the kernel would mount them) and then
/// cloud-init's own ConfigDriveReader (`read_v2`). Returns what cloud-init read.
pub(crate) fn read_config_drive(dir: &Path, disk: &Path) -> Value {
    let (start, size) = partition(disk, 2);
    let bytes = std::fs::read(disk).unwrap();
    let iso = dir.join("read-back.iso");
    std::fs::write(&iso, &bytes[start as usize..(start + size) as usize]).unwrap();
    let label = support::run(
        Command::new("blkid")
            .args(["-p", "-o", "value", "-s", "LABEL"])
            .arg(&iso),
    );
    assert_eq!(String::from_utf8_lossy(&label.stdout).trim(), "config-2");
    let files = dir.join("read-back");
    let _ = std::fs::remove_dir_all(&files);
    // xorriso and cloud-init are Debian's (.ci/run installs them).
    support::run(
        Command::new("xorriso")
            .args(["-osirrox", "on", "-indev"])
            .arg(&iso)
            .args(["-extract", "/"])
            .arg(&files),
    );
    let script = "import json, sys\n\
        from cloudinit.sources.helpers import openstack\n\
        r = openstack.ConfigDriveReader(sys.argv[1]).read_v2()\n\
        ud = r.get('userdata')\n\
        print(json.dumps({'metadata': r['metadata'], 'userdata': ud.decode() if isinstance(ud, bytes) else ud, 'networkdata': r.get('networkdata')}))";
    let out = support::run(
        Command::new("/usr/bin/python3")
            .args(["-c", script])
            .arg(&files),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn config_drives_go_after_the_image_on_gpt_and_mbr_disks_where_cloud_init_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name);
    let engine = engine(dir.path());
    let lab = Lab::start_with(
        &d("lab"),
        2,
        &engine.url,
        &["--disk-size", &(128u64 << 20).to_string()],
    );
    let gpt = partitioned(&d("gpt.img"), "gpt", 16);
    let mbr = partitioned(&d("mbr.img"), "msdos", 16);
    // The dict form: the engine builds the ISO.
    let dict = json!({
        "meta_data": {"hostname": "web-1", "public_keys": {"default": "ssh-ed25519 AAAAC3 test@deployd"}},
        "network_data": {"links": [], "networks": [], "services": []},
        "user_data": "#cloud-config\nruncmd: [echo hi]\n",
    });
    // The string form: an ISO made by the real xorriso, gzipped and base64-encoded.
    let tree = d("drive/openstack/latest");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(
        tree.join("meta_data.json"),
        r#"{"uuid": "u-1", "hostname": "db-1"}"#,
    )
    .unwrap();
    support::run(
        Command::new("xorriso")
            .args(["-as", "mkisofs", "-J", "-r", "-V", "config-2", "-o"])
            .arg(d("given.iso"))
            .arg(d("drive")),
    );
    let gz = support::run(Command::new("gzip").arg("-c").arg(d("given.iso"))).stdout;
    let text = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(gz)
    };
    let cases = [
        ("gpt.img", &gpt, json!(dict)),
        ("mbr.img", &mbr, json!(text)),
    ];
    let mut nodes = Vec::new();
    for ((image, _, drive), machine) in cases.iter().zip(&lab.machines) {
        let node = enroll(&engine.url, machine, "agent_redfish");
        let source = d(image).display().to_string();
        let sum = sha256(&std::fs::read(&source).unwrap());
        set_instance_info(
            &engine.url,
            &node,
            json!({"image_source": source, "image_checksum": sum}),
        );
        let (status, body) = call(
            "PUT",
            &format!("{}/v1/nodes/{node}/states/provision", engine.url),
            Some(json!({"target": "active", "configdrive": drive})),
        );
        assert_eq!(status, 202, "{body}");
        nodes.push(node);
    }
    let expected = [("web-1", true), ("db-1", false)];
    for (((node, machine), (image, written, _)), (hostname, keyed)) in
        nodes.iter().zip(&lab.machines).zip(&cases).zip(expected)
    {
        deployed(&engine, node, image);
        let disk = Path::new(machine["disk"].as_str().unwrap());
        let on_disk = std::fs::read(disk).unwrap();
        // The image's partition is as written; the drive is past it, at the disk's end.
        let (start, size) = partition(disk, 1);
        assert!(
            on_disk[start as usize..(start + size) as usize]
                == written[start as usize..(start + size) as usize]
        );
        let (drive_start, drive_size) = partition(disk, 2);
        assert!(
            drive_start + drive_size > (127 << 20),
            "{image}: at the end"
        );
        let read = read_config_drive(dir.path(), disk);
        assert_eq!(read["metadata"]["hostname"], hostname, "{image}: {read}");
        if keyed {
            assert_eq!(
                read["metadata"]["public_keys"]["default"],
                "ssh-ed25519 AAAAC3 test@deployd"
            );
            assert!(
                read["userdata"].as_str().unwrap().contains("runcmd"),
                "{read}"
            );
            assert_eq!(
                read["metadata"]["uuid"],
                node.as_str(),
                "the instance id defaults to the node"
            );
        }
    }
}
