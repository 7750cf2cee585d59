//! The streams through kube-apiserver to the fake virt-api: console, VNC and port-forward over
//! WebSocket.

use bytes::Bytes;
use futures::SinkExt as _;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{next_binary, vm_path};
use crate::env::{Env, SA};

pub fn console(e: &Env) {
    e.rt.block_on(async {
        let (mut ws, resp) = e
            .ws(&vm_path("vm-running", "console"), e.cp.get("ADMIN_TOKEN"))
            .await
            .expect("WebSocket opens");
        assert_eq!(resp.status(), 101);
        // Negotiated end to end with the fake virt-api.
        assert_eq!(resp.headers()["sec-websocket-protocol"], "plain.kubevirt.io");
        for line in [&b"hello console\r\n"[..], b"second line", &[0u8, 255, 10, 13][..]] {
            ws.send(Message::Binary(Bytes::copy_from_slice(line)))
                .await
                .unwrap();
            assert_eq!(next_binary(&mut ws).await, line);
        }
        ws.close(None).await.unwrap();
    });
    // The fake saw our service account, never the end user.
    let seen = e.fake.all();
    let c = seen
        .iter()
        .rev()
        .find(|s| s.path.ends_with("/virtualmachineinstances/vm-running/console"))
        .expect("console reached virt-api");
    assert_eq!(
        c.path,
        "/apis/subresources.kubevirt.io/v1/namespaces/demo/virtualmachineinstances/vm-running/console"
    );
    assert_eq!(
        (c.user.as_str(), c.groups.clone()),
        (SA, vec!["system:serviceaccounts".to_owned()])
    );
}

pub fn vnc(e: &Env) {
    e.rt.block_on(async {
        // Migrating is allowed for streams.
        let (mut ws, _) = e
            .ws(&vm_path("vm-migrating", "vnc"), e.cp.get("ADMIN_TOKEN"))
            .await
            .expect("WebSocket opens");
        assert_eq!(next_binary(&mut ws).await, b"RFB 003.008\n");
        ws.send(Message::Binary(Bytes::from_static(b"RFB 003.008\n")))
            .await
            .unwrap();
        assert_eq!(next_binary(&mut ws).await, b"RFB 003.008\n");
        ws.close(None).await.unwrap();
    });
}

pub fn portforward(e: &Env) {
    e.rt.block_on(async {
        let path = format!(
            "{}?port={}&protocol=tcp",
            vm_path("vm-running", "portforward"),
            e.echo_port
        );
        let (mut ws, _) = e
            .ws(&path, e.cp.get("ADMIN_TOKEN"))
            .await
            .expect("WebSocket opens");
        let payload: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
        ws.send(Message::Binary(Bytes::from(payload.clone())))
            .await
            .unwrap();
        let mut got = Vec::new();
        while got.len() < payload.len() {
            got.extend(next_binary(&mut ws).await);
        }
        assert_eq!(got, payload);
        ws.close(None).await.unwrap();
    });
    let seen = e.fake.all();
    assert!(
        seen.iter().any(|s| s.path == format!("/apis/subresources.kubevirt.io/v1/namespaces/demo/virtualmachineinstances/vm-running/portforward/{}/tcp", e.echo_port)),
        "{seen:?}"
    );
}
