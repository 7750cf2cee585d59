//! Part 2's upstream double: hyper's HTTP/1.1 server in this process, serving pre-built bodies
//! at memory speed (a LIST of renamed VMs, the same bytes on a path the rules do not touch, a
//! watch stream, a small object; and for a peer, a LIST of ConfigMaps that the rules leave as
//! they are).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;

use crate::{GROUP, KIND, RESOURCE, Result};
use kube_api_rewriter_testkit::vm::Vm;

/// The double's bodies, built once.
pub(crate) struct Fixtures {
    pub(crate) list: Bytes,
    pub(crate) items: usize,
    events: Vec<Bytes>,
    pub(crate) watch_events: usize,
    pub(crate) small: Bytes,
    /// A LIST of ConfigMaps with nothing the rules rename (empty unless asked for).
    pub(crate) unchanged: Bytes,
}

/// Where the double serves [`Fixtures::unchanged`].
pub(crate) const UNCHANGED_PATH: &str = "/api/v1/namespaces/bench/configmaps";

/// Builds a LIST of at least `list_mb` MiB of renamed VMs, a watch of `watch_events` events and
/// a small object; with `unchanged`, a ConfigMap LIST of about the same size too.
pub(crate) fn fixtures(list_mb: usize, watch_events: usize, unchanged: bool) -> Fixtures {
    let template = Vm::new("vm-XXXXXXX", crate::NS)
        .renamed()
        .stored()
        .json()
        .to_string();
    let mut list = format!(r#"{{"apiVersion":"{GROUP}/v1","items":["#).into_bytes();
    let target = list_mb << 20;
    let mut items = 0;
    while list.len() < target {
        if items > 0 {
            list.push(b',');
        }
        list.extend_from_slice(template.replace("XXXXXXX", &format!("{items:07}")).as_bytes());
        items += 1;
    }
    list.extend_from_slice(
        format!(r#"],"kind":"{KIND}List","metadata":{{"continue":"","resourceVersion":"123456"}}}}"#)
            .as_bytes(),
    );
    let events = (0..1000)
        .map(|i| {
            let obj = template.replace("XXXXXXX", &format!("{i:07}"));
            Bytes::from(format!("{{\"type\":\"MODIFIED\",\"object\":{obj}}}\n"))
        })
        .collect();
    Fixtures {
        list: Bytes::from(list),
        items,
        events,
        watch_events,
        small: Bytes::from(
            Vm::new("vm-small", crate::NS)
                .renamed()
                .stored()
                .small()
                .to_string(),
        ),
        unchanged: if unchanged {
            configmap_list(list_mb)
        } else {
            Bytes::new()
        },
    }
}

/// A LIST of at least `mb` MiB of ConfigMaps of about 5 KB, each holding a configuration file,
/// with labels and annotations no rule names.
fn configmap_list(mb: usize) -> Bytes {
    let file: String = (0..100)
        .map(|i| format!("setting_{i:02}: \\\"value {i} of the bench configuration\\\"\\n"))
        .collect();
    let mut list = br#"{"apiVersion":"v1","items":["#.to_vec();
    let mut i = 0;
    while list.len() < mb << 20 {
        if i > 0 {
            list.push(b',');
        }
        list.extend_from_slice(
            format!(
                r#"{{"apiVersion":"v1","data":{{"app.yaml":"{file}","mode":"bench"}},"kind":"ConfigMap","metadata":{{"annotations":{{"bench.example.com/owner":"team-a"}},"creationTimestamp":"2026-01-01T00:00:00Z","labels":{{"app.kubernetes.io/instance":"cm-{i:07}","app.kubernetes.io/name":"bench"}},"name":"cm-{i:07}","namespace":"bench","resourceVersion":"{}","uid":"00000000-0000-4000-8000-{i:012}"}}}}"#,
                1000 + i
            )
            .as_bytes(),
        );
        i += 1;
    }
    list.extend_from_slice(br#"],"kind":"ConfigMapList","metadata":{"resourceVersion":"123456"}}"#);
    Bytes::from(list)
}

/// The double's response body: slices of a shared buffer, or events one by one.
enum DBody {
    Chunks { data: Bytes, chunk: usize },
    Events { ev: Arc<Fixtures>, i: usize },
}

impl hyper::body::Body for DBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        Poll::Ready(match this {
            DBody::Chunks { data, chunk } => {
                if data.is_empty() {
                    None
                } else {
                    let n = (*chunk).min(data.len());
                    Some(Ok(Frame::data(data.split_to(n))))
                }
            }
            DBody::Events { ev, i } => {
                if *i >= ev.watch_events {
                    None
                } else {
                    let e = ev.events[*i % ev.events.len()].clone();
                    *i += 1;
                    Some(Ok(Frame::data(e)))
                }
            }
        })
    }
}

fn double_route(f: &Arc<Fixtures>, req: &Request<Incoming>) -> Response<DBody> {
    let path = req.uri().path();
    let watch = req
        .uri()
        .query()
        .is_some_and(|q| q.contains("watch=1") || q.contains("watch=true"));
    let chunks = |data: Bytes| DBody::Chunks {
        data,
        chunk: 32 << 10,
    };
    let (status, body) = if path == "/readyz" {
        (StatusCode::OK, chunks(Bytes::from_static(b"ok")))
    } else if path.ends_with("/vm-small") || path.ends_with("/widgets/w1") {
        (StatusCode::OK, chunks(f.small.clone()))
    } else if path.ends_with(&format!("/{RESOURCE}")) && watch {
        (
            StatusCode::OK,
            DBody::Events {
                ev: Arc::clone(f),
                i: 0,
            },
        )
    } else if path.ends_with(&format!("/{RESOURCE}")) || path.ends_with("/widgets") {
        (StatusCode::OK, chunks(f.list.clone()))
    } else if path == UNCHANGED_PATH && !f.unchanged.is_empty() {
        (StatusCode::OK, chunks(f.unchanged.clone()))
    } else {
        (StatusCode::NOT_FOUND, chunks(Bytes::from_static(b"{}")))
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// Starts the double on its own runtime thread; returns its address.
pub(crate) fn start_double(f: Arc<Fixtures>) -> Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    l.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("double")
        .enable_all()
        .build()?;
    std::thread::spawn(move || {
        rt.block_on(async move {
            let Ok(l) = tokio::net::TcpListener::from_std(l) else {
                return;
            };
            loop {
                let Ok((s, _)) = l.accept().await else { continue };
                let _ = s.set_nodelay(true);
                let f = Arc::clone(&f);
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let r = double_route(&f, &req);
                        async move { Ok::<_, Infallible>(r) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), svc)
                        .await;
                });
            }
        });
    });
    Ok(addr)
}
