//! The hardening issue's findings, each over real HTTP: what was reachable before is
//! refused now, and nothing changes when it is.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use deployd_test_support::server::{Server, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// A test-driver node that waits for its agent, with `image_source` as given.
async fn waiting_node_with_image(s: &Server, source: &str) -> String {
    let uuid = s
        .node(json!({"driver": "test_driver", "instance_info": {"mode": "wait", "heartbeat_mode": "wait", "image_source": source}}))
        .await;
    s.walk(&uuid, &[("manage", "manageable"), ("provide", "available")])
        .await;
    uuid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_file_outside_the_allowed_paths_is_ever_staged_or_served() {
    let s = start(|_| {}).await;
    let images = s.dir.path().join("data").join("images");
    let secret = s.dir.path().join("htpasswd");
    std::fs::write(&secret, "admin:$2b$04$secret\n").unwrap();
    // A symlink placed in the images directory that points out of it.
    std::os::unix::fs::symlink(&secret, images.join("escape.raw")).unwrap();
    for source in [
        "file:///etc/passwd".to_owned(),
        "/etc/shadow".to_owned(),
        secret.display().to_string(),
        images.join("escape.raw").display().to_string(),
        format!("file://{}/../../htpasswd", images.display()),
    ] {
        let uuid = waiting_node_with_image(&s, &source).await;
        let refused = s.provision(&uuid, "active").await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{source}");
        assert!(
            refused.fault().contains("file_url_allowed_paths")
                || refused.fault().contains("No such file"),
            "{}",
            refused.fault()
        );
        let node = s.get(&format!("/v1/nodes/{uuid}")).await.body;
        assert_eq!(
            node["provision_state"], "available",
            "{source}: nothing changed"
        );
        assert!(node["instance_info"]["image_url"].is_null());
        // The old hole: the node's uuid under /images/, with no credentials.
        let served = s
            .http
            .get(format!("{}/images/{uuid}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(served.status(), StatusCode::NOT_FOUND);
    }
    let link = s
        .http
        .get(format!("{}/images/escape.raw", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        link.status(),
        StatusCode::NOT_FOUND,
        "symlinks are not followed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_image_is_served_only_during_its_deploy_and_with_its_token() {
    let s = start(|_| {}).await;
    let image = s.dir.path().join("data").join("images").join("os.raw");
    std::fs::write(&image, vec![7u8; 100_000]).unwrap();
    let uuid = waiting_node_with_image(&s, &format!("file://{}", image.display())).await;
    let other = waiting_node_with_image(&s, "http://example.invalid/os.raw").await;
    assert_eq!(
        s.provision(&uuid, "active").await.status,
        StatusCode::ACCEPTED
    );
    let node = s.wait_for(&uuid, "wait call-back").await;
    let url = node["instance_info"]["image_url"]
        .as_str()
        .unwrap()
        .to_owned();
    let prefix = format!("{}/images/staged/{uuid}/", s.base);
    let token = url.strip_prefix(&prefix).expect("a staging url").to_owned();
    assert_eq!(token.len(), 43);
    assert_eq!(
        node["driver_internal_info"]["image_staging_token"], "******",
        "the token is masked in the API"
    );

    let served = s.http.get(&url).send().await.unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(served.bytes().await.unwrap().len(), 100_000);
    let ranged = s
        .http
        .get(&url)
        .header("range", "bytes=99990-")
        .send()
        .await
        .unwrap();
    assert_eq!(ranged.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(ranged.bytes().await.unwrap().len(), 10);
    let mut wrong = token.clone().into_bytes();
    wrong[0] = if wrong[0] == b'A' { b'B' } else { b'A' };
    for refused in [
        format!("{prefix}{}", String::from_utf8(wrong).unwrap()),
        format!("{}/images/staged/{other}/{token}", s.base),
        format!("{}/images/staged/not-a-uuid/{token}", s.base),
        format!("{}/images/{uuid}", s.base),
    ] {
        let a = s.http.get(&refused).send().await.unwrap();
        assert_eq!(a.status(), StatusCode::NOT_FOUND, "{refused}");
    }

    // The flow ends (the operator aborts it, as 1.110 allows in wait call-back): the url
    // is dead and removed from the node.
    let abort = s
        .call(
            reqwest::Method::PUT,
            &format!("/v1/nodes/{uuid}/states/provision"),
            Some("1.110"),
            Some(br#"{"target": "abort"}"#.to_vec()),
        )
        .await;
    assert_eq!(abort.status, StatusCode::ACCEPTED);
    let node = s.wait_for(&uuid, "deploy failed").await;
    assert!(node["instance_info"]["image_url"].is_null(), "{node}");
    assert!(node["driver_internal_info"]["image_staging_token"].is_null());
    let gone = s.http.get(&url).send().await.unwrap();
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_directory_may_hold_images() {
    let allowed = tempfile::tempdir().unwrap();
    let image = allowed.path().join("os.raw");
    std::fs::write(&image, b"image").unwrap();
    let dir = allowed.path().to_path_buf();
    let s = start(move |c| c.api.file_url_allowed_paths = vec![dir]).await;
    let uuid = waiting_node_with_image(&s, &image.display().to_string()).await;
    assert_eq!(
        s.provision(&uuid, "active").await.status,
        StatusCode::ACCEPTED
    );
    let node = s.wait_for(&uuid, "wait call-back").await;
    let url = node["instance_info"]["image_url"].as_str().unwrap();
    let served = s.http.get(url).send().await.unwrap();
    assert_eq!(served.bytes().await.unwrap().as_ref(), b"image");
}

/// Reads from a raw connection until the server closes it or `limit` passes; the bytes.
fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Some(all),
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Some(all),
            Err(_) => return None, // still open at the limit
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_are_refused_and_slow_or_idle_ones_closed() {
    let s = start(|c| {
        c.api.max_connections = 4;
        c.api.max_connections_per_client = Some(4);
        c.api.header_read_timeout = 1;
    })
    .await;
    let addr = s.engine.addr;
    let outcome = tokio::task::spawn_blocking(move || {
        // Four connections each in the middle of a request (its body not sent yet) take
        // every slot; a fifth is told why and closed.
        let busy: Vec<TcpStream> = (0..4)
            .map(|_| {
                let mut c = TcpStream::connect(addr).unwrap();
                let head = "POST /v1/nodes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n";
                c.write_all(head.as_bytes()).unwrap();
                c
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let mut fifth = TcpStream::connect(addr).unwrap();
        let refusal = read_until_closed(&mut fifth, Duration::from_secs(5)).expect("closed");
        let refusal = String::from_utf8_lossy(&refusal).into_owned();
        drop(busy);
        std::thread::sleep(Duration::from_millis(300));
        // Four idle connections: a fifth client takes the slot of the one idle longest.
        let idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(200));
        let mut fifth = TcpStream::connect(addr).unwrap();
        fifth.write_all(b"GET /v1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let admitted = read_until_closed(&mut fifth, Duration::from_secs(5)).expect("closed");
        assert!(
            String::from_utf8_lossy(&admitted).starts_with("HTTP/1.1 200"),
            "an idle connection made room: {}",
            String::from_utf8_lossy(&admitted)
        );
        // The idle ones (and a slowloris that never finishes its headers) are closed.
        let mut slow = TcpStream::connect(addr);
        let mut closed = 0;
        for mut c in idle {
            if read_until_closed(&mut c, Duration::from_secs(10)).is_some() {
                closed += 1;
            }
        }
        let slow_closed = match slow.as_mut() {
            Ok(slow) => {
                slow.write_all(b"GET /v1 HTTP/1.1\r\nHost: x\r\n").unwrap();
                read_until_closed(slow, Duration::from_secs(10)).is_some()
            }
            Err(_) => false,
        };
        // A kept-alive connection that finished a request is closed once idle too.
        let mut kept = TcpStream::connect(addr).unwrap();
        kept.write_all(b"GET /v1 HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let answered = read_until_closed(&mut kept, Duration::from_secs(10)).expect("closed");
        (
            refusal,
            closed,
            slow_closed,
            String::from_utf8_lossy(&answered).into_owned(),
        )
    })
    .await
    .unwrap();
    let (refusal, closed, slow_closed, answered) = outcome;
    assert!(refusal.starts_with("HTTP/1.1 503"), "{refusal}");
    assert!(refusal.contains("maximum of 4 connections"), "{refusal}");
    assert!(
        refusal.contains("error_message"),
        "Ironic's error shape: {refusal}"
    );
    assert_eq!(closed, 4, "idle connections are closed");
    assert!(
        slow_closed,
        "a connection that never finishes its headers is closed"
    );
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    assert_eq!(s.get("/v1").await.status, StatusCode::OK, "slots came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_fields_are_refused_and_lists_project_what_was_asked() {
    let s = start(|_| {}).await;
    let big: serde_json::Map<String, Value> = (0..70)
        .map(|i| (format!("k{i}"), json!("x".repeat(1000))))
        .collect();
    let refused = s
        .send(
            Method::POST,
            "/v1/nodes",
            json!({"driver": "fake", "extra": big}),
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(
        refused.fault().starts_with("extra is 7"),
        "{}",
        refused.fault()
    );
    assert!(
        refused.fault().contains("the limit is 65536"),
        "{}",
        refused.fault()
    );
    let fits: serde_json::Map<String, Value> = (0..60)
        .map(|i| (format!("k{i}"), json!("x".repeat(1000))))
        .collect();
    let mut uuids = Vec::new();
    for _ in 0..5 {
        uuids.push(s.node(json!({"driver": "fake", "extra": fits})).await);
    }
    let patch = json!([{"op": "add", "path": "/properties/blob", "value": "y".repeat(70_000)}]);
    let a = s
        .send(Method::PATCH, &format!("/v1/nodes/{}", uuids[0]), patch)
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.fault().starts_with("properties is"), "{}", a.fault());
    assert!(s.get(&format!("/v1/nodes/{}", uuids[0])).await.body["properties"]["blob"].is_null());

    let listed = s.get("/v1/nodes?fields=uuid,extra&limit=3").await;
    assert_eq!(listed.status, StatusCode::OK);
    let nodes = listed.body["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    for n in nodes {
        let keys: Vec<&str> = n.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["extra", "uuid"]);
        assert_eq!(n["extra"].as_object().unwrap().len(), 60);
    }
    assert!(
        listed.body["next"]
            .as_str()
            .unwrap()
            .contains("fields=uuid,extra")
    );
    let detail = s.get("/v1/nodes/detail").await;
    assert_eq!(detail.body["nodes"].as_array().unwrap().len(), 5);
    assert!(detail.body["next"].is_null());
    assert_eq!(detail.body["nodes"][0]["driver"], "fake");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_limits_are_checked_and_a_pinned_version_keeps_its_own() {
    let s = start(|_| {}).await;
    let wasm = std::fs::read(deployd_fixtures::TEST_DRIVER).unwrap();
    let upload = |query: &'static str, body: Vec<u8>| {
        let s = &s;
        async move {
            s.call(
                Method::POST,
                &format!("/v1/deployd/drivers{query}"),
                Some("1.67"),
                Some(body),
            )
            .await
        }
    };
    for (query, why) in [
        (
            "?memory_mib=17592186044416",
            "memory_mib must be from 1 to 256",
        ),
        ("?memory_mib=0", "memory_mib must be from 1 to 256"),
        ("?deadline_ms=0", "deadline_ms must be from 1 to 600000"),
        (
            "?deadline_ms=600001",
            "deadline_ms must be from 1 to 600000",
        ),
        ("?memory_mib=-1", "memory_mib"),
    ] {
        let a = upload(query, wasm.clone()).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{query}");
        assert!(a.fault().contains(why), "{query}: {}", a.fault());
    }
    let huge = upload("", vec![0u8; (64 << 20) + 1]).await;
    assert_eq!(huge.status, StatusCode::PAYLOAD_TOO_LARGE);
    let plugins = s.dir.path().join("data").join("plugins");
    let leftovers: Vec<_> = std::fs::read_dir(&plugins)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".upload-"))
        .collect();
    assert!(leftovers.is_empty(), "refused uploads leave no files");

    let first = upload("?deadline_ms=5000", wasm.clone()).await;
    assert_eq!(first.status, StatusCode::CREATED, "{:?}", first.body);
    let first_id = first.body["deployd"]["version_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let uuid = s
        .node(json!({"driver": "test_driver", "instance_info": {"mode": "wait", "heartbeat_mode": "wait"}}))
        .await;
    s.walk(&uuid, Server::TO_WAIT_CALL_BACK).await;
    let node = s.get(&format!("/v1/nodes/{uuid}")).await.body;
    assert_eq!(
        node["driver_internal_info"]["driver_hash"],
        first_id.as_str()
    );

    // The same bytes with other limits: a new version for new flows; the pinned one stays.
    let second = upload("?deadline_ms=9000", wasm).await;
    assert_eq!(second.status, StatusCode::CREATED);
    let second_id = second.body["deployd"]["version_id"].as_str().unwrap();
    assert_ne!(second_id, first_id);
    assert_eq!(
        second.body["deployd"]["hash"],
        first.body["deployd"]["hash"]
    );
    let registry = &s.engine.conductor.registry();
    let pinned = registry
        .version(&first_id)
        .expect("the pinned version is kept");
    assert_eq!(pinned.limits.deadline, Duration::from_millis(5000));
    assert_eq!(
        registry.get("test_driver").unwrap().limits.deadline,
        Duration::from_millis(9000)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_racing_a_deploy_never_undoes_its_image_staging() {
    let s = start(|_| {}).await;
    let image = s.dir.path().join("data").join("images").join("os.raw");
    std::fs::write(&image, b"image").unwrap();
    let source = image.display().to_string();
    let (mut deployed, mut patched) = (0, 0);
    for i in 0..60 {
        let uuid = waiting_node_with_image(&s, &source).await;
        let patch = json!([{"op": "add", "path": "/extra/iteration", "value": i}]);
        let path = format!("/v1/nodes/{uuid}");
        let (p, d) = tokio::join!(
            s.send(Method::PATCH, &path, patch),
            s.provision(&uuid, "active"),
        );
        assert!(
            matches!(p.status, StatusCode::OK | StatusCode::CONFLICT),
            "{:?}",
            p.body
        );
        assert!(
            matches!(d.status, StatusCode::ACCEPTED | StatusCode::CONFLICT),
            "{:?}",
            d.body
        );
        let node = if d.status == StatusCode::ACCEPTED {
            deployed += 1;
            s.wait_for(&uuid, "wait call-back").await
        } else {
            s.get(&format!("/v1/nodes/{uuid}")).await.body
        };
        if d.status == StatusCode::ACCEPTED {
            let url = node["instance_info"]["image_url"].as_str();
            assert!(
                url.is_some_and(|u| u.contains("/images/staged/")),
                "iteration {i}: the staging was undone: {node}"
            );
            assert_eq!(
                node["driver_internal_info"]["image_staging_token"],
                "******"
            );
        }
        if p.status == StatusCode::OK {
            patched += 1;
            assert_eq!(
                node["extra"]["iteration"], i,
                "iteration {i}: the patch was lost"
            );
        }
    }
    assert!(
        deployed > 0 && patched > 0,
        "both sides won sometimes ({deployed}, {patched})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_name_the_public_url_never_the_clients_host_header() {
    let s = start(|c| c.api.public_url = Some("http://deployd.example:6385".into())).await;
    for _ in 0..2 {
        s.node(json!({"driver": "fake"})).await;
    }
    let answer = s
        .http
        .get(format!("{}/v1/nodes?limit=1", s.base))
        .header("host", "evil.example")
        .header("X-OpenStack-Ironic-API-Version", "1.67")
        .send()
        .await
        .unwrap();
    let body: Value = answer.json().await.unwrap();
    let next = body["next"].as_str().unwrap();
    assert!(
        next.starts_with("http://deployd.example:6385/v1/nodes?"),
        "{next}"
    );
    let link = body["nodes"][0]["links"][0]["href"].as_str().unwrap();
    assert!(
        link.starts_with("http://deployd.example:6385/v1/nodes/"),
        "{link}"
    );
    assert!(!body.to_string().contains("evil.example"));
}

/// A request, and the status and words it must be refused with.
type Refused = (Method, String, Option<Vec<u8>>, StatusCode, &'static str);

/// Refusals that axum, the image server or a body limit made came back as plain text;
/// each is now in Ironic's JSON error shape with its status. And a node may name only a
/// chassis that exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_in_ironics_shape_and_a_chassis_must_exist() {
    let s = start(|_| {}).await;
    let node = s.node(json!({"driver": "fake-hardware"})).await;
    std::fs::create_dir_all(s.dir.path().join("data/images")).unwrap();
    std::fs::write(s.dir.path().join("data/images/small.raw"), b"0123456789").unwrap();
    let big = vec![b' '; 2 << 20];
    let plain: [Refused; 6] = [
        (
            Method::GET,
            format!("/v1/nodes/{node}/history?bogus=1"),
            None,
            StatusCode::BAD_REQUEST,
            "bogus",
        ),
        (
            Method::GET,
            format!("/v1/nodes/{node}/history?limit=x"),
            None,
            StatusCode::BAD_REQUEST,
            "limit",
        ),
        (
            Method::DELETE,
            "/v1/deployd/drivers/fake?force=maybe".into(),
            None,
            StatusCode::BAD_REQUEST,
            "force",
        ),
        (
            Method::GET,
            "/images/nothing".into(),
            None,
            StatusCode::NOT_FOUND,
            "no such image",
        ),
        (
            Method::POST,
            "/v1/nodes".into(),
            Some(big),
            StatusCode::PAYLOAD_TOO_LARGE,
            "length limit",
        ),
        (
            Method::GET,
            "/images/small.raw".into(),
            None,
            StatusCode::OK,
            "",
        ),
    ];
    for (method, path, body, status, said) in plain {
        let a = s.call(method, &path, Some("1.78"), body).await;
        assert_eq!(a.status, status, "{path}: {:?}", a.body);
        if status.is_success() {
            continue;
        }
        assert!(a.fault().contains(said), "{path}: {}", a.fault());
    }
    let range = s
        .http
        .get(format!("{}/images/small.raw", s.base))
        .header("Range", "bytes=100-")
        .send()
        .await
        .unwrap();
    assert_eq!(range.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    let body: Value = range.json().await.unwrap();
    assert!(body["error_message"].is_string(), "{body}");

    let nowhere = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123";
    let before = super::count(&s).await;
    let a = s
        .send(
            Method::POST,
            "/v1/nodes",
            json!({"driver": "fake-hardware", "chassis_uuid": nowhere}),
        )
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.fault(), format!("Chassis {nowhere} could not be found."));
    assert_eq!(super::count(&s).await, before, "nothing was enrolled");
    let patch = json!([{"op": "add", "path": "/chassis_uuid", "value": nowhere}]);
    let a = s
        .send(Method::PATCH, &format!("/v1/nodes/{node}"), patch)
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{:?}", a.body);
    let chassis = s.send(Method::POST, "/v1/chassis", json!({})).await;
    let chassis = chassis.body["uuid"].as_str().unwrap().to_owned();
    let a = s
        .send(
            Method::POST,
            "/v1/nodes",
            json!({"driver": "fake-hardware", "chassis_uuid": chassis}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    assert_eq!(a.body["chassis_uuid"], chassis);
}

/// Stored documents are held to the limit nodes are (64 KiB a field, as JSON): a chassis
/// with a 900 KiB `extra` is refused, naming the field, and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_document_fields_are_refused_and_nothing_is_stored() {
    let s = start(|_| {}).await;
    let huge = json!({"pad": "x".repeat(900 << 10)});
    let a = s
        .send(Method::POST, "/v1/chassis", json!({"extra": huge}))
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{:?}", a.body);
    assert!(
        a.fault().contains("Chassis field extra is") && a.fault().contains("the limit is 65536"),
        "{}",
        a.fault()
    );
    assert_eq!(
        s.get("/v1/chassis").await.body["chassis"],
        json!([]),
        "nothing was stored"
    );
    let fits = json!({"pad": "x".repeat(60 << 10)});
    let a = s
        .send(
            Method::POST,
            "/v1/chassis",
            json!({"extra": fits, "description": "ok"}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    let uuid = a.body["uuid"].as_str().unwrap().to_owned();
    let patch = json!([{"op": "replace", "path": "/extra", "value": huge}]);
    let a = s
        .send(Method::PATCH, &format!("/v1/chassis/{uuid}"), patch)
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{:?}", a.body);
    let kept = s.get(&format!("/v1/chassis/{uuid}")).await.body;
    assert_eq!(kept["extra"]["pad"].as_str().unwrap().len(), 60 << 10);
    // Another field may still change beside the stored one.
    let patch = json!([{"op": "replace", "path": "/description", "value": "still ok"}]);
    let a = s
        .send(Method::PATCH, &format!("/v1/chassis/{uuid}"), patch)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
}

/// One client address holds at most its share of the connections: past it, it is told
/// so (its own connections all busy), while another address still gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_take_every_connection() {
    let s = start(|c| {
        c.api.max_connections = 4;
        c.api.max_connections_per_client = Some(2);
    })
    .await;
    let addr = s.engine.addr;
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = "POST /v1/nodes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n";
        tokio::io::AsyncWriteExt::write_all(&mut c, head.as_bytes())
            .await
            .unwrap();
        busy.push(c);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let read_all = |mut c: tokio::net::TcpStream| async move {
        let mut out = Vec::new();
        let read = tokio::io::AsyncReadExt::read_to_end(&mut c, &mut out);
        tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .unwrap()
            .unwrap();
        String::from_utf8_lossy(&out).into_owned()
    };
    let third = tokio::net::TcpStream::connect(addr).await.unwrap();
    let refusal = read_all(third).await;
    assert!(refusal.starts_with("HTTP/1.1 503"), "{refusal}");
    assert!(
        refusal.contains("This client holds its maximum of 2"),
        "{refusal}"
    );
    // Another address (a second loopback address) still gets in.
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = other.connect(addr).await.unwrap();
    let get = b"GET /v1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    tokio::io::AsyncWriteExt::write_all(&mut other, get)
        .await
        .unwrap();
    let answer = read_all(other).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(busy);
}
