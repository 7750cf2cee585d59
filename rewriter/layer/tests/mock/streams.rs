//! LIST and WATCH bodies through the layer: streamed, restored, batched, offloaded, cut.

use super::*;

#[tokio::test]
async fn a_list_streams_restored_before_upstream_ends() {
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let pending = call(
        &mut svc,
        get("/apis/kubevirt.io/v1/namespaces/demo/virtualmachines?limit=500"),
    );
    let (req, send) = handle
        .next_request()
        .await
        .expect("request reaches the inner service");
    assert_eq!(req.uri().path(), VMS_UP);
    assert_eq!(req.uri().query(), Some("limit=500"));
    assert_eq!(req.headers()[header::ACCEPT], "application/json");

    // The 300-VM capture, cut before item 100: the first items reach the caller before the
    // rest of the list exists (output leaves in pieces of about 64 KiB).
    let list = capture("vm-list-bulk-plain.json");
    let v: Value = serde_json::from_slice(&list).expect("capture");
    let first_name = v["items"][0]["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let second = item_offset(&list, 100);
    let (mut tx, resp) = streamed_response();
    send.send_response(resp);
    tx.send(Ok(http_body::Frame::data(Bytes::copy_from_slice(
        &list[..second],
    ))))
    .await
    .expect("send");
    // The head is answered once the layer has seen that the body is a list.
    let resp = pending.await.expect("task").expect("response");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains(&first_name) {
        let f = next_frame(&mut body).await.expect("a frame before the list ends");
        got.extend_from_slice(&f);
    }
    let head = String::from_utf8_lossy(&got);
    assert!(
        head.contains(r#""kind":"VirtualMachine""#) && !head.contains("InternalVirtualization"),
        "{head}"
    );

    tx.send(Ok(http_body::Frame::data(Bytes::copy_from_slice(
        &list[second..],
    ))))
    .await
    .expect("send");
    drop(tx);
    got.extend_from_slice(&body.collect().await.expect("rest").to_bytes());
    let out: Value = serde_json::from_slice(&got).expect("a whole JSON list");
    no_internal_names(&out);
    assert_eq!(out["kind"], "VirtualMachineList");
    assert_eq!(out["apiVersion"], "kubevirt.io/v1");
    assert_eq!(
        out["items"].as_array().map(Vec::len),
        v["items"].as_array().map(Vec::len)
    );
    assert_eq!(out["items"][0]["kind"], "VirtualMachine");
}

/// Where item `i` of a LIST body starts.
fn item_offset(list: &[u8], i: usize) -> usize {
    #[derive(serde::Deserialize)]
    struct Items<'a> {
        #[serde(borrow)]
        items: Vec<&'a serde_json::value::RawValue>,
    }
    let parsed: Items<'_> = serde_json::from_slice(list).expect("list");
    parsed.items[i].get().as_ptr() as usize - list.as_ptr() as usize
}

#[tokio::test]
async fn watch_events_leave_one_by_one_as_they_arrive() {
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let pending = call(
        &mut svc,
        get(
            "/apis/kubevirt.io/v1/namespaces/demo/virtualmachines?watch=true&labelSelector=kubevirt.io%2Fcreated-by%3Dx",
        ),
    );
    let (req, send) = handle.next_request().await.expect("request");
    assert_eq!(req.uri().path(), VMS_UP);
    let q = req.uri().query().expect("query");
    assert!(
        q.contains("labelSelector=kubevirt.internal.virtualization.deckhouse.io%2Fcreated-by%3Dx"),
        "selector renamed: {q}"
    );
    let (mut tx, resp) = streamed_response();
    send.send_response(resp);
    let mut body = pending.await.expect("task").expect("response").into_body();

    let events = capture("watch-vm-events.json");
    let lines: Vec<&[u8]> = events.split_inclusive(|&b| b == b'\n').collect();
    assert!(lines.len() >= 5, "capture has events");
    for line in lines {
        let upstream: Value = serde_json::from_slice(line).expect("event");
        tx.send(Ok(http_body::Frame::data(Bytes::copy_from_slice(line))))
            .await
            .expect("send");
        // The restored event arrives before the next one is sent.
        let f = next_frame(&mut body).await.expect("event frame");
        let ev: Value = serde_json::from_slice(&f).expect("one whole event");
        assert_eq!(ev["type"], upstream["type"]);
        no_internal_names(&ev["object"]);
        if ev["type"] != "BOOKMARK" {
            assert_eq!(ev["object"]["kind"], "VirtualMachine");
        }
    }
    drop(tx);
    assert!(
        next_frame(&mut body).await.is_none(),
        "the watch ends when upstream ends"
    );
}

/// Upstream's watch body as hyper's client hands it over: one frame held at a time, the next
/// one given by the connection's own task when it next runs (`tokio::sync::mpsc` of depth 1
/// fed by a task). Events that have already arrived leave the layer as one body frame; a lone
/// event later leaves by itself, without waiting for more.
#[tokio::test]
async fn watch_events_at_hand_leave_together_and_a_lone_one_without_waiting() {
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let pending = call(
        &mut svc,
        get("/apis/kubevirt.io/v1/namespaces/demo/virtualmachines?watch=true"),
    );
    let (_req, send) = handle.next_request().await.expect("request");
    let events = capture("watch-vm-events.json");
    let lines: Vec<Bytes> = events
        .split_inclusive(|&b| b == b'\n')
        .map(Bytes::copy_from_slice)
        .collect();
    assert!(lines.len() >= 5, "capture has events");
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, Infallible>>(1);
    let (lone_tx, lone_rx) = tokio::sync::oneshot::channel::<()>();
    let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
    let burst = lines.clone();
    let lone = lines[0].clone();
    tokio::spawn(async move {
        for l in burst {
            tx.send(Ok(http_body::Frame::data(l))).await.expect("send");
        }
        lone_rx.await.expect("lone signal");
        tx.send(Ok(http_body::Frame::data(lone))).await.expect("send");
        let _ = end_rx.await;
    });
    let resp = Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body::boxed(StreamBody::new(futures::stream::poll_fn(
            move |cx| rx.poll_recv(cx),
        ))))
        .expect("response");
    send.send_response(resp);
    let mut body = pending.await.expect("task").expect("response").into_body();

    let f = next_frame(&mut body).await.expect("the burst");
    let got: Vec<&[u8]> = f.split_inclusive(|&b| b == b'\n').collect();
    assert_eq!(got.len(), lines.len(), "every event at hand in one body frame");
    for ev in got {
        let ev: Value = serde_json::from_slice(ev).expect("a whole event");
        no_internal_names(&ev["object"]);
    }
    lone_tx.send(()).expect("producer waits");
    // The watch stays open (upstream sends no more): the lone event is not held for company.
    let f = next_frame(&mut body).await.expect("the lone event");
    let ev: Value = serde_json::from_slice(&f).expect("exactly one whole event");
    no_internal_names(&ev["object"]);
    end_tx.send(()).expect("producer waits");
    assert!(
        next_frame(&mut body).await.is_none(),
        "the watch ends when upstream ends"
    );
}

/// The 300-VM capture with its items repeated `times` over (4 times: 3.4 MB, past the point
/// where a LIST is rewritten on the blocking pool when the machine has cores to spare).
fn large_list(times: usize) -> Vec<u8> {
    #[derive(serde::Deserialize)]
    struct Items<'a> {
        #[serde(borrow)]
        items: Vec<&'a serde_json::value::RawValue>,
    }
    let list = capture("vm-list-bulk-plain.json");
    let parsed: Items<'_> = serde_json::from_slice(&list).expect("list");
    let items: Vec<&str> = (0..times)
        .flat_map(|_| parsed.items.iter().map(|i| i.get()))
        .collect();
    format!(
        r#"{{"apiVersion":"{INTERNAL}/v1","items":[{}],"kind":"InternalVirtualizationVirtualMachineList","metadata":{{"resourceVersion":"1"}}}}"#,
        items.join(",")
    )
    .into_bytes()
}

/// Starts a LIST of VMs through the layer; returns the call (answered once the body shows a
/// list) and the sender that feeds the body from upstream.
async fn list_through_layer(
    svc: &mut kube_api_rewriter_layer::RewriteService<Mock>,
    handle: &mut Handle,
) -> (
    tokio::task::JoinHandle<Result<Response<Body>, BoxError>>,
    mpsc::Sender<Result<http_body::Frame<Bytes>, BoxError>>,
) {
    list_through_layer_as(svc, handle, false).await
}

/// [`list_through_layer`]; with `gzip`, the client accepts gzip and upstream sends it.
async fn list_through_layer_as(
    svc: &mut kube_api_rewriter_layer::RewriteService<Mock>,
    handle: &mut Handle,
    gzip: bool,
) -> (
    tokio::task::JoinHandle<Result<Response<Body>, BoxError>>,
    mpsc::Sender<Result<http_body::Frame<Bytes>, BoxError>>,
) {
    let mut req = get("/apis/kubevirt.io/v1/namespaces/demo/virtualmachines");
    if gzip {
        req.headers_mut()
            .insert(header::ACCEPT_ENCODING, http::HeaderValue::from_static("gzip"));
    }
    let pending = call(svc, req);
    let (_, send) = handle.next_request().await.expect("request");
    let (tx, rx) = mpsc::channel(16);
    let mut resp = Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json");
    if gzip {
        resp = resp.header(header::CONTENT_ENCODING, "gzip");
    }
    send.send_response(resp.body(body::boxed(StreamBody::new(rx))).expect("response"));
    (pending, tx)
}

/// `list` restored whole by the core, as the layer's output must be.
fn core_restore(list: &[u8]) -> Vec<u8> {
    let rules = Rules::builtin_kubevirt();
    let mut out = Vec::new();
    let mut lr = kube_api_rewriter::ListRewriter::new(
        &rules,
        kube_api_rewriter::Direction::Restore,
        kube_api_rewriter::Context::default(),
    );
    lr.feed(list, &mut out).expect("core");
    lr.finish(&mut out).expect("core");
    out
}

async fn answered(pending: tokio::task::JoinHandle<Result<Response<Body>, BoxError>>) -> Body {
    let resp = pending.await.expect("task").expect("response");
    assert_eq!(resp.status(), 200);
    resp.into_body()
}

// Multi-threaded, as the proxy runs: a large LIST moves to the blocking pool part-way (on a
// machine with more than one core) and must come out exactly as the core rewrites it whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_list_comes_out_as_the_core_rewrites_it_whole() {
    let list = large_list(4);
    let want = core_restore(&list);

    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let (pending, mut tx) = list_through_layer(&mut svc, &mut handle).await;
    let feed = {
        let list = list.clone();
        tokio::spawn(async move {
            // Pieces of uneven sizes, as a socket delivers them.
            let (mut at, mut i) = (0, 0);
            while at < list.len() {
                let n = [7 << 10, 300 << 10, 1, 64 << 10, 433][i % 5].min(list.len() - at);
                let piece = Bytes::copy_from_slice(&list[at..at + n]);
                tx.send(Ok(http_body::Frame::data(piece))).await.expect("send");
                (at, i) = (at + n, i + 1);
            }
        })
    };
    let body = answered(pending).await;
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), body.collect())
        .await
        .expect("the list within 30 s")
        .expect("body")
        .to_bytes();
    feed.await.expect("feeder");
    assert!(got[..] == want[..], "the layer's output differs from the core's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_gzip_list_comes_out_gzipped_as_the_core_rewrites_it_whole() {
    use std::io::{Read as _, Write as _};
    let list = large_list(4);
    let want = core_restore(&list);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&list).expect("gzip");
    let zipped = gz.finish().expect("gzip");

    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let (pending, mut tx) = list_through_layer_as(&mut svc, &mut handle, true).await;
    let feed = tokio::spawn(async move {
        for p in zipped.chunks(16 << 10) {
            let piece = Bytes::copy_from_slice(p);
            tx.send(Ok(http_body::Frame::data(piece))).await.expect("send");
        }
    });
    let resp = pending.await.expect("task").expect("response");
    assert_eq!(resp.headers()[header::CONTENT_ENCODING], "gzip");
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), resp.into_body().collect())
        .await
        .expect("the list within 30 s")
        .expect("body")
        .to_bytes();
    feed.await.expect("feeder");
    let mut plain = Vec::new();
    flate2::read::MultiGzDecoder::new(&got[..])
        .read_to_end(&mut plain)
        .expect("gzip from the layer");
    assert!(plain == want, "the layer's output differs from the core's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_a_large_list_ends_the_upstream_body() {
    // 6.8 MB: far more than the channels in between hold once the client stops reading.
    let list = large_list(8);
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let (pending, mut tx) = list_through_layer(&mut svc, &mut handle).await;
    let feed = tokio::spawn(async move {
        for p in list.chunks(64 << 10) {
            let piece = Bytes::copy_from_slice(p);
            if tx.send(Ok(http_body::Frame::data(piece))).await.is_err() {
                return true; // Let go.
            }
        }
        false
    });
    let mut body = answered(pending).await;
    let mut read = 0;
    while read < 2 << 20 {
        read += next_frame(&mut body)
            .await
            .expect("output before the list ends")
            .len();
    }
    drop(body);
    let let_go = tokio::time::timeout(std::time::Duration::from_secs(10), feed)
        .await
        .expect("the feeder ends within 10 s")
        .expect("feeder");
    assert!(let_go, "the whole upstream body was read after the client left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_error_in_a_large_list_resets_the_response() {
    let list = large_list(4);
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let (pending, mut tx) = list_through_layer(&mut svc, &mut handle).await;
    tokio::spawn(async move {
        for p in list[..list.len() * 3 / 4].chunks(64 << 10) {
            let _ = tx
                .send(Ok(http_body::Frame::data(Bytes::copy_from_slice(p))))
                .await;
        }
        let _ = tx.send(Err("connection reset by peer".into())).await;
    });
    let body = answered(pending).await;
    let res = tokio::time::timeout(std::time::Duration::from_secs(30), body.collect())
        .await
        .expect("the end within 30 s");
    let err = res.expect_err("a cut list must not end cleanly");
    assert!(err.to_string().contains("connection reset by peer"), "{err}");
}
