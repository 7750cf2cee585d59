//! What the controller asks of a VM through virtualization-api, the aggregated API
//! `subresources.virtualization.deckhouse.io/v1alpha2` (served behind kube-apiserver's
//! aggregator, reached through the controller's own client, so its rewriter sidecar passes the
//! group untouched): freezing and thawing the guest's filesystems for a consistent snapshot,
//! and hot-plugging disks. virtualization-api hands each call to KubeVirt's virt-api, which
//! hands freezes to virt-handler on the VM's Node.

use std::time::Duration;

use kube::Client;

use crate::Result;

/// The group/version of the subresources.
pub const API: &str = "/apis/subresources.virtualization.deckhouse.io/v1alpha2";

/// A disk to hot-plug (`addvolume`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddVolume<'a> {
    /// The volume's and the disk's name in the KubeVirt VM.
    pub name: &'a str,
    /// `VirtualDisk`.
    pub volume_kind: &'a str,
    /// The claim holding the disk.
    pub pvc_name: &'a str,
    /// The serial number the guest sees.
    pub serial: &'a str,
}

/// The path of subresource `sub` of VM `ns/name`.
fn path(ns: &str, name: &str, sub: &str) -> String {
    format!("{API}/namespaces/{ns}/virtualmachines/{name}/{sub}")
}

/// Sends `PUT path` with `body`; an error status comes back as [`kube::Error::Api`].
async fn put(client: &Client, path: String, body: Vec<u8>) -> Result<()> {
    // What client-go sends: virt-api's routes that declare no representation (freeze,
    // unfreeze) answer anything narrower with 406 Not Acceptable.
    let req = http::Request::put(path)
        .header(http::header::ACCEPT, "application/json, */*")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    client.request_text(req).await?;
    Ok(())
}

/// Freezes the guest's filesystems; the guest thaws them itself after `unfreeze_timeout`
/// should no [`unfreeze`] come (a controller that died mid-snapshot).
pub async fn freeze(client: &Client, ns: &str, name: &str, unfreeze_timeout: Duration) -> Result<()> {
    let body = serde_json::json!({"unfreezeTimeout": format!("{}s", unfreeze_timeout.as_secs())});
    put(client, path(ns, name, "freeze"), serde_json::to_vec(&body)?).await
}

/// Thaws the guest's filesystems.
pub async fn unfreeze(client: &Client, ns: &str, name: &str) -> Result<()> {
    put(client, path(ns, name, "unfreeze"), Vec::new()).await
}

/// The query of an `addvolume` (virtualization-api reads its options from the query).
fn add_volume_query(v: &AddVolume<'_>) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("name", v.name)
        .append_pair("volumeKind", v.volume_kind)
        .append_pair("pvcName", v.pvc_name)
        .append_pair("serial", v.serial)
        .finish()
}

/// Hot-plugs a disk into the running VM `ns/name`.
pub async fn add_volume(client: &Client, ns: &str, name: &str, volume: &AddVolume<'_>) -> Result<()> {
    let p = format!("{}?{}", path(ns, name, "addvolume"), add_volume_query(volume));
    put(client, p, Vec::new()).await
}

/// Unplugs the volume `volume` from VM `ns/name`.
pub async fn remove_volume(client: &Client, ns: &str, name: &str, volume: &str) -> Result<()> {
    let q = form_urlencoded::Serializer::new(String::new())
        .append_pair("name", volume)
        .finish();
    put(
        client,
        format!("{}?{q}", path(ns, name, "removevolume")),
        Vec::new(),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_queries() {
        assert_eq!(
            path("ns", "vm", "freeze"),
            "/apis/subresources.virtualization.deckhouse.io/v1alpha2/namespaces/ns/virtualmachines/vm/freeze"
        );
        let q = add_volume_query(&AddVolume {
            name: "vd-data",
            volume_kind: "VirtualDisk",
            pvc_name: "vd-data-1 2",
            serial: "s&1",
        });
        assert_eq!(
            q,
            "name=vd-data&volumeKind=VirtualDisk&pvcName=vd-data-1+2&serial=s%261"
        );
    }
}
