//! The network boot chain over real HTTP: the entry script DHCP hands out, the per-MAC
//! script as the node's state decides it, and local deploy kernels and ramdisks served
//! only through the images' allow-list.

use deployd_test_support::server::{Server, start};
use reqwest::Method;
use serde_json::json;

const MAC: &str = "52:54:00:aa:bb:cc";

async fn script(s: &Server, path: &str) -> String {
    let answer = s.get(path).await;
    assert_eq!(answer.status, 200, "{path}");
    answer.body.as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_scripts_follow_the_node_and_boot_files_the_allow_list() {
    let s = start(|_| {}).await;
    let entry = script(&s, "/boot/ipxe").await;
    assert!(
        entry.starts_with("#!ipxe")
            && entry.contains(&format!(
                "chain --autofree {}/boot/ipxe/${{mac:hexhyp}}",
                s.base
            )),
        "{entry}"
    );
    let unknown = script(&s, "/boot/ipxe/52-54-00-aa-bb-cc").await;
    assert!(
        unknown.contains("no node has a port with MAC") && unknown.trim_end().ends_with("exit"),
        "{unknown}"
    );
    let bad = script(&s, "/boot/ipxe/not-a-mac").await;
    assert!(bad.contains("is not a MAC address"), "{bad}");

    let images = s.dir.path().join("data/images");
    std::fs::write(images.join("kernel"), b"a kernel").unwrap();
    std::fs::write(images.join("ramdisk"), b"a ramdisk").unwrap();
    let node = s.test_driver_node("", "wait").await;
    let patch = json!([
        {"op": "add", "path": "/boot_interface", "value": "ipxe"},
        {"op": "add", "path": "/driver_info/deploy_kernel", "value": images.join("kernel").display().to_string()},
        {"op": "add", "path": "/driver_info/deploy_ramdisk", "value": format!("file://{}", images.join("ramdisk").display())},
        {"op": "add", "path": "/driver_info/kernel_append_params", "value": "console=ttyS0"},
    ]);
    let patched = s
        .send(Method::PATCH, &format!("/v1/nodes/{node}"), patch)
        .await;
    assert_eq!(patched.status, 200, "{:?}", patched.body);
    let port = s
        .send(
            Method::POST,
            "/v1/ports",
            json!({"node_uuid": node, "address": MAC}),
        )
        .await;
    assert_eq!(port.status, 201, "{:?}", port.body);

    let idle = script(&s, "/boot/ipxe/52-54-00-AA-BB-CC").await;
    assert!(
        idle.contains("is available, with nothing to boot from the network"),
        "{idle}"
    );

    assert_eq!(s.provision(&node, "active").await.status, 202);
    s.wait_for(&node, "wait call-back").await;
    let ramdisk = script(&s, "/boot/ipxe/52-54-00-aa-bb-cc").await;
    let kernel_line = format!(
        "kernel {0}/boot/{node}/deploy_kernel ipa-api-url={0} BOOTIF=01-52-54-00-aa-bb-cc console=ttyS0 initrd=deploy_ramdisk",
        s.base
    );
    assert!(ramdisk.contains(&kernel_line), "{ramdisk}");
    assert!(
        ramdisk.contains(&format!(
            "initrd --name deploy_ramdisk {}/boot/{node}/deploy_ramdisk",
            s.base
        )),
        "{ramdisk}"
    );
    let kernel = s
        .http
        .get(format!("{}/boot/{node}/deploy_kernel", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(kernel.status(), 200);
    assert_eq!(kernel.bytes().await.unwrap().as_ref(), b"a kernel");
    let other = s.get(&format!("/boot/{node}/instance_info")).await;
    assert_eq!(
        other.status, 404,
        "only the deploy kernel and ramdisk are boot files"
    );

    // A path outside the images directory and file_url_allowed_paths is never served,
    // and the script says why instead of booting it.
    let outside = s
        .node(json!({"driver": "fake-hardware", "boot_interface": "ipxe", "driver_info": {"deploy_kernel": "/etc/passwd", "deploy_ramdisk": "/etc/passwd"}}))
        .await;
    let refused = s.get(&format!("/boot/{outside}/deploy_kernel")).await;
    assert_eq!(refused.status, 404);
}
